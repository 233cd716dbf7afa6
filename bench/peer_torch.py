#!/usr/bin/env python3
"""The PyTorch peer of weft's runtime (a benchmark: prints numbers, never
pass/fail).

Runs the same models, batch, optimizer and plans in weft (`weft train`) and in
PyTorch, interleaved (round after round, each row weft then PyTorch), one BLAS
thread per process, and prints per row the median step of each and the ratio
PyTorch / weft. Rows (global batch):

  mlp 1024-4096-4096-10 (ReLU)           1 process (64), dp=2 (128)
  gpt 4 layers, hidden 256, seq 128      1 process (8), dp=2 (16), tp=2 (16), pp=2 (8, micro-batches of 2)
  gpt 4 layers, hidden 512, seq 256      the same

gpt is weft's GPT (src/models/transformer.c): learned positions, pre-LN
layers with fused qkv (bias), causal attention, GELU MLP of 4 h, dropout 0.1
after the embedding, the attention probabilities and both residual branches,
final LN, the output head tied to the token table, vocab 2048. AdamW (lr 1e-3,
betas 0.9/0.999, eps 1e-8, weight decay 0.01 on tensors of 2 or more
dimensions), gradients clipped to global norm 1, as weft's defaults.

PyTorch plans, written with torch.distributed over gloo (Debian's
python3-torch 1.13 has no tensor or pipeline parallelism for CPUs):
  dp=2  DistributedDataParallel (its default 25 MiB buckets);
  tp=2  Megatron-LM's scheme: qkv and fc1 split by columns (heads), proj and
        fc2 by rows with an all-reduce after them, the tied table and the
        head split by vocabulary (a vocabulary-parallel embedding and cross
        entropy), norms and positions replicated;
  pp=2  two stages (embedding and layers 0-1; layers 2-3, final LN, head and
        loss), GPipe over 4 micro-batches, activations and their gradients
        sent point to point; the tied table's gradient all-reduced between
        the stages' copies, as Megatron-LM does for its first and last stage.

Per row it also prints weft's GEMM-bound limit of the step and the share of
it weft reaches (limit / weft's median): `weft estimate --json` of the row's
plan under the runtime's profile (sw=weft) on this machine's calibrated
cluster, breakdown compute + recompute + optimizer + bubble -- every product
at the sgemm rate `weft calibrate` measured for its shape, the memory-bound
ops and AdamW at the measured bandwidth, the pipeline's bubble, no
communication (bench_runtime's `lim_ms`). The cluster is `--cluster FILE`, or
measured once at the start by `mpiexec -n 2 weft calibrate --quick` (both
ranks at once, as the 2-rank rows run).

Usage: peer_torch.py [--weft build/weft] [--mpiexec mpiexec] [--rounds 3]
                     [--steps 8] [--only mlp|gpt256|gpt512] [--cluster FILE]
Exits 0 with a line saying so when PyTorch is absent.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROWS = [
    # label, weft model spec, plan, ranks, global batch, weft plan
    ("mlp", "1 process", 1, 64, "dp=1"),
    ("mlp", "dp=2", 2, 128, "dp=2"),
    ("gpt256", "1 process", 1, 8, "dp=1"),
    ("gpt256", "dp=2", 2, 16, "dp=2"),
    ("gpt256", "tp=2", 2, 16, "tp=2"),
    ("gpt256", "pp=2", 2, 8, "pp=2,mbs=2,pipe=gpipe"),
    ("gpt512", "1 process", 1, 8, "dp=1"),
    ("gpt512", "dp=2", 2, 16, "dp=2"),
    ("gpt512", "tp=2", 2, 16, "tp=2"),
    ("gpt512", "pp=2", 2, 8, "pp=2,mbs=2,pipe=gpipe"),
]

MODELS = {
    "mlp": {"kind": "mlp", "sizes": [1024, 4096, 4096, 10], "spec": "mlp:sizes=1024-4096-4096-10"},
    "gpt256": {"kind": "gpt", "layers": 4, "hidden": 256, "heads": 4, "seq": 128, "vocab": 2048,
               "spec": "gpt:layers=4,hidden=256,heads=4,seq=128,vocab=2048,dtype=fp32"},
    "gpt512": {"kind": "gpt", "layers": 4, "hidden": 512, "heads": 8, "seq": 256, "vocab": 2048,
               "spec": "gpt:layers=4,hidden=512,heads=8,seq=256,vocab=2048,dtype=fp32"},
}


# ---- the PyTorch side (imported only in workers) ---------------------------------------------------

def torch_worker(a):
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F

    torch.set_num_threads(1)
    torch.manual_seed(0)
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    m = MODELS[a.model]
    plan = a.plan

    class AllReduceFwd(torch.autograd.Function):  # Megatron's g: sum forward, identity backward
        @staticmethod
        def forward(ctx, x):
            x = x.clone()
            dist.all_reduce(x)
            return x

        @staticmethod
        def backward(ctx, g):
            return g

    class AllReduceBwd(torch.autograd.Function):  # Megatron's f: identity forward, sum backward
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, g):
            g = g.clone()
            dist.all_reduce(g)
            return g

    tp = world if plan == "tp" else 1

    class Block(nn.Module):
        def __init__(self, h, heads):
            super().__init__()
            self.heads = heads // tp
            self.d = h // heads
            self.ln1 = nn.LayerNorm(h)
            self.qkv = nn.Linear(h, 3 * h // tp)
            self.proj = nn.Linear(h // tp, h, bias=(rank == 0 or tp == 1))
            self.ln2 = nn.LayerNorm(h)
            self.fc1 = nn.Linear(h, 4 * h // tp)
            self.fc2 = nn.Linear(4 * h // tp, h, bias=(rank == 0 or tp == 1))

        def forward(self, x):
            B, S, H = x.shape
            h = self.ln1(x)
            if tp > 1:
                h = AllReduceBwd.apply(h)
            q, k, v = self.qkv(h).view(B, S, 3, self.heads, self.d).permute(2, 0, 3, 1, 4)
            att = (q @ k.transpose(-1, -2)) * (self.d ** -0.5)
            mask = torch.ones(S, S, dtype=torch.bool).triu(1)
            att = F.dropout(att.masked_fill(mask, float("-inf")).softmax(-1), 0.1, self.training)
            o = (att @ v).transpose(1, 2).reshape(B, S, self.heads * self.d)
            o = self.proj(o)
            if tp > 1:
                o = AllReduceFwd.apply(o)
            x = x + F.dropout(o, 0.1, self.training)
            h = self.ln2(x)
            if tp > 1:
                h = AllReduceBwd.apply(h)
            o = self.fc2(F.gelu(self.fc1(h), approximate="tanh"))
            if tp > 1:
                o = AllReduceFwd.apply(o)
            return x + F.dropout(o, 0.1, self.training)

    class GPT(nn.Module):
        def __init__(self, stage=None):  # stage None: whole model; 0/1: a pipeline stage
            super().__init__()
            h, V = m["hidden"], m["vocab"]
            self.stage = stage
            first, last = stage in (None, 0), stage in (None, 1)
            L = m["layers"] if stage is None else m["layers"] // 2
            self.wte = nn.Parameter(torch.randn(V // tp, h) * 0.02)  # tied table (vocabulary shard under tp)
            if first:
                self.wpe = nn.Parameter(torch.randn(m["seq"], h) * 0.02)
            self.blocks = nn.ModuleList([Block(h, m["heads"]) for _ in range(L)])
            if last:
                self.lnf = nn.LayerNorm(h)

        def embed(self, ids):
            if tp == 1:
                x = F.embedding(ids, self.wte)
            else:  # vocabulary-parallel: the rows this rank holds, summed over the ranks
                lo = rank * self.wte.shape[0]
                inside = (ids >= lo) & (ids < lo + self.wte.shape[0])
                x = F.embedding((ids - lo).clamp(0, self.wte.shape[0] - 1), self.wte) * inside.unsqueeze(-1)
                x = AllReduceFwd.apply(x)
            return F.dropout(x + self.wpe, 0.1, self.training)

        def head_loss(self, x, labels):
            x = self.lnf(x)
            if tp == 1:
                logits = x @ self.wte.t()
                return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
            x = AllReduceBwd.apply(x)
            logits = (x @ self.wte.t()).reshape(-1, self.wte.shape[0])  # [T, V/tp]
            lab = labels.reshape(-1)
            with torch.no_grad():
                mx = logits.max(-1).values
                dist.all_reduce(mx, op=dist.ReduceOp.MAX)
            z = logits - mx.unsqueeze(-1)
            sumexp = AllReduceFwd.apply(z.exp().sum(-1))
            lo = rank * self.wte.shape[0]
            inside = (lab >= lo) & (lab < lo + self.wte.shape[0])
            tgt = z.gather(1, (lab - lo).clamp(0, self.wte.shape[0] - 1).unsqueeze(1)).squeeze(1) * inside
            tgt = AllReduceFwd.apply(tgt)
            return (sumexp.log() - tgt).mean()

        def forward(self, x, labels=None):
            if self.stage in (None, 0):
                x = self.embed(x)
            for b in self.blocks:
                x = b(x)
            if self.stage in (None, 1):
                return self.head_loss(x, labels)
            return x

    if m["kind"] == "mlp":
        s = m["sizes"]
        layers = []
        for i in range(len(s) - 1):
            layers.append(nn.Linear(s[i], s[i + 1]))
            if i + 2 < len(s):
                layers.append(nn.ReLU())
        model = nn.Sequential(*layers)
    elif plan == "pp":
        model = GPT(stage=rank)
    else:
        model = GPT()
    model.train()
    params = list(model.parameters())
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
    net = model
    if plan == "dp" and world > 1:
        net = nn.parallel.DistributedDataParallel(model)

    B = a.batch // world if plan == "dp" else a.batch
    g = torch.Generator().manual_seed(rank if plan == "dp" else 0)
    if m["kind"] == "mlp":
        data = (torch.randn(B, m["sizes"][0], generator=g), torch.randint(0, m["sizes"][-1], (B,), generator=g))
    else:
        data = (torch.randint(0, m["vocab"], (B, m["seq"]), generator=g),
                torch.randint(0, m["vocab"], (B, m["seq"]), generator=g))

    def clip(params_all):
        if plan == "tp":  # replicated tensors counted once: the norm of the whole gradient
            sq = torch.zeros(1)
            for p in params_all:
                if p.grad is None:
                    continue
                sharded = p.shape[0] * world == m["vocab"] or getattr(p, "_tp_split", False)
                w = 1.0 if sharded or rank == 0 else 0.0
                sq += w * p.grad.pow(2).sum()
            dist.all_reduce(sq)
            f = min(1.0, 1.0 / (float(sq.sqrt()) + 1e-6))
            for p in params_all:
                if p.grad is not None:
                    p.grad.mul_(f)
        elif plan == "pp":
            sq = torch.stack([p.grad.pow(2).sum() for p in params_all if p.grad is not None]).sum().reshape(1)
            dist.all_reduce(sq)
            f = min(1.0, 1.0 / (float(sq.sqrt()) + 1e-6))
            for p in params_all:
                if p.grad is not None:
                    p.grad.mul_(f)
        else:
            torch.nn.utils.clip_grad_norm_(params_all, 1.0)

    if plan == "tp":  # which parameters are split over the ranks (the rest replicated)
        for blk in model.blocks:
            for lin in (blk.qkv, blk.fc1):
                lin.weight._tp_split = True
                lin.bias._tp_split = True
            for lin in (blk.proj, blk.fc2):
                lin.weight._tp_split = True

    mb = 2  # pipeline micro-batch
    h = m.get("hidden", 0)

    def step():
        opt.zero_grad(set_to_none=True)
        if plan == "pp":
            nmb = B // mb
            if rank == 0:
                outs = []
                for i in range(nmb):
                    y = net(data[0][i * mb:(i + 1) * mb])
                    dist.send(y.detach().contiguous(), 1)
                    outs.append(y)
                for i in range(nmb):
                    gy = torch.empty(mb, m["seq"], h)
                    dist.recv(gy, 1)
                    outs[i].backward(gy)
            else:
                ins, losses = [], []
                for i in range(nmb):
                    x = torch.empty(mb, m["seq"], h)
                    dist.recv(x, 0)
                    x.requires_grad_(True)
                    ins.append(x)
                    losses.append(net(x, data[1][i * mb:(i + 1) * mb]) / nmb)
                for i in range(nmb):
                    losses[i].backward()
                    dist.send(ins[i].grad.contiguous(), 0)
            dist.all_reduce(model.wte.grad)  # the tied table's two copies
        else:
            if m["kind"] == "mlp":
                loss = F.cross_entropy(net(data[0]), data[1])
            else:
                loss = net(data[0], data[1])
            loss.backward()
        clip(params)
        opt.step()

    times = []
    for _ in range(a.steps):
        if world > 1:
            dist.barrier()
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    if world > 1:
        t = torch.tensor(times)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        times = t.tolist()
    if rank == 0:
        print(json.dumps({"times": times}), flush=True)
    if world > 1:
        # gloo's teardown (destroy_process_group, or the interpreter's exit
        # with the group alive) has hung a rank for the 900 s watchdog here:
        # the numbers are out, so every rank leaves at once.
        dist.barrier()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


# ---- the driver ----------------------------------------------------------------------------------

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def median_after_warmup(ts, warm):
    ts = ts[warm:] if len(ts) > warm else ts
    return statistics.median(ts)


def run_torch(py, model, plan, ranks, batch, steps, env, timeout_s=900):
    port = str(free_port())
    procs = []
    for r in range(ranks):
        e = dict(env, RANK=str(r), WORLD_SIZE=str(ranks), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        procs.append(subprocess.Popen([py, os.path.abspath(__file__), "--worker", "--model", model, "--plan", plan,
                                       "--batch", str(batch), "--steps", str(steps)],
                                      env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=timeout_s))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise RuntimeError("PyTorch workers still running after %d s: stopped" % timeout_s)
    for r, (p, (o, err)) in enumerate(zip(procs, outs)):
        if p.returncode != 0 or (r == 0 and not o.strip()):
            last = err.strip().splitlines()[-1] if err.strip() else "no message"
            raise RuntimeError("PyTorch worker %d failed (exit %d): %s" % (r, p.returncode, last))
    return json.loads(outs[0][0].strip().splitlines()[-1])["times"]


def autogroup_nice():
    """This session's autogroup nice value (Linux), 0 when unknown. The bench
    may run with its session's priority raised (docs/runtime.md, "Benchmark");
    PyTorch's workers are children of this session and share it, but MPI's
    process manager starts weft's ranks in sessions of their own: they are
    given the same value, so that both frameworks run at the same priority."""
    try:
        with open("/proc/self/autogroup") as f:
            return int(f.read().split()[-1])
    except (OSError, ValueError, IndexError):
        return 0


def run_weft(weft, mpiexec, model, wplan, ranks, batch, steps, env):
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "log.json")
        cmd = [weft, "train", "--model", MODELS[model]["spec"], "--data", "synthetic", "--batch", str(batch),
               "--plan", wplan, "--steps", str(steps), "--log", log, "--print-every", str(steps)]
        if ranks > 1:
            nice = autogroup_nice()
            if nice != 0:
                cmd = ["sh", "-c", 'echo %d > /proc/self/autogroup 2>/dev/null; exec "$@"' % nice, "sh"] + cmd
            cmd = [mpiexec, "-n", str(ranks)] + cmd
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if p.returncode != 0:
            raise RuntimeError("weft failed: " + (p.stderr.strip().splitlines() or ["?"])[-1])
        with open(log) as f:
            return [json.loads(line)["time_s"] for line in f if line.strip()]


def weft_limit(weft, cluster, model, wplan, batch, env):
    """The row's GEMM-bound limit in seconds (module docstring), None when the
    estimate fails (its message printed)."""
    plan = wplan if "mbs=" in wplan else "%s,mbs=%d" % (wplan, batch // (2 if "dp=2" in wplan else 1))
    plan += ",sw=weft"
    p = subprocess.run([weft, "estimate", "--model", MODELS[model]["spec"], "--cluster", cluster, "--batch",
                        str(batch), "--plan", plan, "--json"], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        print("  %s %s: no limit (weft estimate: %s)" % (model, wplan, (p.stderr.strip().splitlines() or ["?"])[-1]))
        return None
    b = json.loads(p.stdout)["breakdown"]
    return b["compute"] + b["recompute"] + b["optimizer"] + b["bubble"]


def calibrate(weft, mpiexec, out, env):
    p = subprocess.run([mpiexec, "-n", "2", weft, "calibrate", "--quick", "-o", out], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise RuntimeError("weft calibrate failed: " + (p.stderr.strip().splitlines() or ["?"])[-1])


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--model")
    ap.add_argument("--plan")
    ap.add_argument("--batch", type=int)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--weft", default="build/weft")
    ap.add_argument("--mpiexec", default=os.environ.get("MPIEXEC", "mpiexec"))
    ap.add_argument("--python", default="/usr/bin/python3", help="the Python with PyTorch (Debian's)")
    ap.add_argument("--only", default="")
    ap.add_argument("--cluster", default="", help="the calibrated cluster of the limit column (default: calibrate)")
    a = ap.parse_args()
    if a.worker:
        torch_worker(a)
        return 0
    chk = subprocess.run([a.python, "-c", "import torch, torch.distributed as d; "
                          "print(torch.__version__, d.is_gloo_available())"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    if chk.returncode != 0 or "True" not in chk.stdout:
        print("peer_torch: PyTorch with gloo is absent (%s; Debian: scripts/setup-deps --bench): peer skipped"
              % a.python)
        return 0
    if not os.access(a.weft, os.X_OK):
        print("peer_torch: %s is not an executable weft (--weft PATH)" % a.weft, file=sys.stderr)
        return 1
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    blas = subprocess.run([a.weft, "train", "--model", "mlp-tiny", "--data", "synthetic", "--batch", "8",
                           "--plan", "dp=1", "--steps", "1"], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True).stderr
    blas = next((l[11:] for l in blas.splitlines() if l.startswith("blas ")), "?")
    rows = [r for r in ROWS if not a.only or r[0] == a.only]
    print("PyTorch %s (%s) against weft (%s); BLAS %s; OPENBLAS_CORETYPE=%s" %
          (chk.stdout.split()[0], a.python, a.weft, blas, env.get("OPENBLAS_CORETYPE", "(unset)")))
    print("%d rounds, interleaved (each row: weft, then PyTorch), %d steps per run, median of the steps after %d; "
          "load %s" % (a.rounds, a.steps, a.warmup, loadavg()), flush=True)
    tmp = tempfile.TemporaryDirectory()
    cluster = a.cluster
    if not cluster:
        cluster = os.path.join(tmp.name, "cluster.json")
        try:
            calibrate(a.weft, a.mpiexec, cluster, env)
        except RuntimeError as e:
            print("peer_torch: %s (--cluster FILE)" % e, file=sys.stderr)
            return 1
        print("calibrated: mpiexec -n 2 %s calibrate --quick (load %s)" % (a.weft, loadavg()), flush=True)
    limits = [weft_limit(a.weft, cluster, model, wplan, batch, env) for (model, _, _, batch, wplan) in rows]
    res = {i: ([], []) for i in range(len(rows))}
    for rnd in range(a.rounds):
        for i, (model, plan, ranks, batch, wplan) in enumerate(rows):
            tplan = "dp" if plan in ("1 process", "dp=2") else plan.split("=")[0]
            try:
                w = median_after_warmup(run_weft(a.weft, a.mpiexec, model, wplan, ranks, batch, a.steps, env),
                                        a.warmup)
                t = median_after_warmup(run_torch(a.python, model, tplan, ranks, batch, a.steps, env), a.warmup)
            except RuntimeError as e:
                print("  %s %s: %s" % (model, plan, e))
                continue
            res[i][0].append(w)
            res[i][1].append(t)
            print("  round %d  %-6s %-9s weft %8.1f ms  PyTorch %8.1f ms  ratio %.2f  (load %s)"
                  % (rnd + 1, model, plan, 1e3 * w, 1e3 * t, t / w, loadavg()), flush=True)
    print("\n| model | plan | ranks | global batch | weft ms | limit ms | % of limit | PyTorch ms | PyTorch / weft |")
    print("|---|---|---|---|---|---|---|---|---|")
    for i, (model, plan, ranks, batch, _) in enumerate(rows):
        w, t = res[i]
        lim = "%.1f" % (1e3 * limits[i]) if limits[i] else "-"
        if not w:
            print("| %s | %s | %d | %d | - | %s | - | - | - |" % (model, plan, ranks, batch, lim))
            continue
        mw, mt = statistics.median(w), statistics.median(t)
        pct = "%.0f%%" % (100 * limits[i] / mw) if limits[i] else "-"
        print("| %s | %s | %d | %d | %.1f | %s | %s | %.1f | %.2f |"
              % (model, plan, ranks, batch, 1e3 * mw, lim, pct, 1e3 * mt, mt / mw))
    tmp.cleanup()
    print("load %s" % loadavg())
    return 0


if __name__ == "__main__":
    sys.exit(main())

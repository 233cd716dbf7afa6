"""The matrix-product time of weft's measured-kernel device model, in Python, for the
fit scripts (scripts/fit-kernels, fit-kernels-a100, fit-kernels-v100). It mirrors
wf_gemm_time in src/cluster/kernel_model.c, split-K included: keep the two in step.
A helper for the scripts, not part of the product."""
import math

SMALL = [(128, 128), (128, 64), (64, 64)]
SPLITK_MAX, SPLITK_MIN_K = 32, 256.0


def tile_fit(tile, dim):
    p = 16
    while p < dim and p < tile:
        p *= 2
    return min(p, tile)


def split_max(sms, tiles, K):
    s = min(math.ceil(sms / tiles), SPLITK_MAX, math.floor(K / SPLITK_MIN_K))
    return int(s) if s > 1 else 1


def gemm_time(dev, f, M, N, K, count=1):
    """dev: sms, peak (FLOP/s of the kind), bw (copy bytes/s achieved), eb, ob (operand
    and output bytes). f: tm, tn, eff, ramp_k, wave_k, quant, launch (s), feed
    (bytes/s per SM; 0: the fitted tile only)."""
    sms, peak, bw, eb, ob = dev["sms"], dev["peak"], dev["bw"], dev["eb"], dev["ob"]
    ab, mn = count * (M * K + K * N) * eb, count * M * N
    per_sm = peak / sms * f["eff"]
    feed = f.get("feed", 0)
    best = float("inf")
    for t1, t2 in [(f["tm"], f["tn"])] + (SMALL if feed > 0 else []):
        for a, b in ((t1, t2), (t2, t1)):
            tm, tn = tile_fit(a, M), tile_fit(b, N)
            fed = 2 * tm * tn / ((tm + tn) * eb) * feed if feed > 0 else float("inf")
            slow = per_sm / fed if fed < per_sm else 1.0
            tiles = count * math.ceil(M / tm) * math.ceil(N / tn)
            for s in range(1, split_max(sms, tiles, K) + 1):
                w = tiles * s / sms
                waves = w + f["quant"] * (math.ceil(w) - w)
                t = 2 * tm * tn * (waves * (math.ceil(K / s) + f["wave_k"]) + f["ramp_k"]) / per_sm * slow
                t = max(t, (ab + mn * (4.0 * s if s > 1 else ob)) / bw)
                if s > 1:
                    t += f["launch"] + mn * (4.0 * s + ob) / bw
                best = min(best, t)
    return f["launch"] + best


def nelder_mead(fn, x0, steps, iters):
    n = len(x0)
    S = [list(x0)] + [[x0[j] + (steps[j] if j == i else 0) for j in range(n)] for i in range(n)]
    F = [fn(s) for s in S]
    for _ in range(iters):
        o = sorted(range(n + 1), key=lambda i: F[i])
        S, F = [S[i] for i in o], [F[i] for i in o]
        c = [sum(S[i][j] for i in range(n)) / n for j in range(n)]
        xr = [c[j] + (c[j] - S[-1][j]) for j in range(n)]
        fr = fn(xr)
        if fr < F[0]:
            xe = [c[j] + 2 * (c[j] - S[-1][j]) for j in range(n)]
            fe = fn(xe)
            S[-1], F[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < F[-2]:
            S[-1], F[-1] = xr, fr
        else:
            xc = [c[j] + 0.5 * (S[-1][j] - c[j]) for j in range(n)]
            fc = fn(xc)
            if fc < F[-1]:
                S[-1], F[-1] = xc, fc
            else:
                for i in range(1, n + 1):
                    S[i] = [S[0][j] + 0.5 * (S[i][j] - S[0][j]) for j in range(n)]
                    F[i] = fn(S[i])
    i = min(range(n + 1), key=lambda i: F[i])
    return S[i], F[i]


def minimax(pred, pts, bounds, starts, steps, seeds=6, seed=5, iters=2000, fine=None):
    """Minimises max |log(pred/measured)| + a tenth of its mean; pts end in the measured time."""
    def obj(x):
        if any(not (lo <= v <= hi) for v, (lo, hi) in zip(x, bounds)):
            return 1e9
        L = [abs(math.log(pred(x, p) / p[-1])) for p in pts]
        return max(L) + 0.1 * sum(L) / len(L)

    import random
    random.seed(seed)
    best = None
    for _ in range(seeds):
        x0 = [random.uniform(*r) for r in starts]
        x, v = nelder_mead(obj, x0, steps, iters)
        x, v = nelder_mead(obj, x, fine or [s / 3 for s in steps], iters)
        if best is None or v < best[1]:
            best = (x, v)
    return best[0]


def errors(pred, x, pts):
    e = [pred(x, p) / p[-1] - 1 for p in pts]
    a = [abs(v) for v in e]
    tot = sum(pred(x, p) for p in pts) / sum(p[-1] for p in pts) - 1
    return sum(a) / len(a), max(a), tot

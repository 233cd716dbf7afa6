#!/usr/bin/env python3
"""Prints sw=pytorch's predictions against the H100 plain-PyTorch steps
(tests/data/h100-pytorch-steps-2026-11-26*.json): step time and memory,
measured (reserved + the 0.52 GiB CUDA context) against `weft estimate` on the
calibrated cluster file and on the dgx-h100 preset. A check, never a fit.
Usage: bench/pytorch-steps-check.py WEFT [--json OUT]"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "tests", "data")
FILES = ["h100-pytorch-steps-2026-11-26.json", "h100-pytorch-steps-2026-11-26b.json"]
CLUSTERS = [("file", os.path.join(DATA, "h100-calibrated-2026-11-26.json")),
            ("preset", "dgx-h100:nodes=1,devices_per_node=1")]
CONTEXT = 0.52 * 2**30
GIB = 2**30


def estimate(weft, model, cluster, batch, plan):
    r = subprocess.run([weft, "estimate", "--model", model, "--cluster", cluster, "--batch", str(batch),
                        "--plan", plan, "--json"], capture_output=True, text=True)
    if r.returncode != 0:
        return None
    e = json.loads(r.stdout)
    return e["iteration_time_s"], e["memory_per_device_bytes"], e["fits"]


def main():
    weft = sys.argv[1]
    out = []
    print("| model, plan | measured step (s) | file | err | preset | err | measured mem (GiB) | predicted | err |")
    print("|---|---|---|---|---|---|---|---|---|")
    for f in FILES:
        for r in json.load(open(os.path.join(DATA, f)))["rows"]:
            row = {"model": r["model"], "plan": r["plan"], "measured_step_s": r.get("measured_step_s"),
                   "oom": r["memory"]["oom"]}
            meas_mem = None if r["memory"]["oom"] else r["memory"]["reserved"] + CONTEXT
            cells = []
            for name, c in CLUSTERS:
                e = estimate(weft, r["model"], c, r["batch"], r["plan"])
                row[name] = e
                if e is None:
                    cells += ["error", ""]
                    continue
                ms = r.get("measured_step_s")
                cells += ["%.4f" % e[0], "%+.1f%%" % (100 * (e[0] / ms - 1)) if ms else ""]
            e = row["file"]
            if e is None:
                mem = ["", "", ""]
            elif meas_mem is None:
                mem = ["out of memory", "%.2f, %s" % (e[1] / GIB, "fits" if e[2] else "does not fit"),
                       "right" if not e[2] else "wrong"]
            else:
                mem = ["%.2f" % (meas_mem / GIB), "%.2f%s" % (e[1] / GIB, "" if e[2] else " (does not fit)"),
                       "%+.1f%%" % (100 * (e[1] / meas_mem - 1))]
            name = r["model"].split(",")[0] if not r["model"].startswith("llama") else "llama 1.2B"
            print("| %s, %s | %s | %s | %s | %s |" % (name, r["plan"].replace("dp=1,", "").replace(",sw=pytorch", ""),
                  "%.3f" % r["measured_step_s"] if r.get("measured_step_s") else "oom",
                  " | ".join(cells), " | ".join(mem[:2]), mem[2]))
            out.append(row)
    if "--json" in sys.argv:
        json.dump(out, open(sys.argv[sys.argv.index("--json") + 1], "w"), indent=1)


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# weft train's step time against weft estimate's iteration time for the
# plan kinds the replica engine runs on a model with recycling (issue 24,
# item 5): a small AlphaFold2-shaped model (recycle=2) on this machine, plain
# data parallelism, co-shard (recompute=full, coshard=K) and NF1B. The
# cluster is what `mpiexec -n 2 weft calibrate --quick` measures here, the
# framework profile sw=weft (the runtime's). Prints one markdown row per plan:
# the median step of STEPS steps (the first left out), the estimate and its
# error against the median.
# usage: bench/train_vs_estimate_af2.sh path/to/weft [steps]
set -uo pipefail
WEFT=$(readlink -f "$1")
STEPS=${2:-12}
MPIEXEC=${MPIEXEC:-mpiexec}
export OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
M="alphafold:layers=2,hidden=32,pair=16,msa=8,seq=16,recycle=2,dtype=fp32"
B=8
"$MPIEXEC" -n 2 "$WEFT" calibrate --quick -o "$tmp/cpu.json" >/dev/null 2>&1 || { echo "calibrate failed"; exit 1; }
echo "model $M, batch $B, $STEPS steps; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| plan | ranks | train median ms | estimate ms | error |"
echo "|---|---|---|---|---|"
for row in "1 dp=1,mbs=4" "1 dp=1,mbs=4,recompute=full" "1 dp=1,mbs=4,recompute=full,coshard=2" \
           "1 dp=1,mbs=4,recompute=full,coshard=4" "1 dp=1,mbs=2,nf1b=1" \
           "2 dp=2,mbs=2" "2 dp=2,mbs=2,nf1b=1" "2 dp=2,mbs=4,recompute=full,coshard=2" \
           "2 pp=2,dp=1,mbs=2" "2 pp=2,dp=1,mbs=2,nf1b=1"; do
  set -- $row
  n=$1 plan=$2
  if [ "$n" -gt 1 ]; then
    "$MPIEXEC" -n "$n" "$WEFT" train --model "$M" --data synthetic --batch $B --steps "$STEPS" --plan "$plan" \
      --log "$tmp/l.jsonl" >/dev/null 2>&1
  else
    "$WEFT" train --model "$M" --data synthetic --batch $B --steps "$STEPS" --plan "$plan" --log "$tmp/l.jsonl" \
      >/dev/null 2>&1
  fi
  med=$(grep -o '"time_s":[^,]*' "$tmp/l.jsonl" | cut -d: -f2 | tail -n +2 | sort -g |
        awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) * 1000 }')
  est=$("$WEFT" estimate --model "$M" --cluster "$tmp/cpu.json" --batch $B --plan "$plan,sw=weft" 2>/dev/null |
        awk '/^  iteration time/ { print $3 * 1000; exit }')
  err=$(awk -v a="$est" -v b="$med" 'BEGIN { printf "%+.0f%%", (a / b - 1) * 100 }')
  printf '| %s | %s | %.1f | %.1f | %s |\n' "$plan" "$n" "$med" "$est" "$err"
  rm -f "$tmp/l.jsonl"
done

#!/usr/bin/env bash
# `weft train --plan auto` (issue 10, item 4): the planner's fastest plan for
# the ranks launched, among those the runtime executes, printed before the
# first step. On 4 ranks the run reproduces one process's losses (the same
# global batch in the plan's micro-batches) within relative 1e-5; the choice
# is deterministic, and with --checkpoint auto keeps to plans whose runs the
# runtime checkpoints. $1 is the weft binary; $MPIEXEC launches MPI jobs.
source "$(dirname "$0")/lib.sh" "$1"
export OPENBLAS_NUM_THREADS=1
MPIEXEC=${MPIEXEC:-mpiexec}
losses() { grep -o '"loss":[^,]*' "$1" | cut -d: -f2; }
gpt=(--model gpt-tiny --data text:fortunes --batch 16 --steps 12 --lr 3e-3 --seed 4)

"$MPIEXEC" -n 4 "$WEFT" train "${gpt[@]}" --plan auto --log "$tmp/auto.jsonl" >/dev/null 2>"$tmp/auto.err"
check "--plan auto on 4 ranks trains: $(tail -n 1 "$tmp/auto.err")" test $? -eq 0
line=$(grep '^plan       auto: ' "$tmp/auto.err")
check "the plan is printed before the first step" test -n "$line"
check "the plan line comes before step 1" sh -c 'grep -n "" "$0" | grep -m1 -e "plan       auto" -e "step      1" | grep -q "plan       auto"' \
  "$tmp/auto.err"
plan=$(echo "$line" | sed 's/^plan       auto: \([^ ,]*\(,[a-z0-9]*=[^ ,]*\)*\),.*/\1/')
echo "auto chose: $plan"
dev=$(echo "$plan" | awk -F, '{ d = 1; for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "dp" || kv[1] == "tp" || kv[1] == "pp") d *= kv[2] } print d }')
check "the plan uses the 4 ranks ($plan)" test "$dev" = 4
mbs=$(echo "$plan" | tr ',' '\n' | sed -n 's/^mbs=//p')
dp=$(echo "$plan" | tr ',' '\n' | sed -n 's/^dp=//p')

# One process, the same micro-batches: dp x (16 / (dp x mbs)) of mbs samples.
"$WEFT" train "${gpt[@]}" --plan "dp=1,mbs=$mbs" --log "$tmp/one.jsonl" >/dev/null 2>"$tmp/one.err"
check "one process trains at mbs=$mbs" test $? -eq 0
losses "$tmp/one.jsonl" >"$tmp/one.txt"
losses "$tmp/auto.jsonl" >"$tmp/auto.txt"
check "auto on 4 ranks: every loss within 1e-5 of one process" awk '
  NR == FNR { one[FNR] = $1; n++; next }
  { m++; d = $1 - one[FNR]; if (d < 0) d = -d; if (d > 1e-5 * one[FNR]) { print "step " FNR ": " $1 " vs " one[FNR]; bad = 1 } }
  END { exit bad || m != n || n == 0 }' "$tmp/one.txt" "$tmp/auto.txt"
check "dp=$dp, mbs=$mbs: the run is data-parallel over $dp replicas" test -n "$dp"

# Deterministic: the same inputs choose the same plan.
"$MPIEXEC" -n 4 "$WEFT" train "${gpt[@]}" --steps 1 --plan auto >/dev/null 2>"$tmp/again.err"
check "the same plan again" test "$(grep '^plan       auto: ' "$tmp/again.err")" = "$line"

# With checkpoints, a plan whose runs the runtime checkpoints; it saves.
"$MPIEXEC" -n 4 "$WEFT" train "${gpt[@]}" --steps 2 --plan auto --checkpoint "$tmp/ck" >/dev/null 2>"$tmp/ck.err"
check "--plan auto --checkpoint trains and saves: $(tail -n 1 "$tmp/ck.err")" test $? -eq 0
check "the checkpoint is written" test -f "$tmp/ck/manifest.json"

# A cluster smaller than the job: one line naming both, exit 1, every rank.
"$MPIEXEC" -n 4 "$WEFT" train --model mlp-tiny --data synthetic --batch 8 --steps 1 --plan auto \
  --cluster local:devices_per_node=2 >"$tmp/bad.out" 2>"$tmp/bad.err"
rc=$?
check "a 2-device cluster on 4 ranks: exit 1 (got $rc)" test $rc -eq 1
check "a 2-device cluster on 4 ranks: one line from weft" test "$(grep -c '^weft' "$tmp/bad.err")" -eq 1
check "it names the devices and the ranks" grep -q "has 2 devices, the job has 4 ranks" "$tmp/bad.err"
finish train_auto.sh

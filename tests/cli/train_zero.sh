#!/usr/bin/env bash
# Sharded data-parallel state from the command line: gpt-tiny under mpiexec
# -n 4 with --plan dp=4,zero=2 (and zero=1 with dear, zero=3) computes every
# step's loss of one process (relative 1e-5, 20 steps) while rank 0 holds a
# quarter of the optimizer state; a zero=2 checkpoint written at step 10
# resumes steps 11..20 bit for bit, resumes under zero=3 (resharded, 1e-5),
# and is refused by one process (another dp) in one line; pp=2,dp=2 with
# zero=2 under dear and tp=2,dp=2 with zero=1 compute one process's losses;
# zero=4 and zero=3 with dear (also with pipeline stages) exit 1 with one
# line. $1 is the weft
# binary; $MPIEXEC (set by CTest) launches MPI jobs.
source "$(dirname "$0")/lib.sh" "$1"
export OPENBLAS_NUM_THREADS=1
MPIEXEC=${MPIEXEC:-mpiexec}
losses() { grep -o '"loss":[^,]*' "$1" | cut -d: -f2; }
close() { # two loss files agree within relative 1e-5, step by step
  awk 'NR == FNR { one[FNR] = $1; next }
    { d = $1 - one[FNR]; if (d < 0) d = -d
      if (d > 1e-5 * one[FNR]) { print "step " FNR ": " $1 " vs " one[FNR]; bad = 1 } }
    END { exit bad }' "$1" "$2"
}
common=(--model gpt-tiny --data text:fortunes --batch 8 --lr 3e-3)
"$WEFT" train "${common[@]}" --steps 20 --plan dp=1 --log "$tmp/one.jsonl" --json >"$tmp/one.json" 2>"$tmp/one.err"
check "one process trains" test $? -eq 0
for run in "zero=2:" "zero=1:dear:0.05" "zero=3:"; do
  z=${run%%:*} comm=${run#*:}
  name="dp=4,$z${comm:+ --comm $comm}"
  "$MPIEXEC" -n 4 "$WEFT" train "${common[@]}" --steps 20 --plan "dp=4,$z" ${comm:+--comm "$comm"} \
    --log "$tmp/$z.jsonl" --json >"$tmp/$z.json" 2>"$tmp/$z.err"
  check "$name trains on 4 ranks" test $? -eq 0
  check "$name: 20 steps logged" test "$(losses "$tmp/$z.jsonl" | wc -l)" -eq 20
  check "$name: every loss within 1e-5 of one process" close <(losses "$tmp/one.jsonl") <(losses "$tmp/$z.jsonl")
  check "$name: rank 0 holds a quarter of the optimizer state" "$PY" - "$tmp/one.json" "$tmp/$z.json" <<'PYEOF'
import json, sys
one, z = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert z["ranks"] == 4 and z["zero"] > 0, (z["ranks"], z["zero"])
share = z["optimizer_bytes"] / one["optimizer_bytes"]
assert 0.2 < share < 0.3, share
if z["zero"] == 3:
    assert z["param_bytes"] < one["param_bytes"], (z["param_bytes"], one["param_bytes"])
PYEOF
done
# Checkpoint at step 10 under zero=2, resume to 20: the same losses, bit for bit.
"$MPIEXEC" -n 4 "$WEFT" train "${common[@]}" --steps 10 --plan dp=4,zero=2 --checkpoint "$tmp/ck" \
  >/dev/null 2>"$tmp/ck.err"
check "zero=2 writes a checkpoint" test $? -eq 0
cp -r "$tmp/ck" "$tmp/ck3"
"$MPIEXEC" -n 4 "$WEFT" train "${common[@]}" --steps 20 --plan dp=4,zero=2 --checkpoint "$tmp/ck" --resume \
  --log "$tmp/res.jsonl" >/dev/null 2>"$tmp/res.err"
check "zero=2 resumes" test $? -eq 0
check "the resumed steps 11..20 equal the uninterrupted run's" diff <(losses "$tmp/zero=2.jsonl" | tail -10) \
  <(losses "$tmp/res.jsonl" | tail -10)
"$MPIEXEC" -n 4 "$WEFT" train "${common[@]}" --steps 12 --plan dp=4,zero=3 --checkpoint "$tmp/ck3" --resume \
  --log "$tmp/res3.jsonl" >/dev/null 2>"$tmp/res3.err"
check "zero=3 resumes zero=2's checkpoint (resharded)" test $? -eq 0
check "resharded: steps 11..12 within 1e-5" close <(losses "$tmp/zero=2.jsonl" | sed -n 11,12p) \
  <(losses "$tmp/res3.jsonl" | tail -2)
"$WEFT" train "${common[@]}" --steps 20 --plan dp=1 --checkpoint "$tmp/ck3" --resume >/dev/null 2>"$tmp/other.err"
check "one process resuming dp=4's checkpoint exits 1" test $? -eq 1
check "with one line naming both plans" test "$(grep -c 'plan=pp=1,dp=4, this run has plan=pp=1,dp=1' \
  "$tmp/other.err")" -eq 1
expect_fail "zero=4" "zero" train "${common[@]}" --steps 1 --plan zero=4
# The state sharded over each pipeline stage's data-parallel group (dear:
# the reduce-scatters' shards), and over the data-parallel axis of tp=2,dp=2:
# one process's losses at the same micro-batches of 2.
"$WEFT" train "${common[@]}" --steps 20 --plan dp=1,mbs=2 --log "$tmp/one2.jsonl" >/dev/null 2>&1
for plan in "pp=2,dp=2,mbs=2,zero=2:dear:0.05" "tp=2,dp=2,mbs=2,zero=1:"; do
  p=${plan%%:*} comm=${plan#*:}
  "$MPIEXEC" -n 4 "$WEFT" train "${common[@]}" --steps 20 --plan "$p" ${comm:+--comm "$comm"} \
    --log "$tmp/pz.jsonl" --json >"$tmp/pz.json" 2>"$tmp/pz.err"
  check "$p${comm:+ --comm $comm} trains on 4 ranks" test $? -eq 0
  check "$p: every loss within 1e-5 of one process" close <(losses "$tmp/one2.jsonl") <(losses "$tmp/pz.jsonl")
  check "$p: 20 steps logged" test "$(losses "$tmp/pz.jsonl" | wc -l)" -eq 20
done
"$MPIEXEC" -n 2 "$WEFT" train "${common[@]}" --steps 1 --plan pp=2,mbs=2,zero=3 --comm dear >/dev/null 2>"$tmp/pz.err"
check "zero=3 with pipeline stages and dear exits 1" test $? -eq 1
check "with one line naming zero=3 with dear" test "$(grep -c 'zero=3 with dear' "$tmp/pz.err")" -eq 1
expect_fail "zero=3 with dear" "zero=3 with dear" train "${common[@]}" --steps 1 --plan zero=3 --comm dear
finish train_zero.sh

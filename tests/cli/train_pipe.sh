#!/usr/bin/env bash
# Pipeline stages from the command line (issue 10, item 2): gpt-tiny under
# mpiexec -n 2 with --plan pp=2,mbs=2 (1F1B, then GPipe), and mpiexec -n 4
# with --plan pp=2,tp=2,mbs=2, computes every step's
# loss of one process taking the same four micro-batches of 2 (relative
# 1e-5, 20 steps) and its loss falls; a checkpoint written at step 10 and
# resumed reproduces steps 11..20 bit for bit; resuming it under another plan
# and stages that do not fit the layers exit 1 with one line. $1 is the weft
# binary; $MPIEXEC (set by CTest) launches MPI jobs.
source "$(dirname "$0")/lib.sh" "$1"
export OPENBLAS_NUM_THREADS=1
MPIEXEC=${MPIEXEC:-mpiexec}
losses() { grep -o '"loss":[^,]*' "$1" | cut -d: -f2; }
common=(--model gpt-tiny --data text:fortunes --batch 8 --lr 3e-3)
"$WEFT" train "${common[@]}" --steps 20 --plan mbs=2 --log "$tmp/one.jsonl" >/dev/null 2>"$tmp/one.err"
check "one process trains" test $? -eq 0
for pipe in 1f1b gpipe; do
  "$MPIEXEC" -n 2 "$WEFT" train "${common[@]}" --steps 20 --plan pp=2,mbs=2,pipe=$pipe --log "$tmp/$pipe.jsonl" \
    --json >"$tmp/$pipe.json" 2>"$tmp/$pipe.err"
  check "pp=2 ($pipe) trains on 2 ranks" test $? -eq 0
  check "pp=2 ($pipe): 20 steps logged" test "$(losses "$tmp/$pipe.jsonl" | wc -l)" -eq 20
  check "pp=2 ($pipe): every loss within 1e-5 of one process" awk '
    NR == FNR { one[FNR] = $1; next }
    { d = $1 - one[FNR]; if (d < 0) d = -d; if (d > 1e-5 * one[FNR]) { print "step " FNR ": " $1 " vs " one[FNR]; bad = 1 } }
    END { exit bad }' <(losses "$tmp/one.jsonl") <(losses "$tmp/$pipe.jsonl")
  check "pp=2 ($pipe): its loss falls" "$PY" - "$tmp/$pipe.json" <<'PYEOF'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["ranks"] == 2, j["ranks"]
assert j["final_loss"] < 0.9 * j["first_loss"], (j["first_loss"], j["final_loss"])
PYEOF
done
# Stages with tensor parallelism on 4 ranks (Megatron's order, tp innermost): one process's losses.
"$MPIEXEC" -n 4 "$WEFT" train "${common[@]}" --steps 20 --plan pp=2,tp=2,mbs=2 --log "$tmp/pptp.jsonl" \
  >/dev/null 2>"$tmp/pptp.err"
check "pp=2,tp=2 trains on 4 ranks" test $? -eq 0
check "pp=2,tp=2: every loss within 1e-5 of one process" awk '
  NR == FNR { one[FNR] = $1; next }
  { d = $1 - one[FNR]; if (d < 0) d = -d; if (d > 1e-5 * one[FNR]) { print "step " FNR ": " $1 " vs " one[FNR]; bad = 1 } }
  END { exit bad || FNR != 20 }' <(losses "$tmp/one.jsonl") <(losses "$tmp/pptp.jsonl")
# pp=2,tp=2,dp=2 on 8 ranks (4 per core here): one process's losses.
"$MPIEXEC" -n 8 "$WEFT" train "${common[@]}" --steps 20 --plan pp=2,tp=2,dp=2,mbs=2 --log "$tmp/pptpdp.jsonl" \
  >/dev/null 2>&1
check "pp=2,tp=2,dp=2 trains on 8 ranks" test $? -eq 0
check "pp=2,tp=2,dp=2: every loss within 1e-5 of one process" awk '
  NR == FNR { one[FNR] = $1; next }
  { d = $1 - one[FNR]; if (d < 0) d = -d; if (d > 1e-5 * one[FNR]) { print "step " FNR ": " $1 " vs " one[FNR]; bad = 1 } }
  END { exit bad || FNR != 20 }' <(losses "$tmp/one.jsonl") <(losses "$tmp/pptpdp.jsonl")
# Interleaved stages with tensor parallelism (pp=2, vpp=2, tp=2, with and without sp) on a 4-layer model.
M4=(--model gpt:layers=4,hidden=64,heads=4,seq=32,vocab=96,dtype=fp32 --data text:fortunes --batch 8 --seed 3)
"$WEFT" train "${M4[@]}" --steps 20 --plan dp=1,mbs=2 --log "$tmp/one4.jsonl" >/dev/null 2>&1
for sp in 0 1; do
  "$MPIEXEC" -n 4 "$WEFT" train "${M4[@]}" --steps 20 --plan pp=2,vpp=2,tp=2,sp=$sp,mbs=2 --log "$tmp/vtp$sp.jsonl" \
    >/dev/null 2>&1
  check "pp=2,vpp=2,tp=2,sp=$sp trains on 4 ranks" test $? -eq 0
  check "pp=2,vpp=2,tp=2,sp=$sp: every loss within 1e-5 of one process" awk '
    NR == FNR { one[FNR] = $1; next }
    { d = $1 - one[FNR]; if (d < 0) d = -d; if (d > 1e-5 * one[FNR]) { print "step " FNR ": " $1 " vs " one[FNR]; bad = 1 } }
    END { exit bad || FNR != 20 }' <(losses "$tmp/one4.jsonl") <(losses "$tmp/vtp$sp.jsonl")
done
# pp=2,tp=2: checkpoint at step 10 (each rank its shards), resume to 20 bit for bit; pp=2 alone refuses it.
"$MPIEXEC" -n 4 "$WEFT" train "${common[@]}" --steps 10 --plan pp=2,tp=2,mbs=2 --checkpoint "$tmp/cktp" \
  >/dev/null 2>&1
check "pp=2,tp=2 writes a checkpoint" test $? -eq 0
"$MPIEXEC" -n 4 "$WEFT" train "${common[@]}" --steps 20 --plan pp=2,tp=2,mbs=2 --checkpoint "$tmp/cktp" --resume \
  --log "$tmp/restp.jsonl" >/dev/null 2>&1
check "pp=2,tp=2 resumes" test $? -eq 0
check "pp=2,tp=2: the resumed steps 11..20 equal the uninterrupted run's" diff <(losses "$tmp/pptp.jsonl" | tail -10) \
  <(losses "$tmp/restp.jsonl" | tail -10)
"$MPIEXEC" -n 4 "$WEFT" train "${common[@]}" --steps 20 --plan pp=2,dp=2,mbs=2 --checkpoint "$tmp/cktp" --resume \
  >/dev/null 2>"$tmp/othertp.err"
check "pp=2,tp=2's checkpoint under pp=2,dp=2 exits 1 with one line" test $? -eq 1 -a "$(wc -l <"$tmp/othertp.err")" -eq 1
# Checkpoint at step 10, resume to 20: the same losses, bit for bit.
"$MPIEXEC" -n 2 "$WEFT" train "${common[@]}" --steps 10 --plan pp=2,mbs=2 --checkpoint "$tmp/ck" \
  >/dev/null 2>"$tmp/ck.err"
check "pp=2 writes a checkpoint" test $? -eq 0
"$MPIEXEC" -n 2 "$WEFT" train "${common[@]}" --steps 20 --plan pp=2,mbs=2 --checkpoint "$tmp/ck" --resume \
  --log "$tmp/res.jsonl" >/dev/null 2>"$tmp/res.err"
check "pp=2 resumes" test $? -eq 0
check "the resumed steps 11..20 equal the uninterrupted run's" diff <(losses "$tmp/1f1b.jsonl" | tail -10) \
  <(losses "$tmp/res.jsonl" | tail -10)
"$MPIEXEC" -n 2 "$WEFT" train "${common[@]}" --steps 20 --plan dp=2,mbs=1 --checkpoint "$tmp/ck" --resume \
  >/dev/null 2>"$tmp/other.err"
check "another plan's resume exits 1" test $? -eq 1
check "with one line naming both plans" test "$(grep -c 'plan=pp=2,vpp=1,dp=1,pipe=1f1b, this run has plan=pp=1,dp=2' \
  "$tmp/other.err")" -eq 1
"$MPIEXEC" -n 2 "$WEFT" train "${common[@]}" --steps 1 --plan pp=2,vpp=2,mbs=2 >/dev/null 2>"$tmp/v.err"
check "stages that do not fit the layers exit 1" test $? -eq 1
check "with one line" test "$(grep -c 'do not divide the 2 layers' "$tmp/v.err")" -eq 1
"$MPIEXEC" -n 2 "$WEFT" train "${common[@]}" --steps 1 --plan pp=4,dp=1,mbs=2 >/dev/null 2>"$tmp/r.err"
check "stages that do not fit the ranks exit 1" test $? -eq 1
check "with one line" test "$(grep -c 'needs 4 ranks but the job has 2' "$tmp/r.err")" -eq 1
finish train_pipe.sh

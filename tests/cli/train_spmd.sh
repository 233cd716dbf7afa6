#!/usr/bin/env bash
# Tensor and operator parallelism from the CLI (issue 10): `weft train --plan
# tp=2` and `--plan tp=2,sp=1` under mpiexec -n 2 run gpt-tiny as SPMD (each
# rank its local graph) and every step's loss is the single process's within
# relative 1e-5; an op-level plan that `weft plan --op-level` writes for
# mlp-tiny on a mesh of 2 passes `weft plan --verify` and `weft train --plan
# FILE` runs it under mpiexec -n 2, equal to one process too; checkpoints of
# SPMD runs resume bit-identically and refuse another plan. $1 is the weft
# binary; $MPIEXEC (set by CTest) launches MPI jobs.
source "$(dirname "$0")/lib.sh" "$1"
export OPENBLAS_NUM_THREADS=1
MPIEXEC=${MPIEXEC:-mpiexec}
losses() { grep -o '"loss":[^,]*' "$1" | cut -d: -f2; }
same() { # same LABEL ONE.jsonl RUN.jsonl
  check "$1: every loss within 1e-5 of one process" awk '
    NR == FNR { one[FNR] = $1; n++; next }
    { m++; d = $1 - one[FNR]; if (d < 0) d = -d; if (d > 1e-5 * one[FNR]) { print "step " FNR ": " $1 " vs " one[FNR]; bad = 1 } }
    END { exit bad || m != n || n == 0 }' "$2" "$3"
}
gpt=(--model gpt-tiny --data text:fortunes --batch 8 --steps 15 --lr 3e-3)
"$WEFT" train "${gpt[@]}" --plan dp=1 --log "$tmp/one.jsonl" >/dev/null 2>"$tmp/one.err"
check "gpt-tiny trains in one process" test $? -eq 0
losses "$tmp/one.jsonl" >"$tmp/one.txt"
for plan in tp=2 tp=2,sp=1; do
  "$MPIEXEC" -n 2 "$WEFT" train "${gpt[@]}" --plan "$plan" --log "$tmp/run.jsonl" >/dev/null 2>"$tmp/run.err"
  check "gpt-tiny trains with $plan on 2 ranks" test $? -eq 0
  check "$plan: the lowered mesh is named" grep -q "lowered to mesh=2,pp=1" "$tmp/run.err"
  losses "$tmp/run.jsonl" >"$tmp/run.txt"
  same "$plan" "$tmp/one.txt" "$tmp/run.txt"
done
mlp=(--model mlp-tiny --batch 8)
"$WEFT" plan "${mlp[@]}" --cluster local:devices_per_node=2 --op-level --mesh 2 --pp 1 -o "$tmp/mlp.json" \
  >/dev/null 2>"$tmp/plan.err"
check "weft plan --op-level writes an mlp-tiny plan on a mesh of 2" test -s "$tmp/mlp.json"
check "the plan verifies" sh -c '"$0" plan --model mlp-tiny --cluster local:devices_per_node=2 --batch 8 --verify "$1" \
  >/dev/null 2>&1' "$WEFT" "$tmp/mlp.json"
"$WEFT" train "${mlp[@]}" --data synthetic --steps 10 --plan dp=1 --log "$tmp/mone.jsonl" >/dev/null 2>&1
losses "$tmp/mone.jsonl" >"$tmp/mone.txt"
"$MPIEXEC" -n 2 "$WEFT" train "${mlp[@]}" --data synthetic --steps 10 --plan "$tmp/mlp.json" \
  --log "$tmp/mrun.jsonl" >/dev/null 2>"$tmp/mrun.err"
check "mlp-tiny trains under its op-level plan on 2 ranks" test $? -eq 0
losses "$tmp/mrun.jsonl" >"$tmp/mrun.txt"
same "mlp-tiny op-level" "$tmp/mone.txt" "$tmp/mrun.txt"
# Checkpoints of SPMD runs: each rank saves its shards; 7 steps, save, resume
# to 15 equals the straight run bit for bit; another plan is refused by name.
for plan in tp=2 tp=2,sp=1; do
  "$MPIEXEC" -n 2 "$WEFT" train "${gpt[@]}" --plan $plan --log "$tmp/s.jsonl" >/dev/null 2>&1
  rm -rf "$tmp/ck"
  "$MPIEXEC" -n 2 "$WEFT" train "${gpt[@]}" --plan $plan --steps 7 --checkpoint "$tmp/ck" --log "$tmp/r.jsonl" \
    >/dev/null 2>&1
  "$MPIEXEC" -n 2 "$WEFT" train "${gpt[@]}" --plan $plan --checkpoint "$tmp/ck" --resume --log "$tmp/r.jsonl" \
    >/dev/null 2>"$tmp/ck.err"
  check "$plan: resume exits 0: $(tail -n 1 "$tmp/ck.err")" test $? -eq 0
  check "$plan: 7 + resume + 8 steps equal 15 straight ones bit for bit" cmp -s <(losses "$tmp/s.jsonl") \
    <(losses "$tmp/r.jsonl")
done
"$MPIEXEC" -n 2 "$WEFT" train "${gpt[@]}" --plan tp=2 --checkpoint "$tmp/ck" --resume --steps 20 >/dev/null \
  2>"$tmp/ck.err"
check "another plan's shards are refused by name" grep -q "was written with layouts=mesh 2, plan fnv" "$tmp/ck.err"
"$MPIEXEC" -n 2 "$WEFT" train "${gpt[@]}" --plan dp=2 --checkpoint "$tmp/ck" --resume --steps 20 >/dev/null \
  2>"$tmp/ck.err"
check "data-parallel replicas do not resume SPMD shards" grep -q "holds the shards of an SPMD" "$tmp/ck.err"
check "one line" test "$(grep -c '^weft' "$tmp/ck.err")" -eq 1
finish train_spmd.sh

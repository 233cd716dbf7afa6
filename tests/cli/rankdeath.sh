#!/usr/bin/env bash
# A rank that dies (issue 10, item 8): killing one rank of `weft train` with
# SIGKILL makes the whole job exit, non-zero, within a bounded time (the
# others do not wait forever in a collective or a pipeline receive), and the
# last complete checkpoint stays loadable: a resumed run on the same ranks
# continues from its step. Under data parallelism, pipeline stages and
# tensor parallelism (SPMD). $1 is the weft binary.
source "$(dirname "$0")/lib.sh" "$1"
cd "$tmp"
MPIEXEC=${MPIEXEC:-mpiexec}
export OPENBLAS_NUM_THREADS=1

# The pid of MPI rank $1 among this test's weft processes (PMI_RANK, which
# MPICH's and Open MPI's launchers both set, or OMPI_COMM_WORLD_RANK). Only
# this test's: their checkpoint directory is under this test's $tmp (other
# tests may train with the same binary at the same time).
ours() { pgrep -f "^$WEFT train.*--checkpoint $tmp/"; }
rank_pid() {
  local p
  for p in $(ours); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx -e "PMI_RANK=$1" -e "OMPI_COMM_WORLD_RANK=$1"; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

for plan in dp=2 pp=2,mbs=2 tp=2; do
  ck="$tmp/ck-${plan//[=,]/-}"
  common=(--model gpt-tiny --data text:fortunes --batch 4 --plan "$plan" --seed 5 --checkpoint "$ck")
  echo "== $plan"
  "$MPIEXEC" -n 2 "$WEFT" train "${common[@]}" --steps 1000000 --checkpoint-every 10 >out 2>err &
  job=$!
  for _ in $(seq 1 1200); do
    [ -f "$ck/manifest.json" ] && break
    sleep 0.05
  done
  check "a checkpoint was written before the kill" test -f "$ck/manifest.json"
  sleep 0.3 # let the run go on into later steps and checkpoints
  victim=$(rank_pid 1)
  check "rank 1 found" test -n "$victim"
  start=$(date +%s%N)
  kill -KILL "$victim"
  # Bounded: the job must be gone within 20 s of the kill.
  for _ in $(seq 1 200); do
    kill -0 $job 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 $job 2>/dev/null; then
    check "the job exits within 20 s of a rank's death" false
    ours | xargs -r kill -KILL
  fi
  wait $job
  rc=$?
  ms=$((($(date +%s%N) - start) / 1000000))
  echo "job exited $rc, ${ms} ms after rank 1 was killed"
  check "the job exits non-zero (got $rc)" test $rc -ne 0
  check "no weft process is left" test -z "$(ours)"

  # The last complete checkpoint loads and training continues from its step.
  step=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["step"])' "$ck/manifest.json")
  check "the checkpoint has a step ($step)" test "$step" -ge 10
  "$MPIEXEC" -n 2 "$WEFT" train "${common[@]}" --steps $((step + 3)) --resume --log "$ck.log" >out2 2>err2
  rc=$?
  check "resume after the death exits 0 (got $rc): $(tail -n 1 err2)" test $rc -eq 0
  first=$($PY -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["step"])' "$ck.log" 2>/dev/null)
  check "resume continues at step $((step + 1)) (got $first)" test "$first" = $((step + 1))
  check "resume runs 3 steps" test "$(wc -l <"$ck.log")" -eq 3
done

finish rankdeath

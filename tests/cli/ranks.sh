#!/usr/bin/env bash
# Ranks agree or stop (issue 26, item 1), under mpiexec -n 2 and -n 4.
#  - Started with different arguments (the last rank's differs in one field),
#    every rank of `weft train` exits 1 within seconds, rank 0 printing one
#    line naming the field and the ranks' values; the job never spins.
#  - A rank that stops answering (SIGSTOP: alive, but silent) is detected by
#    the peer watchdog: the job exits 1 within the peer timeout plus the
#    launcher's clean-up, with one line naming the wait, and no process left.
# $1 is the weft binary.
source "$(dirname "$0")/lib.sh" "$1"
cd "$tmp"
MPIEXEC=${MPIEXEC:-mpiexec}
export OPENBLAS_NUM_THREADS=1
common=(--model gpt-tiny --data text:fortunes --batch 4 --plan dp=NR --steps 2 --seed 1)

# The rank of this process under either launcher.
cat >rankarg.sh <<'EOS'
#!/usr/bin/env bash
# rankarg.sh LAST WEFT ARGS...: runs weft with ARGS; on the last rank the
# arguments after "--last" replace the ones before it (same option names).
r=${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-0}}
n=${PMI_SIZE:-${OMPI_COMM_WORLD_SIZE:-1}}
w=$1
shift
base=() alt=() seen=0
for a in "$@"; do
  if [ "$a" = --last ]; then seen=1; continue; fi
  if [ $seen = 0 ]; then base+=("$a"); else alt+=("$a"); fi
done
if [ "$r" = $((n - 1)) ]; then
  # Replace (or add) each --opt VALUE pair of alt in base.
  for ((i = 0; i < ${#alt[@]}; i += 2)); do
    found=0
    for ((j = 0; j < ${#base[@]}; j++)); do
      if [ "${base[$j]}" = "${alt[$i]}" ]; then base[$((j + 1))]=${alt[$((i + 1))]}; found=1; fi
    done
    [ $found = 1 ] || base+=("${alt[$i]}" "${alt[$((i + 1))]}")
  done
fi
exec "$w" "${base[@]}"
EOS
chmod +x rankarg.sh

ours() { pgrep -f "^$WEFT train.*$tmp" || true; }

for n in 2 4; do
  args=("${common[@]}")
  args[7]=dp=$n
  # field, the last rank's differing option and value
  while read -r field opt val; do
    start=$(date +%s%N)
    timeout -k 5 60 "$MPIEXEC" -n $n ./rankarg.sh "$WEFT" train "${args[@]}" --checkpoint "$tmp/ck$n" \
      --last "$opt" "$val" >out 2>err </dev/null
    rc=$?
    ms=$((($(date +%s%N) - start) / 1000000))
    line=$(grep -v '^$' err | tail -n 1)
    echo "n=$n $field: exit $rc in $ms ms: $line"
    check "n=$n, $field differs: exit 1 (got $rc)" test $rc -eq 1
    check "n=$n, $field differs: within 20 s ($ms ms)" test $ms -lt 20000
    check "n=$n, $field differs: one line" test "$(grep -c . err)" -eq 1
    check "n=$n, $field differs: names $opt and rank $((n - 1))" \
      grep -q -- "the ranks disagree on $opt: rank 0 has .*rank $((n - 1)) '$val'" err
  done <<EOT
model --model mlp-tiny
plan --plan dp=1,tp=$n
batch --batch 8
steps --steps 3
comm --comm dear
seed --seed 2
optimizer --optimizer sgd
lr --lr 0.5
data --data synthetic
checkpoint --checkpoint $tmp/other$n
EOT
  check "n=$n: no weft process left" test -z "$(ours)"
done

# ---- a rank that stops answering -------------------------------------------------------
# The pid of MPI rank $1 among this test's weft processes.
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
export WEFT_PEER_TIMEOUT_S=3
for spec in "2 dp=2" "4 dp=4" "2 pp=2,mbs=2" "2 tp=2"; do
  set -- $spec
  n=$1 plan=$2
  log="$tmp/log-$n-${plan//[=,]/-}"
  "$MPIEXEC" -n $n "$WEFT" train --model gpt-tiny --data text:fortunes --batch 4 --plan "$plan" --steps 1000000 \
    --log "$log" >out 2>err </dev/null &
  job=$!
  for _ in $(seq 1 400); do
    [ -f "$log" ] && [ "$(wc -l <"$log")" -ge 3 ] && break
    sleep 0.05
  done
  victim=$(rank_pid $((n - 1)))
  check "n=$n $plan: rank $((n - 1)) found" test -n "$victim"
  start=$(date +%s%N)
  kill -STOP "$victim"
  for _ in $(seq 1 300); do
    kill -0 $job 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 $job 2>/dev/null; then
    check "n=$n $plan: the job exits within 30 s of a rank stopping" false
    ours | xargs -r kill -KILL
  fi
  wait $job
  rc=$?
  ms=$((($(date +%s%N) - start) / 1000000))
  echo "n=$n $plan: job exited $rc, $ms ms after rank $((n - 1)) stopped: $(grep 'no answer' err | head -n 1)"
  # The ranks that detect it exit 1; the launcher then kills the stopped
  # rank, and reports 1 or that kill's signal (Hydra: 9) for the job.
  check "n=$n $plan: the job exits non-zero (got $rc)" test $rc -ne 0
  check "n=$n $plan: the watchdog's line" grep -Eq "no answer from a peer rank for [0-9]* s \(waiting in (MPI_|the shared-memory collectives)" err
  check "n=$n $plan: no weft process left" test -z "$(ours)"
done

finish ranks

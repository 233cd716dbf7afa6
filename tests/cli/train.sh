#!/usr/bin/env bash
# weft train end to end: a single-process run with a JSON log; 5 steps +
# checkpoint + resume to 10 give exactly the losses of 10 straight steps; a
# truncated checkpoint shard is refused with exit 1 and every file left as it
# was; bad inputs exit 1 with one line; `mpiexec -n 2 ... --comm dear` runs
# and matches one process. $1 = the weft binary; $MPIEXEC (set by CTest)
# launches MPI jobs.
set -uo pipefail
WEFT=$(readlink -f "$1")
MPIEXEC=${MPIEXEC:-mpiexec}
export OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
die() { echo "FAIL: $*"; fail=1; }

# The loss field of every line of a JSON-lines log, exactly as printed.
losses() { grep -o '"loss":[^,]*' "$1" | cut -d: -f2; }

common=(--model gpt-tiny --data synthetic --batch 8 --plan auto --seed 3 --lr 3e-3)

# 1. Ten straight steps with a log.
"$WEFT" train "${common[@]}" --steps 10 --log "$tmp/straight.jsonl" 2>"$tmp/err" || die "straight run failed: $(tail -1 "$tmp/err")"
[ "$(wc -l <"$tmp/straight.jsonl")" -eq 10 ] || die "log has $(wc -l <"$tmp/straight.jsonl") lines, want 10"
for key in step loss time_s samples_per_s tokens_per_s; do
  grep -q "\"$key\":" "$tmp/straight.jsonl" || die "log lacks $key"
done
first=$(losses "$tmp/straight.jsonl" | head -1); last=$(losses "$tmp/straight.jsonl" | tail -1)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' || die "loss did not fall: $first -> $last"
grep -q "^step .*loss .*tokens/s .*compute .*comm" "$tmp/err" || die "no human step lines on stderr"

# 2. Five steps, checkpoint, resume to ten: the same losses, bit for bit.
"$WEFT" train "${common[@]}" --steps 5 --checkpoint "$tmp/ck" --log "$tmp/resumed.jsonl" 2>"$tmp/err" || die "first half failed: $(tail -1 "$tmp/err")"
[ -f "$tmp/ck/manifest.json" ] || die "no manifest after the checkpoint"
"$WEFT" train "${common[@]}" --steps 10 --checkpoint "$tmp/ck" --resume --log "$tmp/resumed.jsonl" 2>"$tmp/err" || die "resume failed: $(tail -1 "$tmp/err")"
if ! diff <(losses "$tmp/straight.jsonl") <(losses "$tmp/resumed.jsonl") >"$tmp/diff"; then
  die "resumed losses differ from the straight run:"; cat "$tmp/diff"
fi
[ "$(grep -o '"step":[0-9]*' "$tmp/resumed.jsonl" | cut -d: -f2 | tr '\n' ' ')" = "1 2 3 4 5 6 7 8 9 10 " ] || die "resumed log steps wrong"

# The same with dear, whose last update is deferred into the next forward
# (a checkpoint applies it first): still bit for bit.
"$WEFT" train "${common[@]}" --steps 8 --comm dear:0.05 --log "$tmp/dear_straight.jsonl" 2>"$tmp/err" || die "dear straight run failed: $(tail -1 "$tmp/err")"
"$WEFT" train "${common[@]}" --steps 3 --comm dear:0.05 --checkpoint "$tmp/ckd" --log "$tmp/dear_resumed.jsonl" 2>"$tmp/err" || die "dear first half failed: $(tail -1 "$tmp/err")"
"$WEFT" train "${common[@]}" --steps 8 --comm dear:0.05 --checkpoint "$tmp/ckd" --resume --log "$tmp/dear_resumed.jsonl" 2>"$tmp/err" || die "dear resume failed: $(tail -1 "$tmp/err")"
diff <(losses "$tmp/dear_straight.jsonl") <(losses "$tmp/dear_resumed.jsonl") >/dev/null || die "dear: resumed losses differ from the straight run"

# 3. A truncated shard is refused, and nothing is touched.
shard=$(ls "$tmp/ck"/rank-0.g*.bin | head -1)
truncate -s -7 "$shard"
before=$(cd "$tmp" && md5sum ck/* resumed.jsonl)
"$WEFT" train "${common[@]}" --steps 12 --checkpoint "$tmp/ck" --resume --log "$tmp/resumed.jsonl" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] || die "corrupt checkpoint: exit $rc, want 1"
grep -q "rank-0" "$tmp/err" || die "corrupt checkpoint: message does not name the shard: $(cat "$tmp/err")"
after=$(cd "$tmp" && md5sum ck/* resumed.jsonl)
[ "$before" = "$after" ] || die "a refused resume changed files"

# 4. Bad input: exit 1 and one line.
bad() {
  local want=$1; shift
  "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
  [ $rc -eq 1 ] || die "'$*': exit $rc, want 1"
  [ "$(wc -l <"$tmp/err")" -eq 1 ] || die "'$*': $(wc -l <"$tmp/err") lines on stderr, want 1: $(cat "$tmp/err")"
  grep -q -- "$want" "$tmp/err" || die "'$*': message lacks '$want': $(cat "$tmp/err")"
}
bad "no-such-model" "$WEFT" train --model no-such-model --data synthetic --batch 8 --plan auto --steps 1
bad "nope" "$WEFT" train --model mlp-tiny --data text:/nope/corpus.txt --batch 8 --plan auto --steps 1
bad "dp=2" "$WEFT" train --model mlp-tiny --data synthetic --batch 8 --plan dp=2 --steps 1
bad "sgdx" "$WEFT" train --model mlp-tiny --data synthetic --batch 8 --plan auto --steps 1 --optimizer sgdx
bad "horovod" "$WEFT" train --model mlp-tiny --data synthetic --batch 8 --plan auto --steps 1 --comm horovd
bad "resume" "$WEFT" train --model mlp-tiny --data synthetic --batch 8 --plan auto --steps 1 --resume
# Under a launcher, weft's own lines are those starting "weft": Open MPI's
# mpirun adds a banner about the failed job, MPICH's mpiexec adds nothing.
"$MPIEXEC" -n 2 "$WEFT" train --model mlp-tiny --data synthetic --batch 7 --plan dp=2 --steps 1 >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] || die "mpiexec -n 2 --batch 7: exit $rc, want 1"
[ "$(grep -c '^weft' "$tmp/err")" -eq 1 ] || die "mpiexec -n 2 --batch 7: $(grep -c '^weft' "$tmp/err") lines from weft, want 1: $(cat "$tmp/err")"
grep -q "not divisible" "$tmp/err" || die "mpiexec -n 2 --batch 7: message lacks 'not divisible': $(cat "$tmp/err")"

# 5. Two ranks with dear give the losses of one process (relative 1e-5).
"$MPIEXEC" -n 2 "$WEFT" train "${common[@]}" --steps 10 --comm dear:0.05 --log "$tmp/dear.jsonl" --json >"$tmp/dear.json" 2>"$tmp/err" \
  || die "mpiexec -n 2 dear failed: $(tail -3 "$tmp/err")"
grep -q '"ranks":[[:space:]]*2' "$tmp/dear.json" || die "--json summary lacks ranks 2: $(cat "$tmp/dear.json")"
paste <(losses "$tmp/straight.jsonl") <(losses "$tmp/dear.jsonl") |
  awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $1) { print "step " NR ": " $1 " vs " $2; bad = 1 } } END { exit bad }' \
  || die "dear on 2 ranks differs from one process"
[ "$(wc -l <"$tmp/dear.jsonl")" -eq 10 ] || die "rank 0 alone should write the log"

# 6. --comm auto picks an executable schedule by simulation and says so.
"$WEFT" train --model mlp-tiny --data synthetic --batch 8 --plan auto --steps 2 --comm auto 2>"$tmp/err" \
  || die "--comm auto failed: $(tail -1 "$tmp/err")"
grep -q "^comm .*auto: the fastest of" "$tmp/err" || die "--comm auto: no note of the choice: $(grep ^comm "$tmp/err")"

[ $fail -eq 0 ] && echo "train.sh: all passed"
exit $fail

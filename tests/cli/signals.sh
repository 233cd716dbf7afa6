#!/usr/bin/env bash
# Training a user can stop (issue 13): SIGINT during `weft train --checkpoint`
# finishes the step, saves it and exits 130 with one line saying where; the
# resumed run reproduces a straight run's losses and the log holds every step
# once; a second signal exits at once, leaving the last complete checkpoint
# loadable; SIGTERM behaves like SIGINT; elapsed time and ETA are shown on a
# terminal only. $1 is the weft binary.
source "$(dirname "$0")/lib.sh" "$1"
cd "$tmp"
common=(--model gpt-tiny --data text:fortunes --batch 4 --plan dp=1 --seed 3)

# Wait until the log has at least N rows (the run is past its start-up).
wait_rows() {
  for _ in $(seq 1 200); do
    [ -f "$1" ] && [ "$(wc -l <"$1")" -ge "$2" ] && return 0
    sleep 0.05
  done
  return 1
}

# ---- one SIGINT: stop after the step, save, exit 130 ----------------------------------
"$WEFT" train "${common[@]}" --steps 1000000 --checkpoint ck --log log >out 2>err &
pid=$!
wait_rows log 5
kill -INT $pid
wait $pid
rc=$?
check "SIGINT exits 130 (got $rc)" test $rc -eq 130
check "SIGINT: one line saying where" grep -q "interrupted: stopped after step [0-9]* and saved it in ck" err
check "SIGINT: the error line is the last" test "$(tail -n 1 err | grep -c interrupted)" -eq 1
saved=$("$PY" -c 'import json; print(json.load(open("ck/manifest.json"))["step"])')
check "SIGINT: the checkpoint is the last step logged ($saved)" test "$saved" = \
  "$(tail -n 1 log | grep -o '"step":[0-9]*' | grep -o '[0-9]*')"

# ---- resume: the losses of a straight run, every step once in the log ----------------------
n=$((saved + 5))
"$WEFT" train "${common[@]}" --steps $n --checkpoint ck --resume --log log >/dev/null 2>&1
check "resume after SIGINT exits 0" test $? -eq 0
"$WEFT" train "${common[@]}" --steps $n --log straight >/dev/null 2>&1
check "every step once" test "$(grep -o '"step":[0-9]*' log | sort -u | wc -l)" -eq "$n" -a \
  "$(wc -l <log)" -eq "$n"
check "losses equal a straight run's" "$PY" - <<'PYEOF'
import json
a = [json.loads(l)["loss"] for l in open("log")]
b = [json.loads(l)["loss"] for l in open("straight")]
assert a == b, [(i + 1, x, y) for i, (x, y) in enumerate(zip(a, b)) if x != y][:3]
PYEOF

# ---- SIGTERM behaves the same -----------------------------------------------------------
rm -f log2
"$WEFT" train "${common[@]}" --steps 1000000 --checkpoint ck3 --log log2 >/dev/null 2>err &
pid=$!
wait_rows log2 3
kill -TERM $pid
wait $pid
rc=$?
check "SIGTERM exits 130 (got $rc)" test $rc -eq 130
check "SIGTERM saved" test -f ck3/manifest.json

# ---- two signals: exit at once; the last complete checkpoint stays loadable -----------------
rm -f log4
"$WEFT" train "${common[@]}" --steps 1000000 --checkpoint ck4 --checkpoint-every 2 --log log4 >/dev/null 2>&1 &
pid=$!
wait_rows log4 6
kill -INT $pid
kill -INT $pid
wait $pid
rc=$?
check "two signals exit 130 (got $rc)" test $rc -eq 130
s4=$("$PY" -c 'import json; print(json.load(open("ck4/manifest.json"))["step"])')
"$WEFT" train "${common[@]}" --steps $((s4 + 1)) --checkpoint ck4 --resume >/dev/null 2>err
check "the last complete checkpoint loads after two signals" test $? -eq 0

# ---- elapsed and ETA on a terminal only --------------------------------------------------
"$WEFT" train --model mlp-tiny --data synthetic --batch 8 --plan dp=1 --steps 2 >/dev/null 2>plain.err
check "no ETA off a terminal" test "$(grep -c ETA plain.err)" -eq 0
check "throughput on every step line" grep -q "^step .*samples/s" plain.err
if command -v script >/dev/null; then
  script -qc "\"$WEFT\" train --model mlp-tiny --data synthetic --batch 8 --plan dp=1 --steps 2" /dev/null >tty.out
  check "elapsed and ETA on a terminal" grep -q "elapsed .* ETA " tty.out
fi
finish signals.sh

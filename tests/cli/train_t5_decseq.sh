#!/usr/bin/env bash
# weft train runs T5 with a decoder length other than the encoder's (issue
# 24, item 5: dec_seq != seq). The decoder's cross-attention reads the
# encoder's seq keys from dec_seq queries (the attention kernels take keys of
# their own length, tests/test_kernels.c checks them against the reference
# and finite differences), and the synthetic loader gives dec_seq labels per
# sample. A tiny T5 with seq 8 and dec_seq 5 (shorter) and 12 (longer),
# trained 20 steps as 4 micro-batches of 2, gives one process's losses
# (relative 1e-5) under dp=2 and pp=2 on 2 ranks; the decoder's length
# changes the loss (dec_seq = seq differs). $1 is the weft binary; $MPIEXEC
# (set by CTest) launches MPI jobs.
source "$(dirname "$0")/lib.sh" "$1"
export OPENBLAS_NUM_THREADS=1
MPIEXEC=${MPIEXEC:-mpiexec}
losses() { grep -o '"loss":[^,]*' "$1" | cut -d: -f2; }
# every loss of log $2 within relative 1e-5 of log $1, 20 of them
same() {
  awk 'NR == FNR { one[FNR] = $1; next }
    { d = $1 - one[FNR]; if (d < 0) d = -d; if (d > 1e-5 * one[FNR]) { print "step " FNR ": " $1 " vs " one[FNR]; bad = 1 } }
    END { exit bad || FNR != 20 }' <(losses "$1") <(losses "$2")
}

T5="t5:layers=1,hidden=16,heads=2,head_dim=8,ffn=32,seq=8,vocab=64,dtype=fp32"
common=(--data synthetic --batch 8 --steps 20 --seed 5 --lr 3e-3)
"$WEFT" train --model "$T5,dec_seq=8" "${common[@]}" --plan dp=1,mbs=2 --log "$tmp/eq.jsonl" >/dev/null 2>&1
check "T5 with dec_seq = seq trains" test $? -eq 0
for ds in 5 12; do
  "$WEFT" train --model "$T5,dec_seq=$ds" "${common[@]}" --plan dp=1,mbs=2 --log "$tmp/one.jsonl" >/dev/null \
    2>"$tmp/one.err"
  check "dec_seq=$ds trains in one process" test $? -eq 0
  check "dec_seq=$ds: 20 losses" test "$(losses "$tmp/one.jsonl" | wc -l)" -eq 20
  check "dec_seq=$ds changes the loss" test "$(losses "$tmp/one.jsonl" | head -1)" != "$(losses "$tmp/eq.jsonl" | head -1)"
  for plan in "dp=2,mbs=2" "pp=2,dp=1,mbs=2"; do
    "$MPIEXEC" -n 2 "$WEFT" train --model "$T5,dec_seq=$ds" "${common[@]}" --plan "$plan" --log "$tmp/m.jsonl" \
      >/dev/null 2>"$tmp/m.err"
    check "dec_seq=$ds $plan trains on 2 ranks" test $? -eq 0
    check "dec_seq=$ds $plan on 2 ranks: every loss within 1e-5 of one process" same "$tmp/one.jsonl" "$tmp/m.jsonl"
    rm -f "$tmp/m.jsonl"
  done
  rm -f "$tmp/one.jsonl"
done

finish train_t5_decseq

#!/usr/bin/env bash
# weft train runs co-shard and recompute=full on pipeline stages (issue 24,
# item 5: pp=2,coshard=2): each stage runs its micro-batch's rows as K
# pieces in turn, and replays each piece's forward just before its backward
# (pipeline.c, play_pieces). Against one process over 20 steps (batch 8),
# every loss within relative 1e-5: a tiny Swin (pp=2 with coshard 2 and 4
# on micro-batches of 4), a tiny AlphaFold2-shaped model with recycle=2
# (pp=2 with coshard=2 under nf1b=0 and 1, coshard=4 under nf1b=1: the
# recycling forwards run piece by piece too) and with recycle=0, and a GPT
# with dropout under pp=2,recompute=full (the replay draws one process's
# masks). What still does not run is refused in one line naming it: co-shard
# with tp inside the stages, replayed stages with vpp=2, a coshard that does
# not divide the micro-batch. $1 is the weft binary; $MPIEXEC (set by CTest)
# launches MPI jobs.
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
# model, one process's plan, then the plans to run on 2 ranks against it
against_one() {
  local model=$1 one=$2 lr=$3
  shift 3
  local common=(--model "$model" --data synthetic --batch 8 --steps 20 --seed 5 --lr "$lr")
  "$WEFT" train "${common[@]}" --plan "$one" --log "$tmp/one.jsonl" >/dev/null 2>"$tmp/one.err"
  check "${model%%:*} $one trains in one process" test $? -eq 0
  for plan in "$@"; do
    "$MPIEXEC" -n 2 "$WEFT" train "${common[@]}" --plan "$plan" --log "$tmp/m.jsonl" >/dev/null 2>"$tmp/m.err"
    check "${model%%:*} $plan trains on 2 ranks" test $? -eq 0
    check "${model%%:*} $plan: every loss within 1e-5 of one process" same "$tmp/one.jsonl" "$tmp/m.jsonl"
    rm -f "$tmp/m.jsonl"
  done
  rm -f "$tmp/one.jsonl"
}

SW="swin:hidden=8,heads=2,depths=2-2,window=2,image=16,classes=10,dtype=fp32"
against_one "$SW" dp=1,mbs=4 1e-2 "pp=2,dp=1,mbs=4,recompute=full,coshard=2" "pp=2,dp=1,mbs=4,recompute=full,coshard=4"
AF="alphafold:layers=1,hidden=16,pair=8,msa=4,seq=8,dtype=fp32"
against_one "$AF,recycle=2" dp=1,mbs=2 3e-3 "pp=2,dp=1,mbs=2,recompute=full,coshard=2" \
  "pp=2,dp=1,mbs=2,recompute=full,coshard=2,nf1b=1" "pp=2,dp=1,mbs=4,recompute=full,coshard=4,nf1b=1"
against_one "$AF,recycle=0" dp=1,mbs=2 3e-3 "pp=2,dp=1,mbs=2,recompute=full,coshard=2"
GPT="gpt:layers=2,hidden=32,heads=2,seq=16,vocab=64,dtype=fp32"
against_one "$GPT" dp=1,mbs=2 3e-3 "pp=2,dp=1,mbs=2,recompute=full"

T=(--data synthetic --batch 8 --steps 1)
expect_fail "replayed stages with vpp=2" "the runtime replays stages with tp=1, vpp=1" train \
  --model gpt:layers=4,hidden=32,heads=2,seq=16,vocab=64,dtype=fp32 "${T[@]}" --plan "pp=2,vpp=2,dp=1,mbs=2,recompute=full"
expect_fail "co-shard with tp on stages" "coshard with pp=2, tp=2" train --model "$SW" "${T[@]}" \
  --plan "pp=2,tp=2,dp=1,mbs=4,recompute=full,coshard=2"
expect_fail "coshard not dividing the micro-batch" "does not divide the micro-batch" train --model "$SW" "${T[@]}" \
  --plan "pp=2,dp=1,mbs=2,recompute=full,coshard=4"
expect_fail "per-op co-shard on stages" "the runtime runs whole-stage co-shard only" train --model "$SW" "${T[@]}" \
  --plan "pp=2,dp=1,mbs=4,coshard=2@attention"

finish train_coshard_pp

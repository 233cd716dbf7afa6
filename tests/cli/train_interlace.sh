#!/usr/bin/env bash
# weft train's refusals of the interlaced pipeline (interlace=1), each one
# line without MPI: the ranks it needs, a model of neither GPT's nor Llama's family, sp=1,
# zero=3. Its runs against one process are tests/mpi/test_interlace.c.
# $1 is the weft binary.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh" "$1"
export OPENBLAS_NUM_THREADS=1
T=(--data synthetic --batch 8 --steps 1)
expect_fail "interlace=1 on one rank" "needs 2 ranks but the job has 1" train --model gpt-tiny "${T[@]}" --plan pp=2,dp=1,mbs=2,interlace=1
expect_fail "interlace=1 on bert-tiny" "neither GPT- nor Llama-shaped" train --model bert-tiny "${T[@]}" --plan pp=2,dp=1,mbs=2,interlace=1
expect_fail "interlace=1 with sp=1" "interlace=1 with sp=1" train --model gpt-tiny "${T[@]}" \
  --plan pp=2,tp=2,sp=1,dp=1,mbs=2,interlace=1
expect_fail "interlace=1 with zero=3" "interlace=1 with zero=3" train --model gpt-tiny "${T[@]}" \
  --plan pp=2,dp=2,mbs=2,zero=3,interlace=1
expect_fail "interlace=1: tp x pp not dividing the heads" "tp x pp = 8 does not divide the heads" train \
  --model gpt-tiny:layers=8 "${T[@]}" --plan pp=8,dp=1,mbs=1,interlace=1
finish train_interlace.sh

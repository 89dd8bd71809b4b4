#!/usr/bin/env bash
# Session 47 H100 call 2: fresh probe (batch-call pair point, last-level cached points, per-team sampling),
# tiny + OLMoE grids with --retime, op-level breakdowns of the tiny model at 8 and 16 threads.
set -u
out=$1
start=$SECONDS
rm -f /tmp/predict-profile.toml  # a warm machine's earlier probe lacks the new points
PREDICT_MODELS="tiny olmoe" OLMOE_RECORD=1 OLMOE_THREADS=8,16 OLMOE_CAPS=all,48 TINY_THREADS=8,16 PREDICT_PINS=off,on \
  PREDICT_REPEATS=3 PREDICT_TIMEOUT=240 SWEEP_ARGS=--retime OP_TIMES="tiny" OP_TIMES_THREADS="8 16" OP_TIMES_TINY_CAP=all \
  bash tools/fixtures/gpu_machine_session.sh $out predict
lscpu >$out/lscpu.txt 2>&1
echo "all done at $((SECONDS - start)) s"

#!/usr/bin/env bash
# Session 46 H100 call 2: OLMoE + tiny grids with --retime (each repeat's kernels timed again: the error apart from drift)
set -u
out=$1
start=$SECONDS
rm -f /tmp/predict-profile.toml  # a fresh probe for this call
PREDICT_MODELS="olmoe tiny" OLMOE_RECORD=1 OLMOE_THREADS=8,16 OLMOE_CAPS=all,48 TINY_THREADS=8,16 PREDICT_PINS=off,on \
  PREDICT_REPEATS=3 PREDICT_TIMEOUT=200 SWEEP_ARGS=--retime bash tools/fixtures/gpu_machine_session.sh $out predict
echo "all done at $((SECONDS - start)) s"

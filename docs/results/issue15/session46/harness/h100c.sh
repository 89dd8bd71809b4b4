#!/usr/bin/env bash
# Session 46 H100 call 3: tiny (the planner's choice with the band rule) and Qwen3 --ram 16G grids, with --retime
set -u
out=$1
start=$SECONDS
rm -f /tmp/predict-profile.toml
PREDICT_MODELS="tiny qwen" TINY_THREADS=8,16 QWEN_USAGE=1 QWEN_THREADS=8,16 QWEN_CAPS=all,64 PREDICT_PINS=off,on \
  PREDICT_REPEATS=3 PREDICT_TIMEOUT=200 SWEEP_ARGS=--retime bash tools/fixtures/gpu_machine_session.sh $out predict
echo "all done at $((SECONDS - start)) s"

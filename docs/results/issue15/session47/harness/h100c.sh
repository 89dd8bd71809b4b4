#!/usr/bin/env bash
# Session 47 H100 call 3: the Qwen3-30B-A3B-shaped grid (--ram 16G, 8/16 threads x all/64, pins off, 2 repeats)
# on the recorded routing, from the warm machine's probe when it has one (else a fresh one).
set -u
out=$1
start=$SECONDS
PREDICT_MODELS=qwen QWEN_USAGE=1 QWEN_THREADS=8,16 QWEN_CAPS=all,64 PREDICT_PINS=off PREDICT_REPEATS=2 PREDICT_TIMEOUT=330 \
  bash tools/fixtures/gpu_machine_session.sh $out predict
echo "all done at $((SECONDS - start)) s"

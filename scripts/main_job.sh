#!/usr/bin/env bash
# The main job, from a fresh clone: install glmserve, then on the local host with the
# simulator standing in for SGLang: launch -> watch -> bench -> compare, and finally the
# seeds' sweep (flashinfer, flashinfer_gtc, trtllm_mla, cutlass_mla) with its table and an
# HTML report. No GPU and no SGLang needed.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m pip install -q -e '.[report]'
export GLMSERVE_HOME="${GLMSERVE_HOME:-$PWD/out/glmserve-home}"
mkdir -p "$GLMSERVE_HOME" out
# sim.speed=10: the simulator runs GLM-5's modelled timings 10x faster than real time, so
# absolute tok/s are 10x the modelled box; ratios between profiles carry over.
SIM=(--set sim.speed=10 --set server.port="${GLMSERVE_PORT:-18000}")

echo "== 1. profiles, and the trtllm_mla flags validated against sglang 0.5.9"
glmserve profiles
glmserve render --profile trtllm_mla --sglang-version 0.5.9 --format argv

echo "== 2. launch the unpatched flashinfer baseline (simulator) and watch it to READY"
run_fi=$(glmserve launch --profile flashinfer --simulate "${SIM[@]}" --replace)
glmserve status
echo "== 3. bench single-stream decode, then stop"
glmserve bench "$run_fi" --mode decode --num-prompts 3 --output-len 64
glmserve stop "$run_fi"

echo "== 4. the same for flashinfer_gtc (gather-then-cast patch), then compare the two"
run_gtc=$(glmserve launch --profile flashinfer_gtc --simulate "${SIM[@]}" --replace)
glmserve status
glmserve bench "$run_gtc" --mode decode --num-prompts 3 --output-len 64
glmserve stop "$run_gtc"
glmserve compare --last 2

echo "== 5. the seeds' sweep on the local host, then its HTML report"
glmserve sweep --simulate --profiles flashinfer,flashinfer_gtc,trtllm_mla,cutlass_mla \
  --host local "${SIM[@]}" --bench decode --bench concurrency --concurrency 1,4,16 \
  --num-prompts 16 --output-len 64 --continue-on-error | tee out/sweep.txt
sweep_id=$(ls -t "$GLMSERVE_HOME/sweeps" | head -1)
glmserve report "$sweep_id" --html out/report.html --png out/plots
echo "sweep $sweep_id: table above, $GLMSERVE_HOME/sweeps/$sweep_id/sweep.md; report out/report.html"

#!/usr/bin/env bash
# GLM-5 on 8x RTX PRO 6000, trtllm_mla; every value through a variable or a quote.
set -uo pipefail
MODEL=lukealonso/GLM-5-NVFP4
export TP=8
PORT="8000"
echo "starting on port $PORT" >&2   # --not-a-flag in a comment
NCCL_IB_DISABLE=1 OMP_NUM_THREADS=8 exec python3 -u -m sglang.launch_server \
    --model "$MODEL" \
    --served-model-name 'glm-5' \
    --tp-size ${TP} --port=$PORT \
    --chat-template "{% if x %}a b{% endif %}" \
    --host 0.0.0.0   # trailing comment
echo "never reached"

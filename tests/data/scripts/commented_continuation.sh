python3 -m sglang.launch_server \
  --model m \
  # --attention-backend flashinfer \
  --attention-backend trtllm_mla \
  --port 8000

python3 -m sglang.launch_server --model "$MODEL_DIR/glm" --tp-size "$(nproc)" --port 8000 "$@"

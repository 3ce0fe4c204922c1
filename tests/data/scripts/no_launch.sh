#!/bin/bash
# benchmarks only: no server here
python3 -m sglang.bench_serving --backend sglang --num-prompts 10
echo "python3 -m sglang.launch_server --model m"

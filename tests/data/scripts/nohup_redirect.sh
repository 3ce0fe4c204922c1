cd "$(dirname "$0")" || exit 1
nohup python -m sglang.launch_server --model m --port 8001 --attention-backend flashinfer > /dev/null 2>&1 &
wait
echo launched; python3 -m sglang.check_env

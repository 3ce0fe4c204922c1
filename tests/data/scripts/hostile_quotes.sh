# values with spaces, quotes, $, backslashes and a JSON blob
python3 -um sglang.launch_server --model "/models/My Model" --served-model-name $'glm\t5' \
  --json-model-override-args '{"rope_scaling": {"type": "yarn", "factor": 2.0}}' \
  --api-key "a\"b\$c\\d" --tool-call-parser glm47;echo done

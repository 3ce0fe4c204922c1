#!/bin/bash
# writes a helper file first; its text must not be taken for commands
cat > /dev/null <<'EOF_NOTES'
python3 -m sglang.launch_server --model from-the-heredoc --port "unterminated
EOF_NOTES
cat > /dev/null <<-END
	it's data, with an odd quote
	END
python3 -m sglang.launch_server --model real --port 8002 <<< "stdin text"

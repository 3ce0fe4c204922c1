"""The ``glmserve`` console script (``[project.scripts]``) and ``python -m glmserve``.

Kept apart from ``glmserve.cli`` on purpose: importing the CLI (typer, rich, every verb
module) takes a few hundred milliseconds, and a Ctrl-C in that time arrives inside an import,
before ``cli.main`` and its Ctrl-C handling exist, so the script pip generates
(``from glmserve.cli import main``) died with a raw KeyboardInterrupt traceback. Here the
import itself is inside the handler, and this module imports nothing of glmserve before it.
"""

from __future__ import annotations

import sys

# errors.EXIT_INTERRUPTED, spelled out: importing glmserve.errors first would open the same
# window this module closes (tests/unit/test_cli_main.py checks the two agree).
EXIT_INTERRUPTED = 130


def main() -> int:
    """Import and run the CLI; Ctrl-C at any point before the CLI handles it itself (during
    the imports) is "interrupted" and exit 130, as it is inside a verb."""
    try:
        from glmserve.cli import main as cli_main

        return cli_main()
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())

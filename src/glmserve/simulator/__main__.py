"""``python -m glmserve.simulator``: see the package docstring."""

import sys

from glmserve.simulator import main

if __name__ == "__main__":
    sys.exit(main())

"""Kept for imports: the stall rules' notion of progress lives in
:mod:`glmserve.diagnose.progress`, shared with offline ``diagnose``."""

from glmserve.diagnose.progress import NewLines, is_chatter, line_key, moves_on

__all__ = ["NewLines", "is_chatter", "line_key", "moves_on"]

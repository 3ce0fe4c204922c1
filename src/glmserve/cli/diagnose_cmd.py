"""Verbs registered by this module (filled in by its issue)."""

from glmserve.cli._app import app  # noqa: F401

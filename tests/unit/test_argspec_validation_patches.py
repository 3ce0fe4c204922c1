"""Validation knows what a profile's runtime patches change: the whole-pool-cast pitfall is
not warned about when the gather-then-cast patch is on, and a release the patch will refuse
at start is warned about before launch."""

from __future__ import annotations

import pytest

from glmserve.argspec.validation import validate_spec
from glmserve.config.profiles import load_profile
from glmserve.errors import FlagValidationError


def test_whole_pool_cast_warning_only_without_the_patch():
    plain = validate_spec(load_profile("flashinfer"), "0.5.9")
    patched = validate_spec(load_profile("flashinfer_gtc"), "0.5.9")
    assert any("casts the whole KV pool" in w for w in plain)
    assert not any("casts the whole KV pool" in w for w in patched)
    # one severity word per line: the CLI prefixes it
    assert not any(w.count("warning:") for w in plain + patched)


def test_patch_refusing_the_release_is_an_error_before_launch():
    """0.5.13..0.5.23 are supported since the AST rewrite (issue 13 #2); 0.5.7 is refused
    by the patch, so validation refuses it too (issue 10 #3: one source of truth)."""
    for version in ("0.5.12", "0.5.13", "0.5.23"):
        spec = load_profile("flashinfer_gtc", overrides=_nsa_names(version))
        assert not any("PATCH_FAILED" in w for w in validate_spec(spec, version))
    with pytest.raises(FlagValidationError) as info:
        validate_spec(load_profile("flashinfer_gtc"), "0.5.7")
    assert "glmserve patch flashinfer_mla_gather_cast FAILED: unsupported sglang 0.5.7" in str(
        info.value
    )


def _nsa_names(version: str) -> list[str]:
    """0.5.23 renamed --nsa-*-backend (the base profile's keys) to --dsa-*-backend."""
    if version != "0.5.23":
        return []
    return [
        "server.nsa-decode-backend=null",
        "server.nsa-prefill-backend=null",
        "server.dsa-decode-backend=trtllm",
        "server.dsa-prefill-backend=trtllm",
    ]

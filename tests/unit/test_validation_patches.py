"""Validation knows what a profile's runtime patches change: the whole-pool-cast pitfall is
not warned about when the gather-then-cast patch is on, and a release the patch will refuse
at start is warned about before launch."""

from __future__ import annotations

from glmserve.profiles import load_profile
from glmserve.validation import validate_spec


def test_whole_pool_cast_warning_only_without_the_patch():
    plain = validate_spec(load_profile("flashinfer"), "0.5.9")
    patched = validate_spec(load_profile("flashinfer_gtc"), "0.5.9")
    assert any("casts the whole KV pool" in w for w in plain)
    assert not any("casts the whole KV pool" in w for w in patched)
    # one severity word per line: the CLI prefixes it
    assert not any(w.count("warning:") for w in plain + patched)


def test_patch_refusing_the_release_is_warned_before_launch():
    assert not any(
        "PATCH_FAILED" in w for w in validate_spec(load_profile("flashinfer_gtc"), "0.5.12")
    )
    warned = [
        w for w in validate_spec(load_profile("flashinfer_gtc"), "0.5.13") if "PATCH_FAILED" in w
    ]
    assert len(warned) == 1 and "0.5.8..0.5.12.post1" in warned[0]
    assert not any("PATCH_FAILED" in w for w in validate_spec(load_profile("flashinfer"), "0.5.13"))

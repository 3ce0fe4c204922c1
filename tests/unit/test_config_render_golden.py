"""Golden: the trtllm_mla profile renders the seed's run_tp8_trtllm_mla.sh for 0.5.9, is
refused for 0.5.8 (no `trtllm` choice) and is spelled the newest release's way there."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from glmserve.argspec.releases import available_versions, version_key
from glmserve.config.profiles import load_profile
from glmserve.errors import FlagValidationError

SEED = Path(__file__).resolve().parents[1] / "data" / "scripts" / "run_tp8_trtllm_mla.sh"


def reference_argv() -> list[str]:
    """Flags of the seed script, read with shlex independently of glmserve's parser."""
    words = shlex.split(SEED.read_text().replace("\\\n", " "), comments=True)
    start = words.index("sglang.launch_server") + 1
    return words[start:]


def test_trtllm_mla_profile_equals_the_reference_script():
    assert load_profile("trtllm_mla").argv == reference_argv()


def test_render_argv_cli_equals_the_reference_script(capsys):
    from glmserve.cli import main

    rc = main(
        ["render", "--profile", "trtllm_mla", "--format", "argv", "--sglang-version", "0.5.9"]
    )
    assert rc == 0
    assert shlex.split(capsys.readouterr().out) == reference_argv()


def test_validates_on_0_5_9():
    load_profile("trtllm_mla", sglang_version="0.5.9")


def test_0_5_8_rejects_the_trtllm_choice_of_nsa_decode_backend():
    with pytest.raises(FlagValidationError) as info:
        load_profile("trtllm_mla", sglang_version="0.5.8")
    msg = str(info.value)
    assert "--nsa-decode-backend" in msg and "trtllm" in msg
    assert "glm5-nvfp4-tp8.yaml:" in msg and "server.nsa-decode-backend" in msg


def test_newest_release_gets_the_dsa_names_and_the_cuda_graph_successor():
    newest = max(available_versions(), key=version_key)
    argv = load_profile("trtllm_mla", sglang_version=newest).argv
    joined = " ".join(argv)
    assert "--dsa-decode-backend trtllm --dsa-prefill-backend trtllm" in joined
    assert "--nsa-" not in joined and "--disable-cuda-graph" not in joined
    assert "--cuda-graph-backend-decode disabled --cuda-graph-backend-prefill disabled" in joined
    # everything else is the seed's, in the seed's order
    seed = reference_argv()
    kept = [t for t in seed if not t.startswith(("--nsa-", "--disable-cuda-graph"))]
    assert [t for t in argv if t in kept] == kept


@pytest.mark.parametrize("version, code", [("0.5.9", 0), ("0.5.8", 2), ("0.5.23", 0)])
def test_render_exit_codes_by_version(version, code, capsys):
    from glmserve.cli import main

    rc = main(["render", "--profile", "trtllm_mla", "--sglang-version", version])
    assert rc == code
    if code:
        assert "Traceback" not in capsys.readouterr().err

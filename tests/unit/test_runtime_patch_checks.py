"""The patch refuses loudly: unsupported release, changed source, wrong KV dtype, cap rules.

Pure checks on stand-in modules and model runners (no sglang needed); the real-module tests
are in tests/integration/test_runtime_patch_sglang.py.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from glmserve.runtime.glmserve_runtime import PatchError  # noqa: E402
from glmserve.runtime.glmserve_runtime.patches import flashinfer_mla_gather_cast as p  # noqa: E402

FAILED = "glmserve patch flashinfer_mla_gather_cast FAILED: "


def _module_from(tmp_path: Path, text: str) -> ModuleType:
    path = tmp_path / "flashinfer_mla_backend.py"
    path.write_text(text)
    mod = ModuleType(p.TARGET)
    mod.__file__ = str(path)
    return mod


def test_unsupported_release_is_refused_naming_the_supported_range(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(p, "sglang_version", lambda: "0.5.24")
    monkeypatch.delenv(p.ALLOW_VERSION_ENV, raising=False)
    with pytest.raises(PatchError) as info:
        p.check_supported(_module_from(tmp_path, "x = 1\n"))
    assert str(info.value) == (
        FAILED + "unsupported sglang 0.5.24 (supported: 0.5.8 to 0.5.23, 21 releases); "
        "run a supported release (or, on SM100 GPUs, the trtllm_mla profile)"
    )
    assert capsys.readouterr().err.startswith(FAILED + "unsupported sglang 0.5.24")


def test_every_release_from_0_5_8_to_0_5_23_is_in_the_table():
    """Issue 13 #2: no release that still has the whole-pool cast is refused by version."""
    assert "0.5.13" in p.SUPPORTED_VERSIONS and "0.5.23" in p.SUPPORTED_VERSIONS
    assert "0.5.15.post1" in p.SUPPORTED_VERSIONS and "0.5.12.post1" in p.SUPPORTED_VERSIONS
    assert len(p.SUPPORTED_VERSIONS) == len(set(p.SUPPORTED_VERSIONS)) == 21
    assert len(p.TESTED_SOURCES) == 10


def test_changed_backend_source_is_refused_even_on_a_supported_version(tmp_path, monkeypatch):
    monkeypatch.setattr(p, "sglang_version", lambda: "0.5.9")
    text = "class FlashInferMLAAttnBackend:\n    def forward_decode(self): ...\n"
    digest = hashlib.sha256(text.encode()).hexdigest()
    with pytest.raises(PatchError, match=r"not a tested source .*modified or unknown") as info:
        p.check_supported(_module_from(tmp_path, text))
    assert digest[:12] in str(info.value)


def test_an_untested_version_may_be_allowed_but_the_source_must_still_match(tmp_path, monkeypatch):
    monkeypatch.setattr(p, "sglang_version", lambda: "0.5.9.post1")
    monkeypatch.setenv(p.ALLOW_VERSION_ENV, "1")
    with pytest.raises(PatchError, match=r"not a tested source"):
        p.check_supported(_module_from(tmp_path, "x = 2\n"))


def test_module_without_a_readable_source_is_refused(monkeypatch):
    monkeypatch.setattr(p, "sglang_version", lambda: "0.5.9")
    mod = ModuleType(p.TARGET)
    mod.__file__ = "/nonexistent/flashinfer_mla_backend.cpython-311.pyc"
    with pytest.raises(PatchError, match="cannot read"):
        p.check_supported(mod)


def _runner(kv_dtype=torch.float8_e4m3fn, dtype=torch.bfloat16, pool_size=100):
    return SimpleNamespace(
        kv_cache_dtype=kv_dtype,
        dtype=dtype,
        device="cpu",
        page_size=1,
        model_config=SimpleNamespace(kv_lora_rank=512, qk_rope_head_dim=64),
        token_to_kv_pool=SimpleNamespace(size=pool_size),
    )


@pytest.mark.parametrize(
    ("kv_dtype", "dtype", "message"),
    [
        (torch.bfloat16, torch.bfloat16, "not torch.float8_e4m3fn: there is no whole-pool cast"),
        (torch.float8_e5m2, torch.bfloat16, "KV cache dtype is torch.float8_e5m2"),
        (torch.float8_e4m3fn, torch.float16, "model dtype torch.float16 is not bfloat16"),
    ],
)
def test_backend_state_refuses_what_the_kernel_cannot_serve(kv_dtype, dtype, message):
    with pytest.raises(PatchError, match=message):
        p.GatherState(_runner(kv_dtype, dtype))


def test_selection_grows_the_shared_buffer_and_respects_the_cap(monkeypatch, capsys):
    monkeypatch.setenv(p.MAX_ROWS_ENV, "5000")
    p._BUFFERS.clear()
    state = p.GatherState(_runner(pool_size=100_000))
    assert state.cap == 5000 and state.pool_rows == 100_001
    idx = torch.arange(3000, dtype=torch.int32)
    sel = state.select(torch.tensor([0, 1000, 3000], dtype=torch.int32), idx)
    assert sel.compact and sel.nnz == 3000 and torch.equal(sel.indices, idx)
    assert 3000 <= state.buffer.rows <= 5000
    assert torch.equal(state.buffer.identity[:3000], torch.arange(3000, dtype=torch.int32))
    big = torch.arange(6000, dtype=torch.int32)
    for _ in range(2):
        sel = state.select(torch.tensor([0, 6000], dtype=torch.int32), big)
        assert not sel.compact and sel.nnz == 6000
    assert capsys.readouterr().err.count("WARNING batch needs 6000 KV rows > cap 5000") == 1
    # A second backend in the process shares the buffer rather than allocating its own.
    assert p.GatherState(_runner(pool_size=100_000)).buffer is state.buffer
    p._BUFFERS.clear()


def test_bad_cap_value_is_refused(monkeypatch):
    monkeypatch.setenv(p.MAX_ROWS_ENV, "lots")
    with pytest.raises(PatchError, match="GLMSERVE_GTC_MAX_ROWS='lots' is not an integer"):
        p.GatherState(_runner())


def test_a_wrapper_planned_outside_the_patch_is_an_error_not_a_silent_whole_pool():
    p._BUFFERS.clear()
    state = p.GatherState(_runner())
    pool = torch.zeros((101, 1, 576), dtype=torch.uint8).view(torch.float8_e4m3fn)
    with pytest.raises(PatchError, match="planned outside the patched path"):
        state.key_buffer(SimpleNamespace(), pool, 0, torch.bfloat16)
    p._BUFFERS.clear()


def test_an_idle_batch_plans_zero_rows_and_gathers_nothing():
    """DP attention and idle steps plan empty batches: no crash, an empty compact buffer."""
    p._BUFFERS.clear()
    state = p.GatherState(_runner())
    empty = torch.empty(0, dtype=torch.int32)
    sel = state.select(torch.zeros(1, dtype=torch.int32), empty)
    assert sel.compact and sel.nnz == 0
    wrapper = SimpleNamespace(_glmserve_selection=sel)
    pool = torch.zeros((101, 1, 576), dtype=torch.uint8).view(torch.float8_e4m3fn)
    out = state.key_buffer(wrapper, pool, 0, torch.bfloat16)
    assert out.shape == (0, 1, 576) and out.dtype == torch.bfloat16
    p._BUFFERS.clear()


def test_compact_rows_are_the_pool_rows_cast(monkeypatch):
    """key_buffer on CPU (torch path): rows [0, nnz) are pool[kv_indices].to(bf16)."""
    p._BUFFERS.clear()
    state = p.GatherState(_runner(pool_size=300))
    raw = torch.randint(
        0, 256, (301, 1, 576), dtype=torch.uint8, generator=torch.Generator().manual_seed(1)
    )
    pool = raw.view(torch.float8_e4m3fn)
    idx = torch.tensor([7, 300, 7, 0, 42], dtype=torch.int32)
    sel = state.select(torch.tensor([0, 2, 5], dtype=torch.int32), idx)
    out = state.key_buffer(SimpleNamespace(_glmserve_selection=sel), pool, 3, torch.bfloat16)
    want = pool[idx.long()].to(torch.bfloat16)
    assert torch.equal(out.view(torch.int16), want.view(torch.int16))
    with pytest.raises(PatchError, match=r"query dtype torch\.float16 is not bfloat16"):
        state.key_buffer(SimpleNamespace(_glmserve_selection=sel), pool, 4, torch.float16)
    with pytest.raises(PatchError, match=r"expected float8_e4m3fn \[rows, 1, 576\]"):
        state.key_buffer(
            SimpleNamespace(_glmserve_selection=sel), raw[:, :, :512], 5, torch.bfloat16
        )
    p._BUFFERS.clear()


def test_decode_context_parallel_is_detected_the_way_each_release_asks():
    """0.5.15 exports dcp_enabled(); 0.5.16+ asks get_parallel().dcp_enabled. The patch
    refuses a backend built with DCP on (its attention reads a DCP-local buffer)."""
    old = ModuleType(p.TARGET)
    old.dcp_enabled = lambda: True
    new = ModuleType(p.TARGET)
    new.get_parallel = lambda: SimpleNamespace(dcp_enabled=True)
    off = ModuleType(p.TARGET)
    off.get_parallel = lambda: SimpleNamespace(dcp_enabled=False)
    assert p.dcp_enabled(old) and p.dcp_enabled(new)
    assert not p.dcp_enabled(off) and not p.dcp_enabled(ModuleType(p.TARGET))


@pytest.mark.parametrize(
    "missing", ["FlashInferMLAIndicesUpdaterDecode", "FlashInferMLAAttnBackend"]
)
def test_the_fp8_flashinfer_rewrite_names_its_own_patch_when_the_source_differs(
    tmp_path, capsys, missing
):
    """The FP8 path's rewrite reads the source with the gather-cast patch's AST helpers; a
    refusal there said "glmserve patch flashinfer_mla_gather_cast FAILED" while that patch was
    not even asked for."""
    from glmserve.runtime.glmserve_runtime.patches import mla_fp8_flashinfer as fi

    classes = ["FlashInferMLAIndicesUpdaterDecode", "FlashInferMLAAttnBackend"]
    src = tmp_path / "flashinfer_mla_backend.py"
    src.write_text("".join(f"class {c}:\n    pass\n" for c in classes if c != missing))
    module = ModuleType(fi.TARGET)
    module.__file__ = str(src)
    with pytest.raises(PatchError) as e:
        fi.rewrite_forward_decode(module)
    assert str(e.value).startswith("glmserve patch mla_fp8_decode FAILED: "), str(e.value)
    assert "flashinfer_mla_gather_cast" not in capsys.readouterr().err

"""The gather-then-cast patch against every supported release's real backend module (CPU).

Releases that ship the same ``flashinfer_mla_backend.py`` (same sha256) are checked through
one representative each; the table in the patch module says which releases share a file:

    0.5.9   for 0.5.8, 0.5.8.post1, 0.5.9, 0.5.10, 0.5.10.post1, 0.5.11, 0.5.12, 0.5.12.post1
    0.5.13  for 0.5.13, 0.5.13.post1          0.5.15  for 0.5.15, 0.5.15.post1
    0.5.20  for 0.5.20, 0.5.21                0.5.23  for 0.5.22, 0.5.23
    0.5.14, 0.5.16, 0.5.17, 0.5.18, 0.5.19    each its own file

Each representative's wheel is downloaded once into the test cache
(``tests/fixtures/sglang_releases.py``). Static part (all ten): the file's hash is in the
table and the AST rewrite finds its one cast and plan calls. Dynamic part (0.5.13, 0.5.14,
0.5.15 and the newest, 0.5.23; 0.5.9 is driven through its real updaters in
test_runtime_patch_sglang.py; 0.5.16-0.5.20 need xgrammar to import, see DRIVEN):
a spawned worker imports the real module under the hook, and the release's own rewritten
``forward_decode`` runs over an FP8 pool; a modified backend file is refused.

Stand-ins in the dynamic part, none on the attention path: the FlashInfer wrapper (records
its inputs, computes MLA in float32 from them; imported from test_runtime_patch_sglang.py),
the pool object (``get_key_buffer`` returns a real FP8 ``[rows, 1, 576]`` tensor), the
backend's constructor (skipped: 0.5.2x needs its runtime context; the method under test
reads only ``token_to_kv_pool`` and ``forward_metadata``), ``get_parallel`` (DCP off), and
without torchvision an import stub (PyPI's wheel is a CUDA build).

This file is also the driver: ``python this_file.py OUT.pt``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PATCH = "flashinfer_mla_gather_cast"
TARGET = "sglang.srt.layers.attention.flashinfer_mla_backend"
BACKEND_FILE = "sglang/srt/layers/attention/flashinfer_mla_backend.py"
REPRESENTATIVES = (
    "0.5.9",
    "0.5.13",
    "0.5.14",
    "0.5.15",
    "0.5.16",
    "0.5.17",
    "0.5.18",
    "0.5.19",
    "0.5.20",
    "0.5.23",
)
# 0.5.16-0.5.20 import xgrammar (a compiled package, not among the CPU light deps) on the way
# to the backend module: they are checked statically above only.
DRIVEN = ("0.5.13", "0.5.14", "0.5.15", "0.5.23")
POOL_ROWS = 500
HEADS = 4
SEQ_LENS = [5, 40, 17]
HERE = Path(__file__).resolve()


# ------------------------------------------------------------------------------------------
# Driver (spawned child): imports torch and the release's sglang only.


def _stub_torchvision() -> None:
    import enum
    import importlib.abc
    import importlib.machinery
    import types

    try:
        import torchvision.transforms  # noqa: F401

        return
    except Exception:
        if importlib.util.find_spec("torchvision") is not None:
            raise

    class InterpolationMode(enum.Enum):
        NEAREST = "nearest"
        NEAREST_EXACT = "nearest-exact"
        BILINEAR = "bilinear"
        BICUBIC = "bicubic"
        BOX = "box"
        HAMMING = "hamming"
        LANCZOS = "lanczos"

    class Stub(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] == "torchvision":
                return importlib.machinery.ModuleSpec(name, self, is_package=True)
            return None

        def create_module(self, spec):
            mod = types.ModuleType(spec.name)
            mod.__path__ = []

            def attr(name, _mod=spec.name):
                if name.startswith("__"):
                    raise AttributeError(name)
                if name == "InterpolationMode":
                    return InterpolationMode
                return type(name, (), {"__module__": _mod})

            mod.__getattr__ = attr
            return mod

        def exec_module(self, module):
            return None

    sys.meta_path.insert(0, Stub())
    # transformers asks the metadata for torchvision's version once it finds the module
    import tempfile

    meta = Path(tempfile.mkdtemp(prefix="tvstub-")) / "torchvision-0.0.1.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: torchvision\nVersion: 0.0.1\n")
    sys.path.append(str(meta.parent))


def _tolerate_duplicate_config_registration() -> None:
    """Releases pinned to transformers 4.x register configs (qwen3_asr, ...) that the
    installed transformers 5.x already has; let the release's own registration pass."""
    from transformers import AutoConfig

    real = AutoConfig.register

    def register(model_type, config, exist_ok=False):
        return real(model_type, config, exist_ok=True)

    AutoConfig.register = staticmethod(register)


def _drive(out_path: str) -> None:
    from types import SimpleNamespace

    import torch

    _stub_torchvision()
    _tolerate_duplicate_config_registration()
    mod = importlib.import_module(TARGET)
    spec = importlib.util.spec_from_file_location(
        "_sg_test", HERE.parent / "test_runtime_patch_sglang.py"
    )
    helper = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helper)  # type: ignore[union-attr]

    cls = mod.FlashInferMLAAttnBackend
    patched = bool(getattr(cls, "_glmserve_patched", False))
    result: dict = {
        "pid": os.getpid(),
        "patched_class": patched,
        "rewritten": bool(getattr(cls.forward_decode, "_glmserve_rewritten", False)),
        "file": cls.forward_decode.__code__.co_filename,
    }
    if patched and (hasattr(mod, "get_parallel") or hasattr(mod, "dcp_enabled")):
        # decode context parallelism on: the patched constructor refuses before building
        mod.get_parallel = lambda: SimpleNamespace(dcp_enabled=True)
        mod.dcp_enabled = lambda: True
        try:
            cls(SimpleNamespace())
            result["dcp_refusal"] = None
        except Exception as exc:
            result["dcp_refusal"] = f"{type(exc).__name__}: {exc}"
        mod.dcp_enabled = lambda: False
    if hasattr(mod, "get_parallel"):
        mod.get_parallel = lambda: SimpleNamespace(
            dcp_enabled=False, attn_tp_size=1, attn_dcp_size=1
        )
    gen = torch.Generator().manual_seed(0)
    raw = (torch.randn((POOL_ROWS + 1, 1, 576), generator=gen) * 0.7).to(torch.float8_e4m3fn)
    pool = SimpleNamespace(get_key_buffer=lambda layer_id: raw, size=POOL_ROWS)
    runner = SimpleNamespace(
        kv_cache_dtype=torch.float8_e4m3fn,
        dtype=torch.bfloat16,
        device="cpu",
        page_size=1,
        model_config=SimpleNamespace(kv_lora_rank=512, qk_rope_head_dim=64),
        token_to_kv_pool=pool,
    )
    backend = cls.__new__(cls)
    backend.token_to_kv_pool = pool
    wrapper = helper.RecordingWrapper()
    backend.forward_metadata = mod.DecodeMetadata(wrapper)
    slots = (torch.randperm(POOL_ROWS, generator=gen)[: sum(SEQ_LENS)] + 1).to(torch.int32)
    kv_indptr = torch.zeros(len(SEQ_LENS) + 1, dtype=torch.int32)
    kv_indptr[1:] = torch.cumsum(torch.tensor(SEQ_LENS), 0)
    qo = torch.arange(len(SEQ_LENS) + 1, dtype=torch.int32)
    plan_args = (qo, kv_indptr, slots, torch.tensor(SEQ_LENS, dtype=torch.int32), HEADS, 512, 64,
                 1, False, 576**-0.5, torch.bfloat16, torch.bfloat16)  # fmt: skip
    if patched:  # the same module object the hook used (runtime tree on PYTHONPATH)
        from glmserve_runtime.patches import flashinfer_mla_gather_cast as gtc

        backend._glmserve_gtc = gtc.GatherState(runner)
        with gtc.intercept_plan(wrapper, backend._glmserve_gtc):
            wrapper.plan(*plan_args)
    else:
        wrapper.plan(*plan_args)
    layer = SimpleNamespace(layer_id=0, tp_q_head_num=HEADS, tp_k_head_num=1, v_head_dim=512,
                            head_dim=576, logit_cap=0.0, scaling=576**-0.5)  # fmt: skip
    q = torch.randn((len(SEQ_LENS), HEADS * 576), generator=gen).to(torch.bfloat16)
    fb = SimpleNamespace(token_to_kv_pool=pool, out_cache_loc=None,
                         forward_mode=SimpleNamespace(is_decode=lambda: True))  # fmt: skip
    result["out"] = cls.forward_decode(backend, q, None, None, layer, fb, save_kv_cache=False)
    result["plan"] = wrapper.plans[-1]
    result["run"] = wrapper.runs[-1]
    result["slots"] = slots
    result["pool_bf16"] = raw.to(torch.bfloat16)
    torch.save(result, out_path)


def _main(out_path: str) -> None:
    import multiprocessing as mp

    proc = mp.get_context("spawn").Process(target=_drive, args=(out_path,))
    proc.start()
    proc.join(300)
    sys.exit(proc.exitcode if proc.exitcode is not None else 99)


# ------------------------------------------------------------------------------------------
# Tests

pytestmark = [pytest.mark.sglang, pytest.mark.slow]


def _gtc():
    from glmserve.runtime.glmserve_runtime.patches import flashinfer_mla_gather_cast as gtc

    return gtc


def _source(version: str) -> Path:
    from tests.fixtures.sglang_releases import sglang_source

    return sglang_source(version)


@pytest.mark.parametrize("version", REPRESENTATIVES)
def test_release_file_is_tested_and_the_rewrite_finds_its_one_cast(version):
    import hashlib
    from types import ModuleType

    gtc = _gtc()
    path = _source(version) / BACKEND_FILE
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert version in gtc.TESTED_SOURCES[digest]
    stand_in = ModuleType(TARGET)  # only compiles the two methods: no sglang import needed
    stand_in.__file__ = str(path)
    funcs = gtc.rewrite_forwards(stand_in)
    for name in ("forward_decode", "forward_extend"):
        code = funcs[name].__code__
        assert funcs[name]._glmserve_rewritten and code.co_filename == str(path)
        assert gtc.KEY_BUFFER_HELPER in code.co_names, name


def _mutated(tmp_path: Path, old: str, new: str, count: int = 1):
    from types import ModuleType

    text = (_source("0.5.23") / BACKEND_FILE).read_text()
    assert old in text
    path = tmp_path / "flashinfer_mla_backend.py"
    path.write_text(text.replace(old, new, count))
    stand_in = ModuleType(TARGET)
    stand_in.__file__ = str(path)
    return stand_in


def test_rewrite_refuses_when_the_cast_is_not_found_exactly_once(tmp_path, capsys):
    from glmserve.runtime.glmserve_runtime import PatchError

    cast = "k_buffer = self.token_to_kv_pool.get_key_buffer(layer.layer_id).to(q.dtype)"
    gone = _mutated(tmp_path, cast, "k_buffer = self.token_to_kv_pool.get_key_buffer(0)")
    with pytest.raises(PatchError, match=r"forward_decode: expected exactly one .* found 0 and 1"):
        _gtc().rewrite_forwards(gone)
    twice = _mutated(tmp_path, cast, cast + "\n        " + cast)
    with pytest.raises(PatchError, match=r"found 2 and 1"):
        _gtc().rewrite_forwards(twice)
    assert "FAILED: FlashInferMLAAttnBackend.forward_decode" in capsys.readouterr().err


def test_rewrite_refuses_a_plan_call_it_cannot_intercept(tmp_path):
    from glmserve.runtime.glmserve_runtime import PatchError

    old = "            wrapper.plan(\n                q_indptr,\n"
    starred = _mutated(tmp_path, old, "            wrapper.plan(\n                *[q_indptr],\n")
    with pytest.raises(PatchError, match=r"call_begin_forward: expected wrapper\.plan\("):
        _gtc().rewrite_forwards(starred)


def _runtime_tree(tmp_path: Path) -> Path:
    from glmserve.runtime import runtime_files

    runtime = tmp_path / "runtime"
    for rel, data in runtime_files().items():
        (runtime / rel).parent.mkdir(parents=True, exist_ok=True)
        (runtime / rel).write_bytes(data)
    return runtime


def _spawn(tmp_path: Path, source: Path, patched: bool):
    import torch

    if importlib.util.find_spec("triton") is None or importlib.util.find_spec("einops") is None:
        pytest.skip("needs the CPU sglang light deps (.ci/sglang-cpu-deps.txt)")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GLMSERVE_PATCHES")}
    env["PYTHONPATH"] = os.pathsep.join([str(_runtime_tree(tmp_path)), str(source)])
    env["TRITON_INTERPRET"] = "1"
    if patched:
        env["GLMSERVE_PATCHES"] = PATCH
    out = tmp_path / ("patched.pt" if patched else "unpatched.pt")
    proc = subprocess.run(
        [sys.executable, str(HERE), str(out)],
        env=env, capture_output=True, text=True, timeout=400, check=False,
    )  # fmt: skip
    res = torch.load(out, weights_only=False) if proc.returncode == 0 else None
    return proc, res


def _bits(t):
    import torch

    return t.contiguous().view(torch.int16)


@pytest.mark.parametrize("version", DRIVEN)
def test_real_module_is_patched_in_a_spawned_worker_and_decodes_on_the_compact_buffer(
    tmp_path, version
):
    import torch

    source = _source(version)
    proc, res = _spawn(tmp_path, source, patched=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert f"glmserve runtime: patches armed: {PATCH} (pid {res['pid']})" in proc.stderr
    assert f"glmserve patch {PATCH} active (sglang {version}, pid {res['pid']})" in proc.stderr
    assert res["patched_class"] and res["rewritten"]
    if version in ("0.5.15", "0.5.23"):  # releases with decode context parallelism
        assert res["dcp_refusal"].startswith(
            f"PatchError: glmserve patch {PATCH} FAILED: decode context parallelism is on"
        )
    assert res["file"] == str(source / BACKEND_FILE)
    nnz = sum(SEQ_LENS)
    assert torch.equal(res["plan"]["kv_indices"], torch.arange(nnz, dtype=torch.int32))
    compact = torch.cat([res["run"]["ckv"], res["run"]["kpe"]], dim=-1)
    assert compact.shape == (nnz, 1, 576) and res["run"]["same_storage"]
    assert torch.equal(_bits(compact), _bits(res["pool_bf16"][res["slots"].long()]))

    (tmp_path / "u").mkdir()
    base_proc, base = _spawn(tmp_path / "u", source, patched=False)
    assert base_proc.returncode == 0, base_proc.stderr[-4000:]
    assert base["patched_class"] is False and "glmserve patch" not in base_proc.stderr
    assert torch.equal(base["plan"]["kv_indices"], base["slots"])
    whole = torch.cat([base["run"]["ckv"], base["run"]["kpe"]], dim=-1)
    assert whole.shape == (POOL_ROWS + 1, 1, 576)
    assert torch.equal(_bits(res["out"]), _bits(base["out"]))


def test_a_modified_backend_file_is_refused_in_the_spawned_worker(tmp_path):
    source = _source("0.5.23")
    tree = tmp_path / "sglang-0.5.23-modified"
    shutil.copytree(source, tree, copy_function=os.symlink)  # links: fast, same files
    target = tree / BACKEND_FILE
    text = (source / BACKEND_FILE).read_text()
    target.unlink()
    target.write_text(text + "\n# local edit\n")
    proc, _ = _spawn(tmp_path, tree, patched=True)
    assert proc.returncode != 0
    assert f"glmserve patch {PATCH} FAILED: {TARGET} in sglang 0.5.23 is not a tested source" in (
        proc.stderr
    )
    assert f"glmserve patch {PATCH} active" not in proc.stderr


if __name__ == "__main__":
    _main(sys.argv[1])

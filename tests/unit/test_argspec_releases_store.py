"""The shipped argspec store (index + content-addressed gzip specs) and version resolution:
every release the dump covered is indexed, post releases resolve to themselves, an unknown
release is a one-line error naming its neighbours (never a silent fallback), spec files load
as .json and .json.gz."""

from __future__ import annotations

import ast
import gzip
import json
import re
from pathlib import Path, PurePosixPath

import pytest

from glmserve.argspec import releases
from glmserve.argspec.emulator import validate_argv
from glmserve.argspec.releases import (
    available_versions,
    load_argspec,
    newest_version,
    normalize_version,
    prune_unreferenced_specs,
    read_index,
    record_failure,
    resolve_version,
    spec_digest,
    store_spec,
    version_key,
)
from glmserve.cli import main
from glmserve.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
STORE = REPO / "src" / "glmserve" / "argspec" / "data"

# `pip index versions sglang` on 2026-11-30 (https://pypi.org/project/sglang/#history),
# every release from 0.4.0 through 0.5.23; there is no 0.5.0 on PyPI. The dump
# (`scripts/dump_argspec.py --all`) covered exactly these.
PYPI_RELEASES = [
    "0.4.0",
    "0.4.0.post1",
    "0.4.0.post2",
    "0.4.1",
    "0.4.1.post1",
    "0.4.1.post2",
    "0.4.1.post3",
    "0.4.1.post4",
    "0.4.1.post5",
    "0.4.1.post6",
    "0.4.1.post7",
    "0.4.2",
    "0.4.2.post1",
    "0.4.2.post2",
    "0.4.2.post3",
    "0.4.2.post4",
    "0.4.3",
    "0.4.3.post1",
    "0.4.3.post2",
    "0.4.3.post3",
    "0.4.3.post4",
    "0.4.4",
    "0.4.4.post1",
    "0.4.4.post2",
    "0.4.4.post3",
    "0.4.4.post4",
    "0.4.5",
    "0.4.5.post1",
    "0.4.5.post2",
    "0.4.5.post3",
    "0.4.6",
    "0.4.6.post1",
    "0.4.6.post2",
    "0.4.6.post3",
    "0.4.6.post4",
    "0.4.6.post5",
    "0.4.7",
    "0.4.7.post1",
    "0.4.8",
    "0.4.8.post1",
    "0.4.9",
    "0.4.9.post1",
    "0.4.9.post2",
    "0.4.9.post3",
    "0.4.9.post4",
    "0.4.9.post5",
    "0.4.9.post6",
    "0.4.10",
    "0.4.10.post1",
    "0.4.10.post2",
    "0.5.1",
    "0.5.1.post1",
    "0.5.1.post2",
    "0.5.1.post3",
    "0.5.2",
    "0.5.3",
    "0.5.3.post1",
    "0.5.3.post2",
    "0.5.3.post3",
    "0.5.4",
    "0.5.4.post1",
    "0.5.4.post2",
    "0.5.4.post3",
    "0.5.5",
    "0.5.5.post1",
    "0.5.5.post2",
    "0.5.5.post3",
    "0.5.6",
    "0.5.6.post1",
    "0.5.6.post2",
    "0.5.7",
    "0.5.8",
    "0.5.8.post1",
    "0.5.9",
    "0.5.10",
    "0.5.10.post1",
    "0.5.11",
    "0.5.12",
    "0.5.12.post1",
    "0.5.13",
    "0.5.13.post1",
    "0.5.14",
    "0.5.15",
    "0.5.15.post1",
    "0.5.16",
    "0.5.17",
    "0.5.18",
    "0.5.19",
    "0.5.20",
    "0.5.21",
    "0.5.22",
    "0.5.23",
]


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    captured = capsys.readouterr()
    return int(rc or 0), captured.out, captured.err


# --- coverage and storage -----------------------------------------------------------------


def test_index_covers_every_release_the_dump_covered_in_order() -> None:
    index = read_index()
    assert set(index["versions"]) | set(index["failed"]) == set(PYPI_RELEASES)
    assert not set(index["versions"]) & set(index["failed"])
    assert available_versions() == [v for v in PYPI_RELEASES if v in index["versions"]]
    assert newest_version() == "0.5.23"
    for version, reason in index["failed"].items():
        assert reason.strip() and "\n" not in reason, version


def test_every_indexed_release_loads_as_itself_with_provenance() -> None:
    for version in available_versions():
        spec = load_argspec(version)
        assert spec.version == version
        assert f"sglang=={version} " in spec.meta["made_by"]
        assert spec.meta["python_version"]
        assert "--model-path" in spec.by_option
        assert validate_argv(["--model-path", "m"], spec).ok, version


def test_store_is_content_addressed_deduplicated_and_small() -> None:
    index = read_index()
    files = sorted((STORE / "specs").glob("*.json.gz"))
    names = {p.name.removesuffix(".json.gz") for p in files}
    assert names == {entry["spec"] for entry in index["versions"].values()}
    for path in files:
        body = json.loads(gzip.decompress(path.read_bytes()))
        assert spec_digest(body) == path.name.removesuffix(".json.gz")
    # Fewer files than releases: post releases often share their release's CLI.
    assert len(files) < len(index["versions"])
    total = sum(p.stat().st_size for p in files) + (STORE / "index.json").stat().st_size
    assert total < 3 * 1024 * 1024
    assert not list(STORE.glob("sglang-*.json"))  # no raw dumps left beside the store


def test_package_data_ships_the_store() -> None:
    toml = (REPO / "pyproject.toml").read_text(encoding="utf-8")  # no tomllib on 3.10
    section = toml.split("[tool.setuptools.package-data]", 1)[1]
    line = re.search(r"^glmserve\s*=\s*(\[.*\])\s*$", section, re.MULTILINE)
    assert line is not None
    patterns = ast.literal_eval(line.group(1))
    package = STORE.parents[1]  # the glmserve package the patterns are relative to
    shipped = [STORE / "index.json", *(STORE / "specs").glob("*.json.gz")]
    for path in shipped:
        rel = PurePosixPath(path.relative_to(package).as_posix())
        assert any(rel.match(p) for p in patterns), rel


def test_store_spec_dedupes_indexes_and_prunes(tmp_path: Path) -> None:
    actions = [{"option_strings": ["--model-path"], "dest": "model_path"}]
    first = store_spec({"sglang_version": "1.0.0", "actions": actions, "made_by": "a"}, tmp_path)
    again = store_spec({"sglang_version": "1.0.0.post1", "actions": actions}, tmp_path)
    assert first == again
    assert len(list((tmp_path / "specs").glob("*.json.gz"))) == 1
    record_failure(tmp_path, "0.9.0", "ImportError: x")
    record_failure(tmp_path, "1.0.0", "ignored: 1.0.0 has a spec")
    index = read_index(tmp_path)
    assert index["versions"]["1.0.0"] == {"spec": first, "made_by": "a"}
    assert index["failed"] == {"0.9.0": "ImportError: x"}
    other = [{"option_strings": ["--port"], "dest": "port"}]
    store_spec({"sglang_version": "1.0.0.post1", "actions": other}, tmp_path)
    assert prune_unreferenced_specs(tmp_path) == []  # 1.0.0 still points at the first
    store_spec({"sglang_version": "1.0.0", "actions": other}, tmp_path)
    assert [p.name for p in prune_unreferenced_specs(tmp_path)] == [f"{first}.json.gz"]


# --- version resolution --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("0.5.10.post1", "0.5.10.post1"),
        ("v0.5.10.post1", "0.5.10.post1"),
        ("0.5.10-post1", "0.5.10.post1"),
        ("0.5.10post1", "0.5.10.post1"),
        (" V0.5.9 ", "0.5.9"),
        ("0.4.6.post5", "0.4.6.post5"),
    ],
)
def test_release_spellings_resolve_to_that_exact_release(text: str, want: str) -> None:
    assert resolve_version(text) == want
    assert load_argspec(text).version == want


def test_version_order_puts_post_releases_after_their_release() -> None:
    order = sorted(["0.5.10", "0.5.9.post1", "0.4.10", "0.5.9", "0.5.9.post10", "0.5.9.post2"])
    assert sorted(order, key=version_key) == [
        "0.4.10",
        "0.5.9",
        "0.5.9.post1",
        "0.5.9.post2",
        "0.5.9.post10",
        "0.5.10",
    ]
    assert normalize_version("0.5.9rc1") is None
    assert normalize_version("0.5") == "0.5.0"


@pytest.mark.parametrize(
    ("text", "nearest"),
    [
        ("0.5.24", "nearest shipped: 0.5.23;"),  # newer than anything dumped
        ("0.5.9.post1", "nearest shipped: 0.5.9, 0.5.10;"),  # PyPI has no 0.5.9.post1
        ("0.5.0", "nearest shipped: 0.4.10.post2, 0.5.1;"),  # PyPI has no 0.5.0
        ("0.3.6", "nearest shipped: 0.4.0;"),  # older than the oldest dumped
    ],
)
def test_unknown_release_is_one_line_naming_neighbours_and_how_to_dump(
    text: str, nearest: str
) -> None:
    with pytest.raises(ConfigError) as exc:
        load_argspec(text)
    message = str(exc.value)
    assert "\n" not in message
    assert f"no argspec shipped for sglang {text!r}" in message
    assert nearest in message
    assert f"scripts/dump_argspec.py {normalize_version(text)}" in message
    assert "glmserve check" in message and "--spec FILE" in message


def test_typo_is_rejected_not_mapped_to_a_release() -> None:
    with pytest.raises(ConfigError, match=r"no argspec shipped for sglang '0\.5\.x'.*VERSION"):
        load_argspec("0.5.x")


def test_release_that_could_not_be_dumped_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    index = {**read_index(), "failed": {"0.5.9.post7": "ImportError: cannot import name 'x'"}}
    monkeypatch.setattr(releases, "_shipped_index", lambda: index)
    with pytest.raises(ConfigError) as exc:
        load_argspec("0.5.9.post7")
    assert "could not be dumped (ImportError: cannot import name 'x')" in str(exc.value)


def test_cli_unknown_release_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(
        capsys, "validate", "--sglang-version", "0.5.24", "--", "--model-path", "x"
    )
    assert code == 2
    assert "nearest shipped: 0.5.23" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    code, _, err = run_cli(capsys, "render", "--profile", "trtllm_mla", "--sglang-version", "v9")
    assert code == 2 and "no argspec shipped for sglang 'v9'" in err


def test_cli_old_and_unshipped_before_releases_now_validate(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Both exited 2 with "no argspec shipped" before every release was dumped.
    code, out, err = run_cli(
        capsys, "validate", "--sglang-version", "0.4.6", "--", "--model-path", "x", "--tp", "8"
    )
    assert code == 0, out + err
    assert "ok for sglang 0.4.6" in out
    code, out, err = run_cli(
        capsys, "render", "--profile", "trtllm_mla", "--sglang-version", "0.5.11"
    )
    assert "no argspec shipped" not in err
    assert "0.5.11" in out + err


# --- spec files -------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_spec_file_loads_as_json_or_gzip(tmp_path: Path, suffix: str) -> None:
    shipped = load_argspec("0.5.9")
    body = json.loads(
        gzip.decompress((STORE / "specs" / f"{shipped.meta['spec_digest']}.json.gz").read_bytes())
    )
    text = json.dumps({**body, "sglang_version": "0.5.9+host"})
    path = tmp_path / f"host{suffix}"
    if suffix.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    loaded = load_argspec(str(path))
    assert loaded.version == "0.5.9+host"
    assert loaded.options == shipped.options


def test_spec_file_errors_name_the_file(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json.gz"
    broken.write_bytes(gzip.compress(b'{\n "actions": [\n oops\n]}'))
    with pytest.raises(ConfigError, match=r"broken\.json\.gz:3: argspec is not valid JSON"):
        load_argspec(str(broken))
    truncated = tmp_path / "cut.json.gz"
    truncated.write_bytes(gzip.compress(b"{}")[:-6])
    with pytest.raises(ConfigError, match=r"cut\.json\.gz: argspec is not valid gzip"):
        load_argspec(str(truncated))
    with pytest.raises(ConfigError, match="no such argspec file"):
        load_argspec(str(tmp_path / "missing.json.gz"))


def test_cli_spec_gz_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    digest = load_argspec("0.5.8").meta["spec_digest"]
    body = json.loads(gzip.decompress((STORE / "specs" / f"{digest}.json.gz").read_bytes()))
    path = tmp_path / "host.json.gz"
    path.write_bytes(gzip.compress(json.dumps({**body, "sglang_version": "0.5.8"}).encode()))
    code, out, _ = run_cli(capsys, "validate", "--spec", str(path), "--", "--model-path", "x")
    assert code == 0 and "ok for sglang 0.5.8" in out


def test_spec_file_gzip_bomb_is_refused_with_one_line(tmp_path, capsys):
    """``--spec FILE`` may be gzip: a small file that unpacks to far more than any real spec
    (~160 KB) is refused by size, without unpacking it all into memory."""
    import gzip

    from glmserve.argspec.releases import MAX_SPEC_BYTES
    from glmserve.cli import main

    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip.compress(b" " * (MAX_SPEC_BYTES + 1024)))
    assert bomb.stat().st_size < 100_000
    rc = main(["validate", "--spec", str(bomb), "--", "--tp-size", "8"])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert err == f"error: {bomb}: argspec unpacks to more than {MAX_SPEC_BYTES} bytes"

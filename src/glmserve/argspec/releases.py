"""Where a release's spec comes from: the shipped store, or a spec file by path.

The store (``argspec/data/``) holds ``index.json``, mapping every release (post releases
included) to the content hash of its spec, and ``specs/<hash>.json.gz``, each distinct spec
once (consecutive releases often share a CLI), so ~100 releases fit in about a megabyte.
``scripts/dump_argspec.py`` writes it with ``store_spec``/``record_failure``; everything else
only reads it. Release numbers are matched exactly, then normalised (``v0.5.9``,
``0.5.9-post1``), never to a different release: an unknown one is a ConfigError naming the
nearest shipped releases and how to dump the right spec.
"""

from __future__ import annotations

import difflib
import gzip
import hashlib
import io
import json
import re
from functools import cache, lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from glmserve.argspec.model import ArgSpec, parse_argspec
from glmserve.errors import ConfigError

INDEX_NAME = "index.json"
SPECS_SUBDIR = "specs"
INDEX_FORMAT = 2
# ``v0.5.9``, ``0.5.9``, ``0.5.9.post1``, ``0.5.9post1``, ``0.5.9-post1``, ``0.5`` (= 0.5.0).
_RELEASE = re.compile(r"^[vV]?(\d+)\.(\d+)(?:\.(\d+))?(?:[.-]?post(\d+))?$")
# A real spec is ~160 KB of JSON (the largest release); 16 MiB leaves room and bounds memory.
MAX_SPEC_BYTES = 16 << 20


def data_dir() -> Path:
    """The shipped store (and the translation table beside it) inside the package."""
    return Path(str(resources.files("glmserve.argspec") / "data"))


# --- release numbers ------------------------------------------------------------------------


def normalize_version(text: str) -> str | None:
    """The canonical spelling of a release (``v0.5.09`` -> ``0.5.9``, ``0.5.9-post1`` ->
    ``0.5.9.post1``), or None when ``text`` is not a plain release number (rc/dev/typos)."""
    match = _RELEASE.match(text.strip())
    if not match:
        return None
    major, minor, patch, post = match.groups()
    release = f"{int(major)}.{int(minor)}.{int(patch or 0)}"
    return release if post is None else f"{release}.post{int(post)}"


def version_key(version: str) -> tuple[int, ...]:
    """Sort key (major, minor, patch, post; post -1 = none) so 0.5.9 < 0.5.9.post1 < 0.5.10."""
    match = _RELEASE.match(version.strip())
    if match:
        major, minor, patch, post = match.groups()
        return (int(major), int(minor), int(patch or 0), -1 if post is None else int(post))
    numbers = [int(x) for x in re.findall(r"\d+", version)][:4]
    return tuple(numbers + [-1] * (4 - len(numbers)))


# --- the store: index and content-addressed specs --------------------------------------------


def _empty_index() -> dict[str, Any]:
    return {"format": INDEX_FORMAT, "versions": {}, "failed": {}}


def read_index(directory: Path | None = None) -> dict[str, Any]:
    """``index.json`` of a spec directory (the shipped one by default); empty when absent."""
    path = (directory or data_dir()) / INDEX_NAME
    if not path.is_file():
        return _empty_index()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: unreadable argspec index ({exc})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("versions"), dict):
        raise ConfigError(f"{path}: argspec index has no 'versions' mapping")
    data.setdefault("failed", {})
    return data


def _canonical_body(data: dict[str, Any]) -> bytes:
    """What identifies a CLI: parser settings and actions (not when or how it was dumped)."""
    body = {
        "format": data.get("format", 1),
        "parser": data.get("parser") or {},
        "actions": data["actions"],
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")


def spec_digest(data: dict[str, Any]) -> str:
    """Content hash of a dump's CLI (16 hex digits): equal CLIs share one stored file."""
    return hashlib.sha256(_canonical_body(data)).hexdigest()[:16]


def _write_index(directory: Path, index: dict[str, Any]) -> None:
    index["format"] = INDEX_FORMAT
    index["versions"] = {
        v: index["versions"][v] for v in sorted(index["versions"], key=version_key)
    }
    index["failed"] = {v: index["failed"][v] for v in sorted(index["failed"], key=version_key)}
    text = json.dumps(index, indent=1, sort_keys=False) + "\n"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / INDEX_NAME).write_text(text, encoding="utf-8")


def store_spec(data: dict[str, Any], directory: Path) -> str:
    """Store one dump under ``directory`` (deduplicated by content) and index its release."""
    payload = _canonical_body(data)
    digest = hashlib.sha256(payload).hexdigest()[:16]
    target = directory / SPECS_SUBDIR / f"{digest}.json.gz"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(gzip.compress(payload, compresslevel=9, mtime=0))
    index = read_index(directory)
    version = str(data["sglang_version"])
    meta = {k: v for k, v in data.items() if k not in ("actions", "parser", "format")}
    meta.pop("sglang_version", None)
    index["versions"][version] = {"spec": digest, **meta}
    index["failed"].pop(version, None)
    _write_index(directory, index)
    return digest


def record_failure(directory: Path, version: str, reason: str) -> None:
    """Note in the index that ``version`` could not be dumped (unless it already has a spec)."""
    index = read_index(directory)
    if version not in index["versions"]:
        index["failed"][version] = reason
        _write_index(directory, index)


def prune_unreferenced_specs(directory: Path) -> list[Path]:
    """Delete stored specs no release points at any more (after a re-dump); returns them."""
    used = {entry["spec"] for entry in read_index(directory)["versions"].values()}
    gone = [p for p in (directory / SPECS_SUBDIR).glob("*.json.gz") if p.name[:-8] not in used]
    for path in gone:
        path.unlink()
    return gone


def _read_json_maybe_gz(path: Path) -> Any:
    """JSON from ``path``, gunzipped first when it is gzip (by magic bytes, not by name)."""
    from glmserve.paths import read_capped

    raw = read_capped(path, MAX_SPEC_BYTES, "argspec")
    if raw[:2] == b"\x1f\x8b":
        try:  # bounded: a small gzip bomb must not expand into memory
            with gzip.GzipFile(fileobj=io.BytesIO(raw)) as fh:
                raw = fh.read(MAX_SPEC_BYTES + 1)
        except (OSError, EOFError) as exc:
            raise ConfigError(f"{path}: argspec is not valid gzip ({exc})") from exc
        if len(raw) > MAX_SPEC_BYTES:
            raise ConfigError(f"{path}: argspec unpacks to more than {MAX_SPEC_BYTES} bytes")
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: argspec is not UTF-8 text") from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}:{exc.lineno}: argspec is not valid JSON ({exc.msg})") from exc
    except RecursionError as exc:  # the C decoder's own guard (~1000 levels); a spec nests 4
        raise ConfigError(f"{path}: argspec is not a spec: JSON nested too deeply") from exc


def _read_spec_file(path: Path) -> ArgSpec:
    data = _read_json_maybe_gz(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: argspec must be a JSON object")
    return parse_argspec(data, str(path))


# --- the shipped releases -------------------------------------------------------------------


@lru_cache(maxsize=1)
def _shipped_index() -> dict[str, Any]:
    return read_index()


def available_versions() -> list[str]:
    """Releases with a shipped spec, oldest first (post releases right after their release)."""
    return sorted(_shipped_index()["versions"], key=version_key)


def newest_version() -> str:
    """The newest release with a shipped spec."""
    return available_versions()[-1]


def unavailable_versions() -> dict[str, str]:
    """Releases the dump covered but could not import, with the recorded reason."""
    return dict(_shipped_index().get("failed", {}))


@cache
def _stored_body(digest: str) -> dict[str, Any]:
    path = data_dir() / SPECS_SUBDIR / f"{digest}.json.gz"
    data = _read_json_maybe_gz(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: argspec must be a JSON object")
    return data


@cache
def _load_shipped(version: str) -> ArgSpec:
    entry = _shipped_index()["versions"][version]
    digest = entry["spec"]
    meta = {k: v for k, v in entry.items() if k != "spec"}
    data = {**_stored_body(digest), **meta, "sglang_version": version, "spec_digest": digest}
    return parse_argspec(data, f"argspec/data/{SPECS_SUBDIR}/{digest}.json.gz (sglang {version})")


def shipped_specs() -> list[ArgSpec]:
    """Every shipped spec, oldest first (for rename and removed-choice suggestions)."""
    return [_load_shipped(v) for v in available_versions()]


def distinct_shipped_specs() -> list[ArgSpec]:
    """Shipped specs oldest first, skipping a release whose CLI equals the one before it
    (post releases usually): rename pairing only needs the points where the CLI changed."""
    out: list[ArgSpec] = []
    for spec in shipped_specs():
        if not out or out[-1].meta.get("spec_digest") != spec.meta.get("spec_digest"):
            out.append(spec)
    return out


def _nearest_versions(wanted: str, known: list[str]) -> list[str]:
    """The shipped releases just below and above ``wanted``, or close spellings of a typo."""
    if normalize_version(wanted) is None:
        return difflib.get_close_matches(wanted.strip(), known, n=2, cutoff=0.6)
    key = version_key(wanted)
    below = [v for v in known if version_key(v) < key]
    above = [v for v in known if version_key(v) > key]
    return below[-1:] + above[:1]


def _unknown_version_message(text: str) -> str:
    known = available_versions()
    norm = normalize_version(text)
    failed = unavailable_versions()
    if norm in failed:
        head = (
            f"no argspec shipped for sglang {norm}: its server_args could not be dumped "
            f"({failed[norm]})"
        )
    else:
        head = f"no argspec shipped for sglang {text!r}"
    nearest = _nearest_versions(text, known)
    near = f"nearest shipped: {', '.join(nearest)}; " if nearest else ""
    span = f"{known[0]}..{known[-1]}" if known else "none"
    dump_as = norm or "VERSION"
    return (
        f"{head} ({near}shipped: {span}, see glmserve validate --list-versions); "
        f"dump it with scripts/dump_argspec.py {dump_as} or take the host's live spec "
        "(glmserve check caches it under $GLMSERVE_HOME/argspecs/) and pass --spec FILE"
    )


def resolve_version(text: str) -> str:
    """The shipped release ``text`` names: exact first, then normalised (``v0.5.9``,
    ``0.5.9-post1``). Never a different release: an unknown one is a ConfigError naming the
    nearest shipped releases and how to dump the right spec."""
    versions = _shipped_index()["versions"]
    raw = str(text).strip()
    if raw in versions:
        return raw
    norm = normalize_version(raw)
    if norm is not None and norm in versions:
        return norm
    raise ConfigError(_unknown_version_message(raw))


# --- loading by version or path -------------------------------------------------------------


def _looks_like_path(text: str) -> bool:
    if text.endswith((".json", ".json.gz", ".gz")) or "/" in text:
        return True
    try:
        return Path(text).is_file()
    except (OSError, ValueError):  # a name too long for the filesystem, an embedded NUL
        return False


def load_release_spec(version: str) -> ArgSpec:
    """A shipped release's spec by version only: ``--sglang-version`` names a release, so a
    path-like value is refused rather than read (spec files go through ``--spec``)."""
    text = str(version).strip()
    if _looks_like_path(text) and normalize_version(text) is None:
        raise ConfigError(
            f"--sglang-version {text!r} is not a release version (e.g. 0.5.9); "
            "pass a spec file with --spec FILE"
        )
    return _load_shipped(resolve_version(text))


def load_argspec(version_or_path: str) -> ArgSpec:
    """A shipped release's spec by version (``0.5.9``, ``v0.5.9``, ``0.5.9.post1``), or a
    spec file by path (``.json``, or ``.json.gz`` as the package stores them)."""
    text = str(version_or_path).strip()
    versions = _shipped_index()["versions"]
    norm = normalize_version(text)
    if text in versions or (norm is not None and norm in versions):
        return _load_shipped(resolve_version(text))
    if _looks_like_path(text):
        path = Path(text).expanduser()
        if not path.is_file():
            raise ConfigError(f"{text}: no such argspec file")
        return _read_spec_file(path)
    raise ConfigError(_unknown_version_message(text))


def argspec_cache_path(version: str) -> Path:
    """Where ``check`` keeps a host's live argparse spec for SGLang ``version`` (a release
    glmserve ships no spec for is still validated the way that host parses it)."""
    from glmserve.paths import glmserve_home

    return glmserve_home() / "argspecs" / f"sglang-{re.sub(r'[^0-9A-Za-z.+-]', '_', version)}.json"

"""Dump SGLang's ServerArgs argparse spec as JSON on stdout (stdlib only).

This file is a program as much as a module: glmserve reads its source text and runs it with
the target interpreter, ``python3 -c SOURCE`` (``glmserve.argspec.host_dump.dump_command``):
on a GPU host for its live spec (``glmserve check``), and in throwaway venvs for the shipped
specs (``scripts/dump_argspec.py``). So it must run under whatever python a host has, with
no glmserve installed there: stdlib imports only, and nothing from glmserve.

Third-party modules that are missing or broken are replaced by permissive stubs so that
only ``sglang`` (installed ``--no-deps``) is needed; the stubbed names are recorded.
Set GLMSERVE_ARGSPEC_STUB=0 to forbid stubbing.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.abc
import importlib.machinery
import io
import json
import os
import platform
import re
import sys
import traceback
import types
import warnings
from typing import Any


class _StubMeta(type):
    """The class of every stub: any attribute, call, subscript or base-class use works."""

    def __getattr__(cls, name: str) -> type:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _stub(cls.__name__ + "." + name)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and isinstance(args[0], types.FunctionType):
            return args[0]
        return cls

    def __getitem__(cls, item: Any) -> type:
        return cls

    def __or__(cls, other: Any) -> type:
        return cls

    __ror__ = __or__

    def __iter__(cls) -> Any:
        return iter(())

    def __len__(cls) -> int:
        return 0

    def __bool__(cls) -> bool:
        return False

    def __lt__(cls, other: Any) -> bool:
        return False

    __le__ = __gt__ = __ge__ = __lt__

    def __mro_entries__(cls, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (cls,)


def _swallow_subclass_kwargs(cls: type, **kwargs: Any) -> None:
    return None


def _any_pydantic_schema(cls: type, source: Any, handler: Any) -> Any:
    # Only called when pydantic builds a model with a stubbed field type (0.5.18: xgrammar).
    from pydantic_core import core_schema

    return core_schema.any_schema()


def _stub(name: str) -> type:
    namespace: dict[str, Any] = {"__module__": "glmserve_stub"}
    namespace["__init_subclass__"] = classmethod(_swallow_subclass_kwargs)
    namespace["__get_pydantic_core_schema__"] = classmethod(_any_pydantic_schema)
    return _StubMeta(name, (), namespace)


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> type:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _stub(self.__name__ + "." + name)


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves a stub package for every module under one of ``roots``."""

    def __init__(self) -> None:
        self.roots: set[str] = set()

    def find_spec(
        self, fullname: str, path: Any, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = []
        module.__version__ = "0.0.0"  # type: ignore[attr-defined]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def _missing_name(exc: BaseException | None) -> str | None:
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, ModuleNotFoundError) and exc.name:
            return exc.name
        exc = exc.__cause__ or exc.__context__
    return None


_PACKAGE_FILE = re.compile(r"[/\\\\](?:site|dist)-packages[/\\\\]([A-Za-z0-9_]+)")


def _broken_package(exc: BaseException) -> str | None:
    """A package that is installed but dies while being imported (e.g. a torchvision built
    for another torch): the innermost module-level frame outside torch and sglang."""
    frames = traceback.extract_tb(exc.__traceback__)
    for frame in reversed(frames):
        match = _PACKAGE_FILE.search(frame.filename)
        if not match or match.group(1) in ("torch", "sglang"):
            continue
        return match.group(1) if frame.name == "<module>" else None
    return None


def _import_server_args(allow_stubs: bool) -> tuple[Any, list[str]]:
    finder = _StubFinder()
    sys.meta_path.insert(0, finder)
    stubbed: list[str] = []
    for _ in range(100):
        try:
            from sglang.srt.server_args import ServerArgs

            return ServerArgs, stubbed
        except Exception as exc:
            if isinstance(exc, ImportError):
                # A missing module, or a name an installed package no longer has (0.4.x:
                # triton.runtime.cache.default_cache_dir): stub the whole package.
                name = _missing_name(exc) or exc.name
            else:
                name = _broken_package(exc)
            root = (name or "").split(".")[0]
            if not allow_stubs or not root or root == "sglang" or root in finder.roots:
                raise
            finder.roots.add(root)
            stubbed.append(root)
            for mod in list(sys.modules):
                top = mod.split(".")[0]
                if top in ("sglang", root):
                    del sys.modules[mod]
    raise ImportError("too many missing modules")


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        finite = value == value and abs(value) != float("inf")
        return value if finite else repr(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return {"repr": repr(value)}


def _type_name(tp: Any) -> str | None:
    if tp is None:
        return None
    name = getattr(tp, "__name__", None) or type(tp).__name__
    module = getattr(tp, "__module__", None)
    if module and module != "builtins":
        return module + "." + name
    return name


def _dump_choices(choices: Any) -> Any:
    if choices is None:
        return None
    if isinstance(choices, (set, frozenset)):  # set order changes run to run
        return _jsonable(sorted(choices, key=repr))
    return _jsonable(list(choices))


def _dump_action(act: argparse.Action) -> dict[str, Any]:
    help_text = act.help if isinstance(act.help, str) else None
    if help_text and "%" in help_text:
        with contextlib.suppress(Exception):
            help_text = help_text % {k: getattr(act, k) for k in vars(act)}
    nargs = act.nargs
    return {
        "option_strings": list(act.option_strings),
        "dest": act.dest,
        "action": type(act).__name__,
        "action_module": type(act).__module__,
        "type": _type_name(act.type),
        "choices": _dump_choices(act.choices),
        "default": _jsonable(act.default),
        "const": _jsonable(act.const),
        "nargs": nargs if nargs is None or isinstance(nargs, int) else str(nargs),
        "required": bool(act.required),
        "metavar": _jsonable(act.metavar),
        "deprecated": bool(getattr(act, "deprecated", False)),
        "help": help_text,
    }


def main() -> None:
    """Import ServerArgs (stubbing what is missing), build its parser, print the spec."""
    warnings.simplefilter("ignore")
    allow_stubs = os.environ.get("GLMSERVE_ARGSPEC_STUB", "1") != "0"
    with contextlib.redirect_stdout(io.StringIO()):
        ServerArgs, stubbed = _import_server_args(allow_stubs)
        parser = argparse.ArgumentParser()
        ServerArgs.add_cli_args(parser)
    import sglang

    # The imported package's own version first: metadata may describe another copy.
    sglang_version = getattr(sglang, "__version__", None)
    if not isinstance(sglang_version, str):
        try:
            from importlib.metadata import version

            sglang_version = version("sglang")
        except Exception:
            sglang_version = "unknown"
    spec = {
        "format": 1,
        "sglang_version": sglang_version,
        "dumped_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "python_version": platform.python_version(),
        # The label every dump made without GLMSERVE_ARGSPEC_MADE_BY carries; kept as it is
        # so cached and shipped specs keep one spelling.
        "made_by": os.environ.get("GLMSERVE_ARGSPEC_MADE_BY", "glmserve DUMP_SNIPPET"),
        "stubbed_modules": sorted(stubbed),
        "parser": {
            "allow_abbrev": parser.allow_abbrev,
            "add_help": parser.add_help,
            "prefix_chars": parser.prefix_chars,
        },
        "actions": [
            _dump_action(a) for a in parser._actions if not isinstance(a, argparse._HelpAction)
        ],
    }
    sys.stdout.write(json.dumps(spec, indent=1, sort_keys=False) + "\n")


if __name__ == "__main__":
    main()

"""statedir: a resumable command's directory (ids, atomic files, lock, versioned decoding)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field

import pytest

from glmserve.errors import ConfigError, StoreError
from glmserve.paths import glmserve_home
from glmserve.statedir import StateDir, dataclass_from

THINGS = StateDir(
    noun="thing",
    id_prefix="th",
    busy="thing {ident} is held by pid {holder}",
    version=3,
)


@dataclass
class Part:
    name: str
    size: int = 0


@dataclass
class Thing:
    thing_id: str
    parts: list[Part] = field(default_factory=list)
    version: int = 3


def test_ids_sort_by_start_time_and_two_at_once_differ():
    a, b = THINGS.new_id(), THINGS.new_id()
    assert re.fullmatch(r"th-\d{8}-\d{6}-[0-9a-f]{4}", a)
    assert a != b


def test_the_directory_lives_under_the_plural_noun_and_refuses_paths():
    assert THINGS.dir("th-1") == glmserve_home() / "things" / "th-1"
    for bad in ("", "../etc", "a/b", ".hidden"):
        with pytest.raises(ConfigError, match=f"--resume: not a thing id: {re.escape(repr(bad))}"):
            THINGS.dir(bad)


def test_write_leaves_exactly_the_json_and_markdown_and_read_gives_them_back():
    path = THINGS.write("th-1", {"version": 3, "when": 1.5}, "# th-1\n")
    assert path == THINGS.dir("th-1") / "thing.json"
    assert sorted(os.listdir(path.parent)) == ["thing.json", "thing.md"]  # no temp file left
    assert path.read_text() == json.dumps({"version": 3, "when": 1.5}, indent=2)
    assert (path.parent / "thing.md").read_text() == "# th-1\n"
    assert THINGS.read("th-1") == ({"version": 3, "when": 1.5}, str(path))
    assert THINGS.read("th-2") is None
    assert THINGS.ids() == ["th-1"]


def test_a_corrupt_document_names_its_file_and_line():
    THINGS.dir("th-1").mkdir(parents=True)
    (THINGS.dir("th-1") / "thing.json").write_text('{\n"version": 3,\n oops}')
    with pytest.raises(ConfigError, match=r"thing\.json:3: corrupt thing file"):
        THINGS.read("th-1")


def test_ids_lists_only_directories_with_a_document():
    assert THINGS.ids() == []
    THINGS.write("th-2", {}, "")
    THINGS.dir("th-1").mkdir()
    assert THINGS.ids() == ["th-2"]


def test_a_second_holder_of_the_lock_is_refused_with_the_first_ones_pid():
    with THINGS.lock("th-1"):
        assert (THINGS.dir("th-1") / ".lock").read_text() == str(os.getpid())
        refused = pytest.raises(ConfigError, match=f"thing th-1 is held by pid {os.getpid()}$")
        with refused, THINGS.lock("th-1"):
            pass
    with THINGS.lock("th-1"):  # released
        pass


def test_decode_keeps_known_fields_and_refuses_another_version():
    doc = {"thing_id": "th-1", "version": 3, "later": 1, "parts": [{"name": "a", "new": 2}]}
    assert THINGS.decode(Thing, doc, "x.json", parts=Part) == Thing("th-1", [Part("a")])
    with pytest.raises(ConfigError, match=r"^x\.json: unsupported thing version 4$"):
        THINGS.decode(Thing, {**doc, "version": 4}, "x.json", parts=Part)


def test_dataclass_from_lets_given_values_win():
    assert dataclass_from(Part, {"name": "a", "size": 1, "x": 0}, size=9) == Part("a", 9)


def test_an_unwritable_state_folder_is_a_one_line_store_error_naming_it():
    # A regular file where the folder should be: refused for root too (chmod is not).
    THINGS.root().write_text("")
    for action in (
        lambda: THINGS.write("th-1", {}, ""),
        lambda: THINGS.lock("th-1").__enter__(),
    ):
        with pytest.raises(StoreError, match=r"/things/th-1: cannot \w+ the thing.*Not a direct"):
            action()
    assert StoreError("x").exit_code == 2

"""validate_argv against the shipped specs (real releases) and small synthetic specs (so the
argparse rules are pinned independently of what any one release happens to contain)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from glmserve.argspec.backend_facts import backend_warnings
from glmserve.argspec.emulator import validate_argv
from glmserve.argspec.launch_script import extract_launch_argv
from glmserve.argspec.model import ArgSpec, FlagIssue, ValidationReport, parse_argspec
from glmserve.argspec.releases import available_versions, load_argspec
from glmserve.argspec.suggestions import _deprecated_aliases, _pair_renames, derived_renames
from glmserve.errors import ConfigError

SCRIPTS = Path(__file__).parent.parent / "data" / "scripts"
SEED_ARGV, _ = extract_launch_argv(
    (SCRIPTS / "run_tp8_trtllm_mla.sh").read_text(encoding="utf-8"), "run_tp8_trtllm_mla.sh"
)
M = ["--model", "m"]


def spec(version: str) -> ArgSpec:
    return load_argspec(version)


def errors(report: ValidationReport) -> list[FlagIssue]:
    return report.errors


def only_error(report: ValidationReport) -> FlagIssue:
    assert len(report.errors) == 1, [f.format() for f in report.findings]
    return report.errors[0]


def synthetic(actions: list[dict], version: str = "9.9.9") -> ArgSpec:
    base = {
        "dest": None,
        "action": "_StoreAction",
        "type": "str",
        "choices": None,
        "default": None,
        "nargs": None,
        "required": False,
        "help": "",
    }
    rows = []
    for a in actions:
        row = {**base, **a}
        row["dest"] = row["dest"] or row["option_strings"][0].lstrip("-").replace("-", "_")
        rows.append(row)
    return parse_argspec({"sglang_version": version, "actions": rows}, "synthetic")


# --- loading ------------------------------------------------------------------------------


def test_shipped_versions_include_the_required_releases_in_order() -> None:
    versions = available_versions()
    for required in ("0.5.8", "0.5.9", "0.5.23"):
        assert required in versions
    assert versions.index("0.5.8") < versions.index("0.5.9") < versions.index("0.5.23")


def test_shipped_specs_record_their_provenance() -> None:
    for version in available_versions():
        s = spec(version)
        assert s.version == version
        assert s.meta["sglang_version"] == version
        assert "dump_argspec" in s.meta["made_by"]
        assert s.meta["python_version"]
        assert "--model-path" in s.by_option


def test_unknown_version_names_the_nearest_shipped_ones() -> None:
    with pytest.raises(ConfigError) as exc:
        load_argspec("0.3.6")  # real, but older than the oldest release dumped (0.4.0)
    text = str(exc.value)
    assert "'0.3.6'" in text
    assert f"nearest shipped: {available_versions()[0]}" in text
    assert "\n" not in text


def test_v_prefix_is_accepted() -> None:
    assert load_argspec("v0.5.9").version == "0.5.9"


def test_load_from_path(tmp_path: Path) -> None:
    data = {
        "sglang_version": "0.6.0rc1",
        "actions": [{"option_strings": ["--model"], "dest": "model", "type": "str"}],
    }
    path = tmp_path / "host.json"
    path.write_text(json.dumps(data))
    loaded = load_argspec(str(path))
    assert loaded.version == "0.6.0rc1"
    assert validate_argv(["--model", "x"], loaded).ok
    assert not validate_argv(["--port", "1"], loaded).ok


def test_bad_spec_file_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{\n "actions": [\n oops\n]}')
    with pytest.raises(ConfigError, match=r"broken\.json:3"):
        load_argspec(str(path))
    with pytest.raises(ConfigError, match="no such argspec file"):
        load_argspec(str(tmp_path / "missing.json"))
    path.write_text('{"actions": []}')
    with pytest.raises(ConfigError, match="not a glmserve argspec"):
        load_argspec(str(path))


# --- version drift: the seed script -------------------------------------------------------


def test_reference_script_is_accepted_by_059() -> None:
    report = validate_argv(SEED_ARGV, spec("0.5.9"))
    assert report.ok, [f.format() for f in report.errors]


def test_reference_script_trtllm_choice_is_invalid_on_058() -> None:
    report = validate_argv(SEED_ARGV, spec("0.5.8"))
    flags = sorted(f.flag for f in report.errors)
    assert flags == ["--nsa-decode-backend", "--nsa-prefill-backend"]
    for finding in report.errors:
        assert "invalid choice: 'trtllm'" in finding.message
        assert SEED_ARGV[finding.index] == finding.flag
        assert "0.5.9" in finding.suggestion  # where the choice exists


def test_reference_script_nsa_flags_are_unknown_on_0523_with_dsa_suggestion() -> None:
    report = validate_argv(SEED_ARGV, spec("0.5.23"))
    by_flag = {f.flag: f for f in report.errors}
    assert set(by_flag) == {"--nsa-decode-backend", "--nsa-prefill-backend"}
    assert "--dsa-decode-backend" in by_flag["--nsa-decode-backend"].suggestion
    assert "--dsa-prefill-backend" in by_flag["--nsa-prefill-backend"].suggestion
    assert "unrecognized arguments: --nsa-decode-backend trtllm" in (
        by_flag["--nsa-decode-backend"].message
    )
    # --disable-cuda-graph is deprecated there, and says what replaces it
    dep = [f for f in report.warnings if f.flag == "--disable-cuda-graph"]
    assert dep and "cuda-graph-backend" in dep[0].suggestion


def test_renamed_flag_is_suggested_in_both_directions() -> None:
    report = validate_argv([*M, "--dsa-decode-backend", "trtllm"], spec("0.5.9"))
    assert "--nsa-decode-backend" in only_error(report).suggestion


def test_cutlass_mla_removed_by_0523_lists_valid_choices() -> None:
    report = validate_argv([*M, "--attention-backend", "cutlass_mla"], spec("0.5.23"))
    finding = only_error(report)
    assert "invalid choice: 'cutlass_mla'" in finding.message
    assert "trtllm_mla" in finding.suggestion and "cutedsl_mla" in finding.suggestion
    # where it still was a choice: first in 0.4.6.post1, last in 0.5.19 (the shipped dumps)
    assert "0.4.6.post1..0.5.19" in finding.suggestion
    for choice in spec("0.5.23").by_option["--attention-backend"].choices:
        assert str(choice) in finding.suggestion
    # and it is fine on 0.5.9, where the backend facts warn instead
    ok = validate_argv([*M, "--attention-backend", "cutlass_mla"], spec("0.5.9"))
    assert ok.ok
    assert any("SM100" in w.message for w in ok.warnings)


# --- argparse rules, on real specs --------------------------------------------------------


def test_unknown_flag_gets_closest_match() -> None:
    finding = only_error(validate_argv([*M, "--mem-fraction-statc", "0.9"], spec("0.5.9")))
    assert finding.flag == "--mem-fraction-statc"
    assert finding.index == 2
    assert "--mem-fraction-static" in finding.suggestion


def test_missing_value_at_end_and_before_next_flag() -> None:
    s = spec("0.5.9")
    at_end = only_error(validate_argv([*M, "--port"], s))
    assert "expected one argument" in at_end.message and at_end.index == 2
    before = only_error(validate_argv([*M, "--port", "--tp-size", "8"], s))
    assert before.flag == "--port"


def test_every_error_is_reported_not_just_the_first() -> None:
    argv = [*M, "--tp-size", "x", "--attention-backend", "nope", "--bogus", "--port"]
    report = validate_argv(argv, spec("0.5.9"))
    assert sorted(f.index for f in report.errors) == [2, 4, 6, 7]


def test_bad_types() -> None:
    s = spec("0.5.9")
    assert (
        "invalid int value: 'eight'"
        in only_error(validate_argv([*M, "--tp-size", "eight"], s)).message
    )
    assert (
        "invalid float value"
        in only_error(validate_argv([*M, "--mem-fraction-static", "lots"], s)).message
    )
    assert (
        "invalid loads value"
        in only_error(validate_argv([*M, "--preferred-sampling-params", "{x"], s)).message
    )
    assert validate_argv([*M, "--preferred-sampling-params", '{"top_k": 1}'], s).ok
    assert validate_argv([*M, "--tp-size", "-1", "--mem-fraction-static", "1e-1"], s).ok


def test_unknown_type_callables_are_accepted() -> None:
    s = synthetic([{"option_strings": ["--x"], "type": "mypkg.parse_thing"}])
    assert validate_argv(["--x", "anything at all"], s).ok


def test_human_readable_int_0523() -> None:
    s = spec("0.5.23")
    flag = next(a.name for a in s.actions if a.type and a.type.endswith("human_readable_int"))
    assert validate_argv([*M, flag, "4k"], s).ok
    assert validate_argv([*M, flag, "1Mi"], s).ok
    assert not validate_argv([*M, flag, "1.5Mi"], s).ok
    assert not validate_argv([*M, flag, "lots"], s).ok


def test_abbreviation_is_accepted_with_a_warning() -> None:
    report = validate_argv([*M, "--tp", "8"], spec("0.5.9"))
    assert report.ok
    (warning,) = [w for w in report.warnings if w.index == 2]
    assert "abbreviation of --tp-size" in warning.message


def test_ambiguous_prefix_lists_candidates() -> None:
    finding = only_error(validate_argv([*M, "--mod", "x"], spec("0.5.9")))
    assert finding.message.startswith("ambiguous option: --mod could match")
    assert "--model-path" in finding.message and "--model" in finding.message


def test_removed_flag_that_became_ambiguous_says_when_it_existed() -> None:
    finding = only_error(validate_argv([*M, "--cuda-graph-max-bs", "8"], spec("0.5.23")))
    assert "ambiguous option" in finding.message
    # 0.5.2x keeps it as a deprecated alias of --cuda-graph-max-bs-decode for a while, so the
    # rename is derived from sglang's own deprecation help
    assert finding.suggestion == "renamed to --cuda-graph-max-bs-decode in sglang 0.5.23"


def test_equals_forms() -> None:
    s = spec("0.5.9")
    assert validate_argv(["--model=m", "--port=8000", "--tp=8"], s).ok
    assert not validate_argv([*M, "--port=x"], s).ok
    assert (
        "invalid choice" in only_error(validate_argv([*M, "--attention-backend=trtllm"], s)).message
    )


def test_store_true_given_a_value() -> None:
    s = spec("0.5.9")
    finding = only_error(validate_argv([*M, "--trust-remote-code=yes"], s))
    assert "ignored explicit argument 'yes'" in finding.message
    junk = only_error(validate_argv([*M, "--trust-remote-code", "yes"], s))
    assert "unrecognized arguments: yes" in junk.message and junk.index == 3


def test_boolean_optional_no_form_0523() -> None:
    s = spec("0.5.23")
    pair = next(a.option_strings for a in s.actions if a.action == "BooleanOptionalAction")
    assert validate_argv([*M, pair[1]], s).ok
    assert validate_argv([*M, pair[0]], s).ok
    assert not validate_argv([*M, pair[1] + "=1"], s).ok


def test_positional_junk_and_double_dash() -> None:
    s = spec("0.5.9")
    assert "unrecognized arguments: stray" in only_error(validate_argv([*M, "stray"], s)).message
    assert not validate_argv([*M, "--", "--port", "8000"], s).ok


def test_required_flag_missing() -> None:
    finding = only_error(validate_argv(["--port", "8000"], spec("0.5.9")))
    assert "required" in finding.message and "--model-path" in finding.message
    assert finding.index is None


def test_deprecated_flags_warn() -> None:
    report = validate_argv([*M, "--hybrid-kvcache-ratio"], spec("0.5.9"))
    assert report.ok
    (warning,) = report.warnings
    assert "deprecated" in warning.message and "--swa-full-tokens-ratio" in warning.suggestion


def test_help_that_merely_mentions_deprecation_is_not_deprecated() -> None:
    s = spec("0.5.23")
    act = s.by_option["--unified-cache-external-linker-config"]
    assert "deprecated" in act.help
    assert not act.is_deprecated


def test_repeated_flag_warns_last_wins() -> None:
    report = validate_argv([*M, "--port", "1", "--port", "2"], spec("0.5.9"))
    assert report.ok
    assert any("more than once" in w.message and w.index == 4 for w in report.warnings)


def test_opaque_values_skip_checks() -> None:
    s = spec("0.5.9")
    argv = [*M, "--tp-size", "$TP"]
    assert not validate_argv(argv, s).ok
    assert validate_argv(argv, s, opaque={3}).ok


def test_report_to_dict() -> None:
    report = validate_argv(["--bogus"], spec("0.5.9"))
    data = report.to_dict()
    assert data["sglang_version"] == "0.5.9"
    assert data["ok"] is False
    assert data["errors"] == len(report.errors) == 2  # --bogus and the missing --model
    assert {f["severity"] for f in data["findings"]} == {"error"}
    json.dumps(data)


# --- argparse rules on synthetic specs (spec-driven, not release-driven) -------------------


def test_nargs_int_and_int_choices() -> None:
    s = synthetic(
        [
            {"option_strings": ["--pair"], "nargs": 2, "type": "int"},
            {"option_strings": ["--level"], "type": "int", "choices": [0, 1, 2]},
            {"option_strings": ["--many"], "nargs": "+"},
            {"option_strings": ["--maybe"], "nargs": "?"},
        ]
    )
    assert validate_argv(["--pair", "1", "2"], s).ok
    assert "expected 2 arguments" in only_error(validate_argv(["--pair", "1"], s)).message
    assert (
        "unrecognized arguments: 3"
        in only_error(validate_argv(["--pair", "1", "2", "3"], s)).message
    )
    assert not validate_argv(["--pair=1"], s).ok
    assert validate_argv(["--level", "2"], s).ok
    assert "invalid choice: '5'" in only_error(validate_argv(["--level", "5"], s)).message
    assert "expected at least one argument" in only_error(validate_argv(["--many"], s)).message
    assert validate_argv(["--many", "a", "b", "--maybe"], s).ok
    assert validate_argv(["--maybe", "x"], s).ok


def test_no_abbreviations_when_parser_disallows_them() -> None:
    data = {
        "sglang_version": "1.0",
        "parser": {"allow_abbrev": False},
        "actions": [
            {
                "option_strings": ["--long-flag"],
                "dest": "long_flag",
                "nargs": 0,
                "action": "_StoreTrueAction",
            }
        ],
    }
    s = parse_argspec(data)
    assert validate_argv(["--long-flag"], s).ok
    assert not validate_argv(["--long"], s).ok


def test_deprecation_action_class_warns() -> None:
    s = synthetic(
        [{"option_strings": ["--old"], "action": "DeprecatedAction", "nargs": 0, "help": "gone"}]
    )
    report = validate_argv(["--old"], s)
    assert report.ok and report.warnings[0].flag == "--old"


def test_renames_are_derived_by_diffing_specs() -> None:
    help_text = "Number of widgets to frobnicate per scheduler step."
    old = synthetic([{"option_strings": ["--frob-widgets"], "type": "int", "help": help_text}], "1")
    new = synthetic(
        [
            {"option_strings": ["--frobnicate-widgets"], "type": "int", "help": help_text},
            {"option_strings": ["--unrelated"], "type": "int", "help": "Something else."},
        ],
        "2",
    )
    assert _pair_renames(old, new) == {"--frob-widgets": "--frobnicate-widgets"}
    # a flag with an unrelated help text and name is not paired
    other = synthetic([{"option_strings": ["--zzz"], "type": "int", "help": "Other."}], "1")
    assert _pair_renames(other, new) == {}


def test_shipped_renames_cover_nsa_to_dsa() -> None:
    renames = derived_renames()
    assert renames["--nsa-decode-backend"] == "--dsa-decode-backend"
    assert renames["--nsa-prefill-backend"] == "--dsa-prefill-backend"


def test_deprecated_alias_becomes_a_rename() -> None:
    s = synthetic(
        [
            {"option_strings": ["--new-name"], "dest": "thing"},
            {
                "option_strings": ["--old-name"],
                "dest": "thing",
                "action": "DeprecatedAliasStoreAction",
                "help": "[Deprecated] Use --new-name instead.",
            },
            {
                "option_strings": ["--gone"],
                "dest": "gone",
                "action": "DeprecatedAction",
                "help": "Deprecated. Use --new-name instead.",  # other dest: not an alias
            },
        ]
    )
    assert _deprecated_aliases(s) == {"--old-name": "--new-name"}


# --- backend facts ------------------------------------------------------------------------


def _warnings_for(argv: list[str], version: str = "0.5.9") -> list[str]:
    report = validate_argv(argv, spec(version))
    assert report.ok, [f.format() for f in report.errors]
    return [w.format() for w in report.warnings]


def test_trtllm_mla_page_size_and_arch() -> None:
    text = " ".join(_warnings_for([*M, "--attention-backend", "trtllm_mla", "--page-size", "128"]))
    assert "SM100" in text and "SM120" in text
    assert "silently changes it to 64" in text
    fine = " ".join(_warnings_for([*M, "--attention-backend", "trtllm_mla", "--page-size", "32"]))
    assert "page-size" not in fine


def test_trtllm_mla_kv_dtype() -> None:
    argv = [*M, "--attention-backend", "trtllm_mla", "--kv-cache-dtype", "fp8_e5m2"]
    assert any("refuses to start" in w for w in _warnings_for(argv))


def test_trtllm_mla_fp4_kv_is_version_dependent() -> None:
    argv = [*M, "--attention-backend", "trtllm_mla", "--kv-cache-dtype", "fp4_e2m1"]
    assert not any("refuses to start" in w for w in _warnings_for(argv, "0.5.9"))
    assert not validate_argv(argv, spec("0.5.23")).ok  # not even a kv-cache-dtype choice there
    e5m2 = [*M, "--attention-backend", "trtllm_mla", "--kv-cache-dtype", "fp8_e5m2"]
    assert any("sglang 0.5.23 refuses to start" in w for w in _warnings_for(e5m2, "0.5.23"))


def test_cutlass_mla_page_size() -> None:
    argv = [*M, "--attention-backend", "cutlass_mla", "--page-size", "64"]
    assert any("to 128" in w for w in _warnings_for(argv))


def test_flashinfer_fp8_kv_suggests_gather_then_cast() -> None:
    fp8 = _warnings_for([*M, "--attention-backend", "flashinfer", "--kv-cache-dtype", "fp8_e4m3"])
    assert any("flashinfer_gtc" in w for w in fp8)
    auto_fp4 = _warnings_for(
        [*M, "--attention-backend", "flashinfer", "--quantization", "modelopt_fp4"]
    )
    assert any("flashinfer_gtc" in w for w in auto_fp4)
    bf16 = _warnings_for([*M, "--attention-backend", "flashinfer", "--kv-cache-dtype", "bf16"])
    assert not any("flashinfer_gtc" in w for w in bf16)


def test_backend_warnings_is_pure_table_lookup() -> None:
    values = {"decode_attention_backend": (["cutlass_mla"], 3), "page_size": (["16"], 5)}
    found = backend_warnings(values, spec("0.5.9"))
    assert {f.index for f in found} == {3, 5}
    assert backend_warnings({}, spec("0.5.9")) == []


def test_invalid_backend_choice_gives_no_backend_fact() -> None:
    report = validate_argv([*M, "--attention-backend", "cutlass_mla"], spec("0.5.23"))
    assert not report.warnings


def test_help_exits_before_deferred_errors() -> None:
    s = spec("0.5.9")
    report = validate_argv(["--bogus", "--help"], s)
    assert report.ok
    assert "does not start" in report.warnings[-1].message
    assert not validate_argv(["--help", "--h"], s).ok  # ambiguity is found up front
    assert not validate_argv([*M, "--tp-size", "x", "--help"], s).ok


def test_config_file_forms() -> None:
    s = spec("0.5.9")
    separate = validate_argv([*M, "--config", "c.yaml"], s)
    assert separate.ok and "not checked" in separate.warnings[0].message
    joined = validate_argv([*M, "--config=c.yaml"], s)
    assert joined.ok and "file is ignored" in joined.warnings[0].message


def test_double_dash_is_unrecognized_like_cpython_311() -> None:
    s = spec("0.5.9")
    finding = only_error(validate_argv([*M, "--"], s))
    assert finding.message == "unrecognized arguments: --"


def test_gather_cast_patch_silences_the_cast_warning() -> None:
    argv = [*M, "--attention-backend", "flashinfer", "--kv-cache-dtype", "fp8_e4m3"]
    report = validate_argv(argv, spec("0.5.9"), patches=["flashinfer_mla_gather_cast"])
    assert report.ok and not report.warnings


@pytest.mark.parametrize("value", ["nan", "inf", "1e999", "NaN"])
def test_a_non_finite_float_is_glmserves_error_not_argparses(value) -> None:
    """argparse's float() takes them (the real-parser agreement test holds the default
    verdict to that); glmserve's strict rules refuse them: SGLang 0.5.9 checks no range for
    --mem-fraction-static and the server then misbehaves."""
    s = spec("0.5.9")
    argv = [*M, "--mem-fraction-static", value]
    assert validate_argv(argv, s).ok
    found = only_error(validate_argv(argv, s, strict=True))
    assert found.flag == "--mem-fraction-static" and found.index == 2
    assert f"{value!r} is not a finite number" in found.message
    assert validate_argv([*M, "--mem-fraction-static", "0.9"], s, strict=True).ok
    assert validate_argv([*M, "--served-model-name", "nan"], s, strict=True).ok  # a str flag

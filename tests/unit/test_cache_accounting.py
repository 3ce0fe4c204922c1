"""Per-request ``cached_tokens`` (native ``meta_info``; OpenAI ``usage.prompt_tokens_details``
with SGLang's ``--enable-cache-report``), the level's hit rate, and the workload flags'
one-line checks (issue 24)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from glmserve.bench.cache_report import cache_figures, hit_rate_text
from glmserve.bench.client import _Parser
from glmserve.bench.gsp_bench import check_workload
from glmserve.bench.metrics import StreamRecord
from glmserve.bench.settings import BenchSettings
from glmserve.errors import ConfigError


def _feed(api: str, *objs: dict, keep_ids: bool = False) -> StreamRecord:
    rec = StreamRecord(dispatch=0.0, output_ids=[] if keep_ids else None)
    p = _Parser(api, rec, 2)
    for i, o in enumerate(objs):
        p.feed(json.dumps(o).encode(), float(i))
    return rec


def test_native_meta_info_cached_tokens_and_the_reply_ids():
    meta = {"prompt_tokens": 100, "cached_tokens": 64, "completion_tokens": 1,
            "finish_reason": None}  # fmt: skip
    done = {**meta, "completion_tokens": 2, "finish_reason": {"type": "length"}}
    rec = _feed("native", {"output_ids": [7], "meta_info": meta},
                {"output_ids": [7, 9], "meta_info": done}, keep_ids=True)  # fmt: skip
    assert (rec.prompt_tokens, rec.cached_tokens, rec.output_ids) == (100, 64, [7, 9])
    plain = _feed("native", {"output_ids": [7, 9], "meta_info": done})
    assert plain.output_ids is None  # ids are kept only where a next turn needs them


def test_incremental_output_ids_are_joined():
    m1 = {"completion_tokens": 1, "finish_reason": None}
    m2 = {"completion_tokens": 2, "finish_reason": {"type": "length"}}
    rec = _feed("native", {"output_ids": [7], "meta_info": m1},
                {"output_ids": [9], "meta_info": m2}, keep_ids=True)  # fmt: skip
    assert rec.output_ids == [7, 9]


@pytest.mark.parametrize("api", ["openai", "chat"])
def test_openai_usage_prompt_tokens_details(api):
    usage = {"prompt_tokens": 50, "completion_tokens": 2,
             "prompt_tokens_details": {"cached_tokens": 48}}  # fmt: skip
    assert _feed(api, {"choices": [], "usage": usage}).cached_tokens == 48
    no_report = {**usage, "prompt_tokens_details": None}  # SGLang without --enable-cache-report
    assert _feed(api, {"choices": [], "usage": no_report}).cached_tokens is None


def _rec(prompt: int, cached: int | None, error: str | None = None) -> StreamRecord:
    return StreamRecord(dispatch=0.0, prompt_tokens=prompt, cached_tokens=cached, error=error)


def test_the_level_hit_rate_counts_only_requests_that_reported():
    f = cache_figures([_rec(100, 50), _rec(300, 250), _rec(1000, None), _rec(50, 50, "x")])
    assert f == {"cached_tokens": 300, "cache_prompt_tokens": 400, "cache_hit_rate": 0.75,
                 "cache_reported": 2}  # fmt: skip
    assert hit_rate_text({**f}) == "cache hit 75.0% (300 of 400 prompt tokens)"
    none = cache_figures([_rec(100, None)])
    assert none["cache_hit_rate"] is None and hit_rate_text(none) is None  # not 0%


@pytest.mark.parametrize("api", ["openai", "chat"])
def test_openai_requests_silent_beside_reporting_ones_had_no_cached_token(api):
    """SGLang's OpenAI usage has prompt_tokens_details only when cached_tokens > 0, even
    with --enable-cache-report: the silent requests of a level that reported are the misses.
    Leaving them out read a 25% hit rate as 75%."""
    f = cache_figures([_rec(100, 50), _rec(300, 250), _rec(1000, None), _rec(50, 50, "x")], api)
    assert (f["cached_tokens"], f["cache_prompt_tokens"], f["cache_reported"]) == (300, 1400, 3)
    assert f["cache_hit_rate"] == pytest.approx(300 / 1400)
    assert cache_figures([_rec(100, None)], api)["cache_hit_rate"] is None  # no report at all


GSP = {"dataset_name": "generated-shared-prefix"}


@pytest.mark.parametrize(
    ("kw", "flag"),
    [
        ({"gsp_num_groups": 0, **GSP}, "--gsp-num-groups"),
        ({"gsp_question_len": 0, **GSP}, "--gsp-question-len"),
        ({"gsp_num_turns": 1001, **GSP}, "--gsp-num-turns"),
        ({"gsp_num_groups": 3}, "--gsp-num-groups"),  # without the dataset
        ({"think_time": float("nan"), **GSP}, "--think-time"),
        ({"think_time": 1.0, **GSP}, "--think-time"),  # one turn: nothing between
        ({"gsp_num_turns": 2, "api": "openai", **GSP}, "--gsp-num-turns"),
        ({"gsp_num_turns": 2, "num_prompts": 5, **GSP}, "--num-prompts"),
        ({"gsp_num_groups": 100_000, "gsp_system_prompt_len": 1000, **GSP}, "--gsp-*"),
    ],
)
def test_bad_workload_flags_are_one_line_naming_the_flag(kw, flag):
    with pytest.raises(ConfigError) as e:
        check_workload(BenchSettings(base_url="", **kw))
    assert str(e.value).startswith(flag) and "\n" not in str(e.value)


def test_a_shared_prefix_level_sends_every_group_prompt_once():
    s = BenchSettings(base_url="", gsp_num_groups=3, gsp_prompts_per_group=5, **GSP)
    check_workload(s)
    assert s.prompts_for(1) == 15
    s = dataclasses.replace(s, gsp_num_turns=2)
    assert s.prompts_for(4) == 30 and s.workers_for(512) == 1


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--output-len", "8"], "the output length is --gsp-output-len"),
        (["--dataset-path", "x.json"], "leave out --dataset-path"),
        (["--gsp-num-turns", "0"], "--gsp-num-turns must be at least 1"),
        (["--gsp-num-turns", "2", "--api", "chat"], "multi-turn needs --api native"),
    ],
)
def test_the_cli_refuses_bad_workload_flags_in_one_line(capsys, args, needle):
    from tests.fixtures.cli import run_cli

    code, _, err = run_cli(capsys, "bench", "--url", "http://127.0.0.1:9", "--dataset-name",
                           "generated-shared-prefix", *args)  # fmt: skip
    assert code == 2 and needle in err and "Traceback" not in err


def test_results_show_prints_the_level_hit_rate_and_the_flush():
    from glmserve.bench.results import BenchResult, render_plain

    lv = {"concurrency": 4, "request_rate": None, "cache_hit_rate": 0.5, "cached_tokens": 10,
          "cache_prompt_tokens": 20, "cache_flushed": True}  # fmt: skip
    res = BenchResult(mode="concurrency", complete=True, stopped=None, levels=[lv],
                      settings={}, server={}, meta={})  # fmt: skip
    assert "level 4: cache hit 50.0% (10 of 20 prompt tokens) (cache flushed before it)" in (
        render_plain(res)
    )

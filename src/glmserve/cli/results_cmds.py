"""Verb ``results``: stored bench results as first-class data (list, show, export).

Every stored result is listed with what makes it comparable (settings, SGLang version, host,
GPUs, simulator speed) and its labels; ``export`` flattens one row per level for spreadsheets
(csv) or writes the stored dicts (json, jsonl) for scripts.
"""

from __future__ import annotations

import csv
import io
import math
import sys
import time
from pathlib import Path
from typing import Any

import typer

from glmserve.cli._app import app, emit_json, out, warn_non_finite
from glmserve.cli.options import (
    JsonOpt,
    LabelFilterOpt,
    LastOpt,
    ModeFilterOpt,
    ProfileFilterOpt,
    RunFilterOpt,
    WideOpt,
)
from glmserve.cli.views import list_table, plain
from glmserve.errors import ConfigError

results_app = typer.Typer(
    help="Stored bench results: list (with filters), show ID, export.\n\n"
    "Filters combine; before `export` they select what it writes, as they select what the "
    "list shows (`results --label team=infra export`). `--json` before `show` is show's "
    "--json. `show ID` takes no filters and `export` writes --format, not --json: those are "
    "refused (exit 2), never ignored.\n\n"
    "Examples:\n"
    "  glmserve results --label team=infra --last 10\n"
    "  glmserve results show 12\n"
    "  glmserve results --profile flashinfer_gtc export --format csv \\\n"
    "    --output results.csv",
    no_args_is_help=False,
    invoke_without_command=True,
)

FORMATS = ("csv", "json", "jsonl", "series")
MODES = ("decode", "concurrency", "rate")  # bench --mode
STATS = ("p50", "p90", "p95", "p99", "mean", "std")


def _labels(items: list[str]) -> dict[str, str]:
    from glmserve.bench.options import parse_labels

    return parse_labels(items)


def select_rows(
    run: str | None = None,
    profile: str | None = None,
    mode: str | None = None,
    labels: dict[str, str] | None = None,
    last: int | None = None,
) -> list[dict[str, Any]]:
    """Stored bench rows matching every filter, newest first (``--last`` applies after).

    An empty ``--run``/``--profile`` is refused: ``--run ''`` is a prefix of every run id,
    so a script's unset variable (``--run "$RUN"``) listed and exported everything.
    """
    from glmserve.store import RunStore

    for flag, value in (("--run", run), ("--profile", profile)):
        if value is not None and not value.strip():
            raise ConfigError(f"{flag}: expected a value, got {value!r} (leave {flag} out for all)")
    if last is not None and last < 1:
        raise ConfigError("--last must be at least 1")
    if mode is not None and mode not in MODES:  # a typo would list nothing, exit 0
        raise ConfigError(f"--mode: expected one of {', '.join(MODES)}, got {mode!r}")
    with RunStore.open() as store:
        rows = store.list_bench_results()
    out_rows = []
    for r in rows:
        meta = {**(r["result"].get("meta") or {}), **(r.get("meta") or {})}
        if run is not None and not str(r.get("run_id") or "").startswith(run):
            continue
        if profile is not None and meta.get("profile") != profile:
            continue
        if mode is not None and r["result"].get("mode") != mode:
            continue
        have = meta.get("labels") or {}
        if any(have.get(k) != v for k, v in (labels or {}).items()):
            continue
        out_rows.append(r)
    return out_rows[:last] if last else out_rows


# Per-level fields of a stored result (``bench --json`` ``levels[]``), in CSV column order;
# one a result predates is an empty cell.
LEVEL_FIELDS = ("concurrency", "request_rate", "requests", "completed", "errors", "input_tokens",
                "output_tokens", "output_tok_s", "window_kind", "request_throughput",
                "input_tok_s", "output_tok_s_full", "total_tok_s", "goodput", "good_requests",
                "achieved_concurrency", "max_concurrency_seen", "achieved_request_rate",
                "tokens_estimated", "output_tok_per_j", "power_w_mean", "energy_j",
                "gpu_throttled", "cache_hit_rate", "cached_tokens", "cache_prompt_tokens",
                "cache_flushed")  # fmt: skip
# A cell starting with one of these is a formula to Excel/LibreOffice/Sheets (OWASP "CSV
# injection"): ``--label x=@SUM(...)`` or a dataset path must not run when a CSV is opened.
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


def flat_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One flat dict per (result, level): what ``export --format csv`` writes (``csv_cell``
    encodes each value).

    A result with no levels (interrupted before its first level ended) is still one row: its
    result-level fields (``complete`` false, ``stopped`` saying why) and empty level columns.
    ``labels`` and ``slo`` stay dicts and ``notes`` a list here; ``csv_cell`` writes them as
    JSON, since ``k=v;k2=v2`` could not tell ``--label 'a=x;b=y'`` from two labels.
    """
    from glmserve.bench.comparable import comparable_key, context

    flat = []
    for r in rows:
        res = r["result"]
        meta = {**(res.get("meta") or {}), **(r.get("meta") or {})}
        settings = res.get("settings") or {}
        head = {
            "id": r["id"],
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(r["created_at"])),
            "run_id": r.get("run_id"),
            "mode": res.get("mode"),
            "complete": res.get("complete"),
            "stopped": res.get("stopped"),  # why it is incomplete
            **context(r),
            **{k: v for k, v in comparable_key(r).items() if k != "mode"},
            "seed": settings.get("seed"),
            "warmup": settings.get("warmup"),
            "slo": settings.get("slo"),
            "labels": dict(meta.get("labels") or {}),
            "notes": list(res.get("notes") or []),
        }
        for lv in res.get("levels") or [{}]:
            row = dict(head)
            for key in LEVEL_FIELDS:
                v = lv.get(key)
                row[key] = v if not isinstance(v, list) else ",".join(map(str, v))
            for metric in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "queue_ms", "decode_tok_s"):
                stats = lv.get(metric) or {}
                for st in [*STATS, *sorted(k for k in stats if k not in STATS)]:
                    row[f"{metric}_{st}"] = stats.get(st)  # p99.9 too: every one measured
            flat.append(row)
    return flat


def csv_cell(value: Any) -> tuple[Any, list[str]]:
    """One CSV cell, and the paths of the non-finite numbers it had (``$`` for the cell).

    A dict or list is JSON text; a string a spreadsheet would evaluate is prefixed with ``'``
    (OWASP's neutralisation; the cell then shows the text as typed); a number stays a number
    (``-1.5``). A non-finite number is an empty cell, not ``inf``/``nan``, which spreadsheets
    and ``pandas.read_csv`` read as figures: the CSV twin of strictjson's ``null``.
    """
    from glmserve.strictjson import dumps

    if isinstance(value, float) and not math.isfinite(value):
        return None, ["$"]
    bad: list[str] = []
    if isinstance(value, (dict, list, tuple)):
        value, bad = dumps(value)
    if isinstance(value, str) and value.startswith(FORMULA_PREFIXES):
        return "'" + value, bad
    return value, bad


def export_text(rows: list[dict[str, Any]], fmt: str) -> tuple[str, list[str]]:
    """The rows as csv (one line per level), json (a list) or jsonl (one result per line),
    and where a non-finite number was written as null or an empty cell, for the caller's
    warning (as ``strictjson.dumps`` returns them: the text itself must stay strict)."""
    from glmserve.strictjson import dumps

    if fmt == "json":  # the paths `results --json` names for the same document
        text, bad = dumps([_full(r) for r in rows], indent=2)
        return text + "\n", bad
    if fmt == "series":
        from glmserve.bench.telemetry import series_lines

        lines, bad = [], []
        for r in rows:
            for doc in series_lines(r["id"], r["result"]):
                line, line_bad = dumps(doc)
                lines.append(line + "\n")
                bad += [f"result {r['id']} {p}" for p in line_bad]
        return "".join(lines), bad
    if fmt == "jsonl":
        lines, bad = [], []
        for r in rows:
            line, line_bad = dumps(_full(r))
            lines.append(line + "\n")
            bad += [f"result {r['id']} {p}" for p in line_bad]
        return "".join(lines), bad
    flat = flat_rows(rows)
    buf = io.StringIO()
    fields: list[str] = []
    for f in flat:
        fields += [k for k in f if k not in fields]
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    bad = []
    for f in flat:
        cells = {}
        for k, v in f.items():
            cells[k], cell_bad = csv_cell(v)
            bad += [f"result {f['id']} {k}{p[1:]}" for p in cell_bad]
        w.writerow(cells)
    return buf.getvalue(), bad


def _full(r: dict[str, Any]) -> dict[str, Any]:
    """A stored row as ``bench --json`` printed it, plus run id, date and stored meta."""
    from glmserve.bench.comparable import comparable_block

    return {
        "id": r["id"],
        "run_id": r.get("run_id"),
        "created_at": r["created_at"],
        **r["result"],
        "stored_meta": r.get("meta") or {},
        "comparable": comparable_block(r),
    }


@results_app.callback()
def results(
    ctx: typer.Context,
    run: RunFilterOpt = None,
    profile: ProfileFilterOpt = None,
    mode: ModeFilterOpt = None,
    label: LabelFilterOpt = (),
    last: LastOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List stored bench results, newest first (filters combine).

    With a subcommand, its options are checked here and passed on (``_check_group_options``);
    ``results_app``'s help, not this docstring, is what ``results --help`` shows.
    """
    if ctx.invoked_subcommand is not None:
        _check_group_options(ctx.invoked_subcommand, ctx.params)
        return
    rows = select_rows(run, profile, mode, _labels(label), last)
    if as_json:
        emit_json([_full(r) for r in rows])
    else:
        out.print(list_table(rows))


# The group's options as the user typed them, for the messages that refuse them.
GROUP_FLAGS = {"run": "--run", "profile": "--profile", "mode": "--mode", "label": "--label",
               "last": "--last", "as_json": "--json"}  # fmt: skip


def _given(params: dict[str, Any]) -> dict[str, Any]:
    """The group options the user gave (every default is None, empty or False; ``--last 0``
    is given, and refused later, so 0 must not pass for False)."""
    return {
        k: v
        for k, v in params.items()
        if k in GROUP_FLAGS and v not in (None, (), []) and v is not False
    }


def _check_group_options(subcommand: str, params: dict[str, Any]) -> None:
    """Refuse a group option its subcommand cannot use, before it runs.

    Click parses ``results --profile x show 12`` happily and the subcommand never looked at
    ``--profile``: a filter that filters nothing, exit 0, is worse than an error. ``show``
    takes one id (a filter there is a mistake, and ``--json`` is passed on); ``export``
    applies the filters (``_group_filters``) but has ``--format`` instead of ``--json``.
    """
    given = _given(params)
    if subcommand == "show":
        wrong = [GROUP_FLAGS[k] for k in given if k != "as_json"]
        if wrong:
            raise ConfigError(
                f"{', '.join(wrong)}: `results show ID` takes no filters; drop them (filters "
                f"select what `glmserve results` lists and `results export` writes)"
            )
    elif subcommand == "export" and "as_json" in given:
        raise ConfigError(
            "results --json export: export writes --format csv|json|jsonl; drop --json"
        )


def _group_filters(ctx: typer.Context) -> dict[str, Any]:
    """The filters given before the subcommand (``results --profile x export``), if any."""
    parent = ctx.parent
    return _given(parent.params) if parent is not None else {}


def _merged(flag: str, before: Any, after: Any) -> Any:
    """One filter given before and after ``export``: the same value is that value; two
    values are refused (as every other option given twice with two values is)."""
    if before is None or before == after:
        return after
    if after is None:
        return before
    raise ConfigError(
        f"{flag} given twice with two values ({before!r} before export, {after!r} after)"
    )


@results_app.command("show")
def show(
    ctx: typer.Context,
    result_id: int = typer.Argument(..., help="Bench result id (from `glmserve results`)."),
    as_json: JsonOpt = False,
    wide: WideOpt = False,
) -> None:
    """One stored result: its bench table and everything that makes it comparable."""
    from glmserve.bench.comparable import comparable_block
    from glmserve.bench.results import BenchResult, render_plain
    from glmserve.cli.views import render_table
    from glmserve.store import RunStore

    with RunStore.open() as store:
        row = store.get_bench_result(result_id)
    if as_json or _group_filters(ctx).get("as_json"):  # `results --json show 12` too
        emit_json(_full(row))
        return
    res = BenchResult.from_dict(row["result"])
    out.print(render_table(res, wide=wide, width=out.width))
    for line in render_plain(res):
        out.print(plain(line), highlight=False, markup=False)
    block = comparable_block(row)
    meta = {**(res.meta or {}), **(row.get("meta") or {})}
    lines = [
        f"result {row['id']}  run {row.get('run_id') or '-'}  "
        f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(row['created_at']))}",
        "settings: "
        + " ".join(f"{k}={_setting(v)}" for k, v in block["settings"].items() if v is not None),
        f"profile {block['profile'] or '-'} (argv hash {block['argv_hash'] or '-'}), "
        f"SGLang {block['sglang_version'] or '-'}, host {block['host'] or '-'}, "
        f"GPUs {block['gpu_count'] or '-'} x {block['gpu_model'] or '-'}",
    ]
    if meta.get("labels"):
        lines.append("labels: " + ", ".join(f"{k}={v}" for k, v in meta["labels"].items()))
    from glmserve.bench.probe import probe_lines  # its verdict and the API it went through

    lines.extend(probe_lines(row["result"].get("probe")))
    for line in lines:  # labels, profile and host are data: no control characters sent
        out.print(plain(line), highlight=False, markup=False)


def _setting(value: Any) -> str:
    """A setting as the user typed it: ``request_rate=5,inf``, not ``['5', 'inf']``."""
    if isinstance(value, (list, tuple)):
        return ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value)
    return str(value)


@results_app.command("export")
def export(
    ctx: typer.Context,
    fmt: str = typer.Option(
        "csv",
        "--format",
        help="csv (one row per level; labels, slo and notes as JSON; a cell starting with "
        "= + - @ gets a leading ' so no spreadsheet runs it) | json | jsonl | series (the "
        "telemetry time series as JSONL, one line per sample)",
    ),
    output: Path | None = typer.Option(None, "--output", help="Write here instead of stdout."),
    run: RunFilterOpt = None,
    profile: ProfileFilterOpt = None,
    mode: ModeFilterOpt = None,
    label: LabelFilterOpt = (),
    last: LastOpt = None,
) -> None:
    """Export stored results for a spreadsheet (csv) or a script (json, jsonl).

    Exports what `glmserve results` with the same filters lists; the filters may come
    before or after `export` and combine (one given both places with two values is refused).
    """
    if fmt not in FORMATS:
        raise ConfigError(f"--format: expected one of {', '.join(FORMATS)}, got {fmt!r}")
    before = _group_filters(ctx)
    rows = select_rows(
        _merged("--run", before.get("run"), run),
        _merged("--profile", before.get("profile"), profile),
        _merged("--mode", before.get("mode"), mode),
        _labels(list(dict.fromkeys([*before.get("label", []), *label]))),
        _merged("--last", before.get("last"), last),
    )
    if output is not None:  # never onto the run store itself (it replaced it, exit 0)
        from glmserve.paths import check_output_file

        check_output_file("--output", output)
    text, bad = export_text(rows, fmt)
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()  # the data before the warning about it, as emit_json does
    else:
        try:
            output.write_text(text)
        except OSError as exc:
            raise ConfigError(f"--output {output}: {exc.strerror or exc}") from exc
    warn_non_finite(bad, "empty cells" if fmt == "csv" else "null")


app.add_typer(results_app, name="results")

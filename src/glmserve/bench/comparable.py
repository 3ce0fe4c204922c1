"""What makes two stored bench results comparable, and which field differs when they are not.

A speedup means something only between results measured the same way: the same workload
(lengths, dataset, API), the same load shape (closed-loop levels or open-loop rates,
burstiness, concurrency cap), the same amount of it (``num_prompts`` / ``duration``: 2 prompts
at c=8 never fill 8 slots) and, for the simulator, the same ``--sim-speed`` (a speed-10
simulator is 10x "faster" by construction). Those are the *settings* checked here.

Two more things make a figure unfit for a speedup whatever the other side is: a result that
is not complete (requests failed, Ctrl-C, the server crashed: its throughput is of fewer
streams than asked), and a closed-loop level that never had its nominal concurrency in flight
(``max_concurrency_seen`` < ``concurrency``: labelled c=8, measured at c=2). ``unfit`` names
both.

What a comparison is meant to vary (profile, its argv, env and patches, SGLang version, host,
GPUs) is recorded as *context* and shown, never refused. ``config_hash`` identifies a server
configuration: the argv without ``--host``/``--port`` (where it listens is placement, not
config), the launch env (``GLMSERVE_PATCHES`` selects the runtime patch) and the patches.
Pure: stored rows in, dicts out (``compare`` and ``report`` both use it, so they agree).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from glmserve.config.flags import Flags

# Settings that must be equal for a speedup to mean anything (key in result["settings"]).
SETTING_FIELDS: tuple[str, ...] = ("mode", "api", "input_len", "output_len", "random_range_ratio",
                                   "dataset_path", "request_rate", "burstiness",
                                   "max_concurrency", "num_prompts", "duration")  # fmt: skip
# Older results lack the newer settings: these are what they implicitly used.
DEFAULTS: dict[str, Any] = {
    "random_range_ratio": 1.0,
    "dataset_path": None,
    "request_rate": None,
    "burstiness": 1.0,
    "max_concurrency": None,
    "num_prompts": None,
    "duration": None,
}
CONTEXT_FIELDS: tuple[str, ...] = ("profile", "argv_hash", "config_hash", "sglang_version",
                                   "host", "client_host", "server_url", "gpu_model", "gpu_count",
                                   "tp_size")  # fmt: skip
# Where a server listens, not how it is configured: left out of the hashes.
PLACEMENT_FLAGS: tuple[str, ...] = ("--host", "--port")


def config_argv(argv: Any) -> list[str]:
    """The argv (list, or a shell string as older results stored it) without the placement
    flags and their values (``--port 30001`` and ``--port=30001`` alike)."""
    import shlex

    if not argv:
        return []
    toks = shlex.split(argv) if isinstance(argv, str) else [str(a) for a in argv]
    return Flags.parse(toks).without(PLACEMENT_FLAGS)


def _hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:12]


def argv_hash(argv: Any) -> str | None:
    """A short stable hash of a rendered server argv (list or string) without ``--host`` and
    ``--port``, None without one: the same profile on another port hashes the same."""
    toks = config_argv(argv)
    return _hash(toks) if toks else None


def config_hash(argv: Any, env: dict[str, Any] | None, patches: list[Any] | None) -> str | None:
    """What identifies a server configuration: argv (less placement), launch env, patches.

    Two profiles with the same flags but a different ``GLMSERVE_PATCHES`` are different
    configurations (the gather-cast patch changes the decode step), so env and patches count.
    None without an argv (a ``--url`` result: the server's own account is in ``server.args``).
    """
    toks = config_argv(argv)
    if not toks:
        return None
    env = {str(k): str(v) for k, v in (env or {}).items()}
    return _hash({"argv": toks, "env": env, "patches": sorted(str(p) for p in patches or [])})


def gpu_summary(gpus: Any) -> tuple[str | None, int | None]:
    """(model, count) from ``nvidia-smi`` lines "NAME, MEM, DRIVER"; (None, None) without."""
    if not gpus or not isinstance(gpus, list):
        return None, None
    names = sorted({str(g).split(",")[0].strip() for g in gpus})
    return " + ".join(names), len(gpus)


def sim_speed(row: dict[str, Any]) -> float | None:
    """The simulator's ``--sim-speed`` a result was measured against; None for a real server."""
    res = row.get("result") or {}
    for src in (res.get("server") or {}, row.get("meta") or {}, res.get("meta") or {}):
        v = src.get("sim_speed")
        if v is not None:
            return float(v)
    return None


# What ``--num-prompts`` means when it is not given (``BenchSettings.prompts_for``): a result
# that names the default explicitly was measured the same way as one that left it out.
DEFAULT_NUM_PROMPTS = {"decode": 5, "rate": 200}


def comparable_key(row: dict[str, Any]) -> dict[str, Any]:
    """The settings of a stored row that must match (see the module docstring).

    Three are normalised so equal workloads compare equal and different ones do not:
    ``num_prompts`` left out is the mode's default (5 for decode, 200 open loop); a dataset is
    its content (``dataset_sha256``), not the path it was read from (two files named
    ``ds.txt`` showed 1.37x; the same file by two paths was "not comparable"); and the
    ``seed`` counts where it draws the workload: random lengths (``random_range_ratio`` < 1:
    seeds 1 and 2 gave 448 and 631 output tokens, shown as 1.28x) or a dataset's order.
    """
    res = row.get("result") or {}
    st = res.get("settings") or {}
    key = {f: st.get(f, DEFAULTS.get(f)) for f in SETTING_FIELDS}
    if key["num_prompts"] is None and key["duration"] is None:
        key["num_prompts"] = DEFAULT_NUM_PROMPTS.get(str(key["mode"]))
    if st.get("dataset_sha256"):
        key["dataset_path"] = f"sha256:{st['dataset_sha256'][:16]}"
    random_draw = (key["random_range_ratio"] or 0.0) < 1.0 or key["dataset_path"] is not None
    key["seed"] = st.get("seed", 0) if random_draw else None
    key["sim_speed"] = sim_speed(row)
    key["workload"] = workload_key(st)
    key["flush_cache"] = bool(st.get("flush_cache", False))
    return key


GSP_KEYS = (("gsp_num_groups", "groups"), ("gsp_prompts_per_group", "prompts_per_group"),
            ("gsp_system_prompt_len", "system_prompt_len"), ("gsp_question_len", "question_len"),
            ("gsp_output_len", "output_len"), ("gsp_num_turns", "turns"),
            ("think_time", "think_time"))  # fmt: skip


def workload_key(st: dict[str, Any]) -> str:
    """The workload's kind and parameters as one comparable string: ``random`` (older
    results, which lack the field, are random or a ``--dataset-path`` file), ``file``, or
    ``generated-shared-prefix groups=2 prompts_per_group=6 ...`` (two results that share a
    prefix differently measure a different cache, not a faster server); a trace's sha256
    when one was replayed."""
    kind = st.get("dataset_name") or ("file" if st.get("dataset_path") else "random")
    parts = [str(kind)]
    if kind == "generated-shared-prefix":
        parts += [f"{name}={st.get(k)}" for k, name in GSP_KEYS]
    if st.get("trace_sha256"):
        parts.append(f"trace=sha256:{str(st['trace_sha256'])[:16]}")
        parts.append(f"speedup={st.get('trace_speedup', 1.0)}")
    return " ".join(parts)


def launch_of(row: dict[str, Any]) -> tuple[dict[str, Any], list[Any]]:
    """(env, patches) a result's server was launched with: ``row["launch"]`` where a loader
    attached the run record's spec (bench meta never stored the env), else the meta's."""
    res = row.get("result") or {}
    meta = {**(res.get("meta") or {}), **(row.get("meta") or {})}
    launch = row.get("launch") or {}
    env = launch.get("env") if launch.get("env") is not None else meta.get("env")
    patches = launch.get("patches") if launch.get("patches") is not None else meta.get("patches")
    return dict(env or {}), list(patches or [])


def context(row: dict[str, Any]) -> dict[str, Any]:
    """What a comparison is meant to vary: profile, argv and config hash, version, where it
    ran, GPUs.

    The hashes are recomputed from the stored argv (results stored before placement was left
    out hashed ``--port`` in); a ``--url`` result has no run, so no server host: ``host`` is
    None and ``server_url`` / ``client_host`` say where it was measured from, and ``tp_size``
    comes from what the server reported (``/server_info``).
    """
    res = row.get("result") or {}
    meta = {**(res.get("meta") or {}), **(row.get("meta") or {})}
    server = res.get("server") or {}
    model, count = gpu_summary(meta.get("gpus"))
    env, patches = launch_of(row)
    argv = meta.get("argv")
    return {
        "profile": meta.get("profile"),
        "argv_hash": argv_hash(argv) if argv else meta.get("argv_hash"),
        "config_hash": config_hash(argv, env, patches),
        "sglang_version": meta.get("sglang_version") or server.get("version"),
        "host": meta.get("host"),
        "client_host": meta.get("client_host"),
        "server_url": meta.get("url") if not meta.get("run_id") else None,
        "gpu_model": model,
        "gpu_count": count,
        "tp_size": meta.get("tp_size") or (server.get("args") or {}).get("tp_size"),
    }


def where_text(ctx: dict[str, Any]) -> str:
    """The host a result's server ran on; for a ``--url`` result, the URL and the client host
    it was measured from (never the client's name as if it were the server's)."""
    if ctx.get("host"):
        return str(ctx["host"])
    if ctx.get("server_url"):
        return f"server URL {ctx['server_url']} (client host {ctx.get('client_host') or '-'})"
    return f"client host {ctx['client_host']}" if ctx.get("client_host") else "-"


def incomplete_reason(row: dict[str, Any]) -> str | None:
    """Why a result's figures are not of the load asked for, None when it is complete:
    ``incomplete: 8 of 16 requests failed`` / ``incomplete: interrupted (Ctrl-C)``."""
    res = row.get("result") or {}
    levels = res.get("levels") or []
    errors = sum(int(lv.get("errors") or 0) for lv in levels)
    requests = sum(int(lv.get("requests") or 0) for lv in levels)
    if res.get("complete") is not False and not errors:
        return None
    why = res.get("stopped")
    failed = f"{errors} of {requests} requests failed" if errors else None
    if why and failed and failed not in why:
        why = f"{why}; {failed}"
    return f"incomplete: {why or failed or 'stopped early'}"


def wrong_output_reason(row: dict[str, Any]) -> str | None:
    """``WRONG_OUTPUT vs reference N: ...`` when the result was probed against a reference at
    bench time and its output disagreed (``bench --reference``): its speed is of another
    model, so it is no speedup and never a winner. None otherwise."""
    a = ((row.get("result") or {}).get("probe") or {}).get("agreement") or {}
    if a.get("verdict") != "WRONG_OUTPUT":
        return None
    return f"WRONG_OUTPUT vs reference {a.get('reference')}: " + "; ".join(a.get("reasons") or [])


def underfilled(lv: dict[str, Any]) -> str | None:
    """Why a closed-loop level is not a measurement at its nominal concurrency, else None:
    it never had ``concurrency`` requests in flight (fewer prompts than slots, say).

    Open-loop levels are left alone: their concurrency is a cap, not a promise.
    """
    if lv.get("request_rate") is not None:
        return None
    c = int(lv.get("concurrency") or 0)
    seen = lv.get("max_concurrency_seen")
    if seen is None:  # results stored before max_concurrency_seen: the request count bounds it
        seen = lv.get("requests")
    if seen is None or c <= 1 or int(seen) >= c:
        return None
    if int(seen) == 0 and int(lv.get("errors") or 0) > 0:
        # No request was ever in flight: every one failed before the server answered (it
        # was killed, say). The errors are the story, told as "N of N requests failed";
        # "c=4 never had more than 0 requests in flight" only confused it.
        return None
    return f"c={c} never had more than {int(seen)} requests in flight"


def unfit(row: dict[str, Any]) -> dict[str, Any]:
    """What keeps a result's own figures from a speedup: ``{"incomplete": reason|None,
    "levels": {level key: reason}}`` (level keys as ``levels_of``)."""
    lvs = (row.get("result") or {}).get("levels") or []
    bad = {}
    for lv in lvs:
        why = underfilled(lv)
        if why:
            st = (row.get("result") or {}).get("settings") or {}
            if st.get("num_prompts") is not None and st["num_prompts"] < lv["concurrency"]:
                why += f" (num_prompts {st['num_prompts']} < concurrency {lv['concurrency']})"
        why = why or lv.get("contended")  # another client's load shared the server
        if why:
            bad[lv.get("request_rate") or lv.get("concurrency")] = why
    return {"incomplete": incomplete_reason(row), "levels": bad}


def levels_of(row: dict[str, Any]) -> list[Any]:
    """The concurrency levels (closed loop) or rates (open loop) a result measured."""
    lvs = (row.get("result") or {}).get("levels") or []
    return [lv.get("request_rate") or lv.get("concurrency") for lv in lvs]


def differences(base: dict[str, Any], row: dict[str, Any]) -> list[dict[str, Any]]:
    """Settings in which ``row`` differs from ``base``: ``[{field, baseline, value}]``."""
    a, b = comparable_key(base), comparable_key(row)
    out = [{"field": f, "baseline": a[f], "value": b[f]} for f in a if a[f] != b[f]]
    if (a["sim_speed"] is None) != (b["sim_speed"] is None):
        out = [d for d in out if d["field"] != "sim_speed"]
        out.append({"field": "simulated", "baseline": a["sim_speed"] is not None,
                    "value": b["sim_speed"] is not None})  # fmt: skip
    return out


def describe(diffs: list[dict[str, Any]]) -> str:
    """``sim_speed 10 vs 1, output_len 64 vs 128`` (value vs baseline)."""
    return ", ".join(f"{d['field']} {_v(d['value'])} vs {_v(d['baseline'])}" for d in diffs)


def _v(x: Any) -> str:
    if isinstance(x, float) and x.is_integer():
        return str(int(x))
    if isinstance(x, list):
        return ",".join(_v(i) for i in x)
    return "-" if x is None else str(x)


def comparable_block(row: dict[str, Any]) -> dict[str, Any]:
    """Everything stored with a result that decides what it may be compared with."""
    return {"settings": comparable_key(row), **context(row)}

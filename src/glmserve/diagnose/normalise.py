"""Line normalisation: ANSI escapes, paste/CI/Ray decorations and SGLang's ``[ts TPn]``
prefix removed, so every rule matches the message itself (and progress is judged on it)."""

from __future__ import annotations

import re

# Decorations in front of SGLang's own "[ts TPn] " prefix, stripped repeatedly:
_DECOR = re.compile(
    r"^(?:\s*>\s?)+"  # markdown quotes
    r"|^\s*\([\w.-]+ pid=\d+(?:, ip=[\d.]+)?\)\s?"  # Ray: "(SGLangEngine pid=23902) "
    r"|^\s*\[\d{4}-\d\d-\d\dT[\d:.]+Z?\]\s?"  # CI: "[2025-11-06T02:10:00.702Z] "
    r"|^\s*\d{4}-\d\d-\d\dT[\d:.]+(?:Z|[+-]\d\d:?\d\d)?\s+(?:std(?:out|err) [FP] )?"  # kubectl/CRI
    r"|^\s*\d{4}-\d\d-\d\d [\d:,.]+ \| \w+ \| [\w.]+ \| "  # "date | ERROR | stderr | "
    r"|^[\w.-]+\s+\| "  # docker compose "name  | "
    r"|^\s*(?:DEFAULT|DEBUG|INFO|NOTICE|WARNING|ERROR|CRITICAL|ALERT|EMERGENCY)\s+"
    r"\d{4}-\d\d-\d\dT[\d:.]+Z?\s+"  # Google Cloud Logging export: "ERROR 2025-04-07T19:..Z "
    r"|^\s*\d{4}-\d\d-\d\d [\d:,.]+ - [\w.]+ - [A-Z]+ - "  # Python logging "date - name - LEVEL - "
    r"|^\s*\[rank\d+\]:\s?"  # torchrun "[rank0]: "
    r"|^\s*\d\d-\d\d \d\d:\d\d:\d\d\.\d+\s+"  # console exports "04-20 13:32:25.784  "
)
# SGLang's "[ts TAGS] ": 0.3.x printed only the time; tags are TPn, DPn, PPn, EPn and newer
# ones such as ATTN_CP7; a paste may lose the opening bracket.
_PREFIX = re.compile(
    r"^\s*\[?(?P<ts>(?:\d{4}-\d\d-\d\d[ T])?\d\d:\d\d:\d\d(?:[.,]\d+)?)"
    r"(?P<tags>(?:\s+[A-Z][A-Z_]{1,11}\d+)*)\]\s?"
)
# SGLang's records under a logging config that puts level, pid and source first: "2025-08-28
# 21:19:34 ERROR 125765 [ DP10 TP10 EP10 scheduler.py:2655] msg" (sglang issue 9867).
_PREFIX_LEVEL_FIRST = re.compile(
    r"^\s*\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? (?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d+ "
    r"\[(?P<tags>(?:\s*[A-Z][A-Z_]{1,11}\d+)*)\s+[\w.]+:\d+\]\s?"
)
_TP_TAG = re.compile(r"\bTP(\d+)\b")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")


def _clean(raw: str) -> str:
    if "\x1b" in raw:
        raw = _ANSI.sub("", raw)
    if "\x00" in raw:
        raw = raw.replace("\x00", "")
    return raw.rstrip("\n").rstrip("\r")


def _split_prefix(raw: str) -> tuple[str, str, bool]:
    """(body, rank tags, has_sglang_prefix) with quotes/Ray/CI decorations removed."""
    text = raw
    tags = ""
    prefixed = False
    for _ in range(6):
        m = _DECOR.match(text)
        if m and m.end() > 0:
            text = text[m.end() :]
            continue
        p = _PREFIX.match(text) or _PREFIX_LEVEL_FIRST.match(text)
        if p:
            text = text[p.end() :]
            tags = tags or (p.group("tags") or "")
            prefixed = True
            continue
        break
    return text, tags, prefixed


# uvicorn's access log line as SGLang 0.5.9 formats it (srt/utils/common.py
# set_uvicorn_logging_configs: '[%(asctime)s] %(levelprefix)s %(client_addr)s -
# "%(request_line)s" %(status_code)s'): a request answered, which says nothing about start-up.
_ACCESS_LINE = re.compile(r'^(?:[A-Z]+:\s+)?\S+ - "[A-Z]+ \S+ HTTP/[\d.]+" \d{3}\b')
# Lines the server writes only because a request arrived (glmserve's own /health polls and
# identity probes): srt/entrypoints/http_server.py health_generate / get_model_info /
# get_server_info.
_PROBE_ECHO = re.compile(
    r"Health check failed\. Server couldn't get a response"
    r"|Endpoint '/get_(?:model|server)_info' is deprecated"
)


def is_progress_line(line: str) -> bool:
    """Does this log line show the server itself moving on? HTTP access lines and lines our
    probes cause never do: a server hung in warmup still answers ``/health`` with 503 and
    logs each answer, so counting them would hide the hang forever."""
    body = _split_prefix(_clean(line))[0].strip()
    if not body:
        return False
    return not (_ACCESS_LINE.match(body) or _PROBE_ECHO.search(body))

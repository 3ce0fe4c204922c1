"""Prompts and request bodies: random token ids or a dataset file, ``ignore_eos`` (pure).

Random token ids with ``ignore_eos`` and ``max_new_tokens`` give exact input and output lengths
on any model without a tokenizer. The chat API only takes text, so its prompt is made of short
random words (the server's ``usage.prompt_tokens`` then says how long it really was), or, with
``--tokenizer``, the ids decoded to text as bench_serving's random dataset does.

``--random-range-ratio R`` draws each request's input and output length uniformly from
``[max(1, int(len * R)), len]`` (bench_serving's ``compute_random_lens``). Its default is
bench_serving's 0.0 for random prompts at ``--request-rate``, else 1.0 (fixed lengths, so a
number means one shape): see ``BenchSettings.range_ratio``.

``--dataset-path FILE`` takes prompts from a local file: ShareGPT JSON (a list of
``{"conversations": [{"from": "human", "value": ...}, ...]}``) or JSONL (one such object, or
``{"prompt": ...}`` / ``{"text": ...}``, per line), else a plain text file (one prompt per
non-empty line). Without a tokenizer a text prompt is sent as text and its length is the
server's count; with one it is sent as token ids (exact).

Output lengths of dataset prompts follow bench_serving's ``sample_sharegpt_requests``: with a
tokenizer and no ``--output-len``, each request asks for as many tokens as its conversation's
reply has (the turn after the prompt; JSONL ``completion``/``response``/``output``), and rows
whose prompt or reply is under 2 tokens are skipped (bench_serving prunes them too). Without a
tokenizer a reply cannot be counted exactly, so every request gets ``--output-len``.
"""

from __future__ import annotations

import random
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from glmserve.errors import ConfigError
from glmserve.strictjson import loads as strict_loads

Api = Literal["native", "openai", "chat"]
APIS: tuple[str, ...] = ("native", "openai", "chat")
# Token ids well inside every modern vocabulary (GLM-5's is ~150k) and clear of special tokens.
TOKEN_ID_RANGE = (1000, 30000)


@dataclass(frozen=True)
class Request:
    """One request to send: endpoint path and JSON body."""

    path: str
    body: dict[str, Any]
    input_len: int | None = None  # prompt tokens as the client knows them (None: text prompt)


Prompt = list[int] | str


def lengths(count: int, length: int, ratio: float, rng: random.Random) -> list[int]:
    """``count`` lengths uniform in ``[max(1, int(length * ratio)), length]`` (bench_serving)."""
    lo = max(1, int(length * ratio))
    return [rng.randint(lo, length) if lo < length else length for _ in range(count)]


def load_tokenizer(path: str | None) -> Any:
    """A local Hugging Face tokenizer (never the network), or None; ConfigError names it."""
    if not path:
        return None
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as exc:  # any load failure is the same user error
        raise ConfigError(f"--tokenizer {path}: cannot load a tokenizer ({exc})") from exc


# The largest dataset file read: ShareGPT_V3_unfiltered_cleaned_split.json, the usual one, is
# 642 MiB; 1 GiB leaves room and stops ``/dev/zero`` or a runaway FIFO from filling memory
# (the text is held, then parsed: a few times its size in RAM).
MAX_DATASET_BYTES = 1 << 30


def check_dataset_file(path: str, limit: int = MAX_DATASET_BYTES) -> None:
    """``--dataset-path`` names a readable regular file of at most ``limit`` bytes, or a pipe
    (``<(zcat data.jsonl.gz)``: read up to the limit). A device (``/dev/zero``), directory or
    socket is refused before anything is read or any server asked."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError as exc:
        raise ConfigError(f"--dataset-path {path}: {exc.strerror or exc}") from exc
    if stat.S_ISREG(st.st_mode):
        if st.st_size > limit:
            raise ConfigError(
                f"--dataset-path {path}: {st.st_size / 2**20:,.0f} MiB is over the "
                f"{limit / 2**20:,.0f} MiB limit; take a sample of it"
            )
    elif not stat.S_ISFIFO(st.st_mode):
        raise ConfigError(f"--dataset-path {path}: not a regular file (or a pipe)")


@dataclass(frozen=True)
class DatasetRow:
    """One prompt of a dataset file and the reply that followed it (None: the file has none)."""

    prompt: str
    reply: str | None = None


def dataset_digest(path: str) -> str | None:
    """The sha256 of a regular dataset file (what ``compare`` checks: the same file by two
    paths is the same workload, two files of one name are not); None for a pipe, which
    cannot be read twice."""
    import hashlib

    p = Path(path)
    if not p.is_file():
        return None
    h = hashlib.sha256()
    with p.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def read_dataset(path: str, limit: int = MAX_DATASET_BYTES) -> list[str]:
    """The prompts of a ShareGPT JSON/JSONL or plain text file; ConfigError names file/line."""
    return [row.prompt for row in read_dataset_rows(path, limit)]


def read_dataset_rows(path: str, limit: int = MAX_DATASET_BYTES) -> list[DatasetRow]:
    """The prompts (and replies) of a ShareGPT JSON/JSONL or plain text file; ConfigError
    names file/line.

    At most ``limit`` bytes are read (see ``MAX_DATASET_BYTES``): more is refused, not cut,
    since a cut JSON file would fail to parse anyway and a cut text file silently changes the
    workload."""
    check_dataset_file(path, limit)
    p = Path(path)
    try:
        with p.open("rb") as f:
            raw = f.read(limit + 1)
        if len(raw) > limit:
            raise ConfigError(
                f"--dataset-path {path}: over the {limit / 2**20:,.0f} MiB limit; take a sample"
            )
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--dataset-path {path}: cannot read ({exc})") from exc
    stripped = text.lstrip()
    prompts: list[DatasetRow] = []
    if p.suffix == ".json" or stripped.startswith("["):
        try:
            data = strict_loads(text)
        except ValueError as exc:
            raise ConfigError(f"{path}: not valid JSON ({exc})") from exc
        if not isinstance(data, list):
            raise ConfigError(f"{path}: expected a JSON list of ShareGPT conversations")
        for i, item in enumerate(data):
            if (row := _prompt_and_reply(item)) is None:
                raise ConfigError(f"{path}: entry {i} has no human turn or prompt")
            prompts.append(row)
    elif p.suffix == ".jsonl" or stripped.startswith("{"):
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                item = strict_loads(line)
            except ValueError as exc:
                raise ConfigError(f"{path}:{n}: not valid JSON ({exc})") from exc
            if (row := _prompt_and_reply(item)) is None:
                raise ConfigError(f"{path}:{n}: no human turn or prompt")
            prompts.append(row)
    else:
        prompts = [DatasetRow(ln.strip()) for ln in text.splitlines() if ln.strip()]
    if not prompts:
        raise ConfigError(f"--dataset-path {path}: no prompts in the file")
    return prompts


HUMAN = ("human", "user")


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def _prompt_and_reply(item: Any) -> DatasetRow | None:
    """The first human turn (or ``prompt``/``text``) and the turn after it (or
    ``completion``/``response``/``output``); None without a prompt."""
    if not isinstance(item, dict):
        return None
    for key in ("prompt", "text"):
        if prompt := _text(item.get(key)):
            reply = next(
                (r for k in ("completion", "response", "output") if (r := _text(item.get(k)))),
                None,
            )
            return DatasetRow(prompt, reply)
    turns = item.get("conversations") or item.get("conversation") or []
    turns = turns if isinstance(turns, list) else []
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict) or turn.get("from", turn.get("role")) not in HUMAN:
            continue
        if prompt := _text(turn.get("value", turn.get("content"))):
            nxt = turns[i + 1] if i + 1 < len(turns) else {}
            reply = _text(nxt.get("value", nxt.get("content"))) if isinstance(nxt, dict) else None
            return DatasetRow(prompt, reply)
    return None


# bench_serving's sample_sharegpt_requests skips a row whose prompt or reply is shorter.
MIN_DATASET_TOKENS = 2


def dataset_prompts(
    path: str, count: int, seed: int, tokenizer: Any = None, max_len: int | None = None
) -> list[Prompt]:
    """``count`` prompts from the file, shuffled by ``seed`` and cycled; token ids with a
    tokenizer (cut at ``max_len`` when given), else the text itself."""
    return dataset_prompts_counted(path, count, seed, tokenizer, max_len)[0]


def dataset_prompts_counted(
    path: str, count: int, seed: int, tokenizer: Any = None, max_len: int | None = None
) -> tuple[list[Prompt], int]:
    """``dataset_prompts`` and how many distinct prompts the file gave."""
    texts = read_dataset(path)
    rng = random.Random(seed)
    order = list(range(len(texts)))
    rng.shuffle(order)
    out: list[Prompt] = []
    for i in range(count):
        t = texts[order[i % len(order)]]
        if tokenizer is None:
            out.append(t)
        else:
            ids = list(tokenizer.encode(t))  # with BOS etc., as the server tokenizes text
            out.append(ids[:max_len] if max_len else ids)
    return out, len(texts)


def dataset_prompts_with_replies(
    path: str, count: int, seed: int, tokenizer: Any
) -> tuple[list[Prompt], list[int], int]:
    """``count`` prompts (token ids) shuffled by ``seed`` and cycled, each with its reply's
    length in tokens as its output length (bench_serving's ShareGPT default). Rows without a
    reply, or with a prompt or reply under ``MIN_DATASET_TOKENS``, are skipped; a file left
    with none is a ConfigError saying what to give instead. The third item is how many
    distinct rows were used (fewer than ``count``: they repeat)."""
    rows = read_dataset_rows(path)
    rng = random.Random(seed)
    order = list(range(len(rows)))
    rng.shuffle(order)
    usable: list[tuple[list[int], int]] = []
    for i in order:
        row = rows[i]
        if row.reply is None:
            continue
        # tokenizer.encode as bench_serving calls it (special tokens included): the prompt
        # ids are what the server makes of the text, the reply length is bench_serving's
        ids = list(tokenizer.encode(row.prompt))
        reply_len = len(tokenizer.encode(row.reply))
        if len(ids) >= MIN_DATASET_TOKENS and reply_len >= MIN_DATASET_TOKENS:
            usable.append((ids, reply_len))
        if len(usable) == count:
            break
    if not usable:
        raise ConfigError(
            f"--dataset-path {path}: no prompt with a reply of at least {MIN_DATASET_TOKENS} "
            "tokens to take the output length from; give --output-len N"
        )
    picked = [usable[i % len(usable)] for i in range(count)]
    return [ids for ids, _ in picked], [n for _, n in picked], len(usable)


def make_prompts(
    count: int, input_len: int, seed: int, range_ratio: float = 1.0, vocab_size: int | None = None
) -> list[list[int]]:
    """``count`` prompts of random token ids, reproducible from ``seed``: ``input_len`` each,
    or lengths drawn per ``range_ratio`` (see the module docstring)."""
    rng = random.Random(seed)
    lo, hi = TOKEN_ID_RANGE
    if vocab_size is not None:
        hi = min(hi, vocab_size)
        lo = min(lo, max(0, hi // 2))
    lens = (
        [input_len] * count if range_ratio >= 1.0 else lengths(count, input_len, range_ratio, rng)
    )
    return [[rng.randrange(lo, hi) for _ in range(n)] for n in lens]


def prompt_text(ids: list[int]) -> str:
    """A text stand-in for a token-id prompt (chat API): one short word per id."""
    return " ".join(f"w{i % 9973}" for i in ids)


def build_request(
    api: str, prompt: Prompt, output_len: int, model: str, tokenizer: Any = None
) -> Request:
    """The streaming request for ``api`` with exact output length (``ignore_eos``)."""
    known = len(prompt) if isinstance(prompt, list) else None
    if api == "native":
        key = "input_ids" if isinstance(prompt, list) else "text"
        return Request(
            "/generate",
            {
                key: prompt,
                "sampling_params": {
                    "max_new_tokens": output_len,
                    "temperature": 0.0,
                    "ignore_eos": True,
                },
                "stream": True,
            },
            known,
        )
    common: dict[str, Any] = {
        "model": model,
        "max_tokens": output_len,
        "temperature": 0.0,
        "ignore_eos": True,  # SGLang extension to the OpenAI schema
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if api == "openai":
        return Request("/v1/completions", {**common, "prompt": prompt}, known)
    if api == "chat":
        if isinstance(prompt, str):
            text = prompt
        elif tokenizer is not None:
            text = tokenizer.decode(prompt)
        else:
            text = prompt_text(prompt)
        msgs = [{"role": "user", "content": text}]
        return Request("/v1/chat/completions", {**common, "messages": msgs})
    raise ValueError(f"unknown api {api!r} (choose from {', '.join(APIS)})")

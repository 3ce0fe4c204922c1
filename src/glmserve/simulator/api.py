"""Generation endpoints: native ``/generate`` and OpenAI ``/v1/completions`` + chat.

Shapes match sglang 0.5.9: ``/generate`` streams ``data: {json}\\n\\n`` chunks whose ``text``
and ``output_ids`` are cumulative (incremental ``output_ids`` with ``--stream-output``) and
whose ``meta_info`` carries ``id, finish_reason, prompt_tokens, weight_version,
total_retractions, completion_tokens, cached_tokens`` (+ ``e2e_latency`` once finished), then
``data: [DONE]``. OpenAI streams carry one delta per chunk; with
``stream_options.include_usage`` a last chunk with ``choices: []`` and ``usage`` precedes
``[DONE]``. With ``--sim-tokens-per-chunk k`` each chunk carries k new tokens.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import TYPE_CHECKING, Any

from glmserve.simulator.engine import Request
from glmserve.simulator.httpserver import Connection, HttpRequest, Response
from glmserve.simulator.prompts import PromptCounter

if TYPE_CHECKING:
    from glmserve.simulator.server import SimServer

DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's SamplingParams default


def _err(msg: str, status: int = 400) -> Response:
    return Response.json({"error": {"message": msg}}, status)


def _finish_reason(req: Request) -> dict[str, Any] | None:
    if not req.finished:
        return None
    return {"type": "length", "length": len(req.out_ids)}


def native_payload(req: Request, created: float, incremental: bool, last_sent: int) -> dict:
    meta: dict[str, Any] = {
        "id": req.rid,
        "finish_reason": _finish_reason(req),
        "prompt_tokens": req.prompt_tokens,
        "weight_version": "default",
        "total_retractions": 0,
        "completion_tokens": len(req.out_ids),
        "cached_tokens": 0,
    }
    if req.finished:
        meta["e2e_latency"] = time.time() - created
    ids = req.out_ids[last_sent:] if incremental else list(req.out_ids)
    return {"text": "".join(req.text_parts), "output_ids": ids, "meta_info": meta}


class NativeStreamSink:
    """Writes /generate SSE chunks straight to the connection (called from the engine)."""

    __slots__ = ("conn", "created", "done", "group", "incremental", "sent")

    def __init__(self, conn: Connection, created: float, incremental: bool, group: _Group) -> None:
        self.conn = conn
        self.created = created
        self.incremental = incremental
        self.sent = 0
        self.group = group
        self.done = False

    def flush(self, req: Request, ntokens: int) -> None:
        if self.conn.closed:
            req.emit_times.extend([time.perf_counter()] * ntokens)
            return
        ids = ",".join(map(str, req.out_ids[self.sent :])) if self.incremental else req.ids_csv
        self.sent = n = len(req.out_ids)
        if req.finished:
            tail = (
                f'"finish_reason":{{"type":"length","length":{n}}},"prompt_tokens":'
                f'{req.prompt_tokens},"weight_version":"default","total_retractions":0,'
                f'"completion_tokens":{n},"cached_tokens":0,'
                f'"e2e_latency":{time.time() - self.created}}}}}\n\n'
            )
        else:
            tail = (
                f'"finish_reason":null,"prompt_tokens":{req.prompt_tokens},'
                f'"weight_version":"default","total_retractions":0,"completion_tokens":{n},'
                f'"cached_tokens":0}}}}\n\n'
            )
        # TOKEN_TEXT pieces are plain ASCII words: the text needs no JSON escaping
        chunk = (
            f'data: {{"text":"{req.text_acc}","output_ids":[{ids}],'
            f'"meta_info":{{"id":"{req.rid}",{tail}'
        )
        self.conn.write_chunk(chunk.encode(), req.emit_times, ntokens)
        if req.finished:
            self.group.finish_one()


class _Group:
    """Completion of the n requests of one HTTP call (batch /generate has several)."""

    def __init__(self, n: int) -> None:
        self.left = n
        self.fut: asyncio.Future = asyncio.get_running_loop().create_future()

    def finish_one(self) -> None:
        self.left -= 1
        if self.left <= 0 and not self.fut.done():
            self.fut.set_result(None)

    def abort_on_close(self, conn: Connection, reqs: list[Request]) -> None:
        """Client went away: drop its requests (as SGLang aborts them) and end the handler."""

        def _closed() -> None:
            for r in reqs:
                if not r.finished:
                    r.abort()
            if not self.fut.done():
                self.fut.set_result(None)

        conn.on_close.append(_closed)


class CollectSink:
    __slots__ = ("group",)

    def __init__(self, group: _Group) -> None:
        self.group = group

    def flush(self, req: Request, ntokens: int) -> None:
        req.emit_times.extend([time.perf_counter()] * ntokens)
        if req.finished:
            self.group.finish_one()


def _prompts(body: dict[str, Any], counter: PromptCounter) -> list[int] | None:
    """Prompt lengths of a /generate body (one per request), or None if there is no input."""
    if body.get("input_ids") is not None:
        ids = body["input_ids"]
        if ids and isinstance(ids[0], list):
            return [max(1, len(x)) for x in ids]
        return [max(1, len(ids))]
    text = body.get("text")
    if text is not None:
        if isinstance(text, list):
            return [counter.text(str(t)) for t in text]
        return [counter.text(str(text))]
    return None


def _sampling(body: dict[str, Any], n: int) -> list[dict[str, Any]]:
    sp = body.get("sampling_params") or {}
    if isinstance(sp, list):
        return sp if len(sp) == n else [sp[0] if sp else {}] * n
    return [sp] * n


def _check_ready(server: SimServer) -> Response | None:
    if server.engine is None:
        return _err("server is not ready", 503)
    return None


def _json_object(req: HttpRequest) -> dict[str, Any] | Response:
    """The request body as a JSON object, or the 400 response that says why it is not one."""
    try:
        body = req.json()
    except ValueError:
        return _err("invalid JSON body")
    if not isinstance(body, dict):
        return _err("request body must be a JSON object")
    return body


async def generate(server: SimServer, req: HttpRequest, conn: Connection) -> Response | None:
    bad = _check_ready(server)
    if bad:
        return bad
    body = _json_object(req)
    if isinstance(body, Response):
        return body
    lens = _prompts(body, server.prompts)
    if lens is None:
        return _err("Either text, input_ids or input_embeds should be provided.")
    sps = _sampling(body, len(lens))
    ids = body.get("input_ids")
    batch = isinstance(body.get("text"), list) or bool(ids and isinstance(ids[0], list))
    rid0 = body.get("rid")
    created = time.time()
    group = _Group(len(lens))
    stream = bool(body.get("stream"))
    incremental = bool(server.opts.server.stream_output)
    reqs: list[Request] = []
    ctx_len = server.opts.server.context_length or server.opts.model.context_len
    for i, (plen, sp) in enumerate(zip(lens, sps, strict=True)):
        max_new = int(sp.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS) or 0)
        if plen + max_new > ctx_len:
            return _err(
                f"Requested token count exceeds the model's maximum context length of "
                f"{ctx_len} tokens. You requested a total of {plen + max_new} tokens: "
                f"{plen} tokens from the input messages and {max_new} tokens for the completion."
            )
        if isinstance(rid0, list):
            rid = str(rid0[i])
        elif rid0 and len(lens) == 1:
            rid = str(rid0)
        else:
            rid = uuid.uuid4().hex
        sink = NativeStreamSink(conn, created, incremental, group) if stream else CollectSink(group)
        reqs.append(Request(rid, plen, max(1, max_new), sink))
    group.abort_on_close(conn, reqs)
    if stream:
        conn.start_stream(req)
    for r in reqs:
        server.engine.submit(r)  # type: ignore[union-attr]
    await group.fut
    if stream:
        conn.write_chunk(b"data: [DONE]\n\n")
        conn.end_stream()
        for r in reqs:
            r.release()
        return None
    outs = [native_payload(r, created, False, 0) for r in reqs]
    for r in reqs:
        r.release()
    return Response.json(outs if batch else outs[0])


# ----------------------------------------------------------------------------- OpenAI
def _delta(role: str | None = None, content: str | None = None) -> dict[str, Any]:
    """DeltaMessage as pydantic dumps it (every field, None included)."""
    return {
        "role": role,
        "content": content,
        "reasoning_content": None,
        "tool_calls": None,
        "hidden_states": None,
    }


class OpenAIStreamSink:
    """OpenAI SSE chunks as sglang 0.5.9's serving_{completions,chat}.py yield them
    (``model_dump_json()``: None fields included; ``model`` echoes the request's)."""

    __slots__ = ("chat", "conn", "created", "group", "model", "rid", "sent", "started")

    def __init__(self, conn: Connection, model: str, chat: bool, group: _Group) -> None:
        self.conn = conn
        self.model = model
        self.chat = chat
        self.created = int(time.time())
        self.sent = 0
        self.group = group
        self.rid = ""
        self.started = False

    def _chunk(self, choice: dict[str, Any]) -> bytes:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        doc = {
            "id": self.rid,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": None,
            "sglext": None,
        }
        return b"data: " + json.dumps(doc, separators=(",", ":")).encode() + b"\n\n"

    def flush(self, req: Request, ntokens: int) -> None:
        if self.conn.closed:
            req.emit_times.extend([time.perf_counter()] * ntokens)
            return
        self.rid = req.rid
        delta = "".join(req.text_parts[self.sent :])
        self.sent = len(req.out_ids)
        if not self.chat:
            choice = {
                "index": 0,
                "text": delta,
                "logprobs": None,
                "finish_reason": "length" if req.finished else None,
                "matched_stop": None,
                "hidden_states": None,
            }
            self.conn.write_chunk(self._chunk(choice), req.emit_times, ntokens)
        else:
            if not self.started:  # first chunk carries the role only
                self.started = True
                first = {"index": 0, "delta": _delta("assistant", ""), "logprobs": None,
                         "finish_reason": None, "matched_stop": None}  # fmt: skip
                self.conn.write_chunk(self._chunk(first))
            choice = {"index": 0, "delta": _delta(content=delta), "logprobs": None,
                      "finish_reason": None, "matched_stop": None}  # fmt: skip
            self.conn.write_chunk(self._chunk(choice), req.emit_times, ntokens)
            if req.finished:  # then a separate finish_reason chunk with an empty delta
                fin = {"index": 0, "delta": _delta(), "logprobs": None,
                       "finish_reason": "length", "matched_stop": None}  # fmt: skip
                self.conn.write_chunk(self._chunk(fin))
        if req.finished:
            self.group.finish_one()


def _usage(req: Request) -> dict[str, Any]:
    return {
        "prompt_tokens": req.prompt_tokens,
        "total_tokens": req.prompt_tokens + req.completion_tokens,
        "completion_tokens": req.completion_tokens,
        "prompt_tokens_details": None,
        "reasoning_tokens": 0,
    }


def _openai_error(message: str) -> Response:
    """A 400 in the shape of SGLang's OpenAI ``ErrorResponse`` (``BadRequestError``)."""
    return Response.json(
        {
            "object": "error",
            "message": message,
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        },
        400,
    )


async def openai(
    server: SimServer, req: HttpRequest, conn: Connection, chat: bool
) -> Response | None:
    bad = _check_ready(server)
    if bad:
        return bad
    media = req.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != "application/json":
        return _openai_error("Unsupported Media Type: Only 'application/json' is allowed")
    body = _json_object(req)
    if isinstance(body, Response):
        return body
    if chat:
        if not body.get("messages"):
            return _openai_error("messages is required")
        plen = server.prompts.messages(body["messages"])
    else:
        prompt = body.get("prompt")
        if prompt is None:
            return _openai_error("prompt is required")
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
            plen = len(prompt)
        elif isinstance(prompt, list):
            plen = sum(server.prompts.text(str(p)) for p in prompt)
        else:
            plen = server.prompts.text(str(prompt))
    max_new = body.get("max_completion_tokens") or body.get("max_tokens")
    max_new = int(max_new) if max_new else (DEFAULT_MAX_NEW_TOKENS if not chat else 4096)
    stream = bool(body.get("stream"))
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    model = str(body.get("model") or server.opts.served_model_name)  # SGLang echoes request.model
    group = _Group(1)
    rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
    sink: Any = OpenAIStreamSink(conn, model, chat, group) if stream else CollectSink(group)
    r = Request(rid, plen, max_new, sink)
    group.abort_on_close(conn, [r])
    if stream:
        conn.start_stream(req)
    server.engine.submit(r)  # type: ignore[union-attr]
    await group.fut
    created = int(time.time())
    if stream:
        if include_usage:
            doc = {
                "id": rid,
                "object": "chat.completion.chunk" if chat else "text_completion",
                "created": created,
                "model": model,
                "choices": [],
                "usage": _usage(r),
            }
            if chat:
                doc["sglext"] = None
            else:  # serving_completions dumps this one with exclude_none=True
                doc["usage"] = {k: v for k, v in doc["usage"].items() if v is not None}
            conn.write_chunk(b"data: " + json.dumps(doc, separators=(",", ":")).encode() + b"\n\n")
        conn.write_chunk(b"data: [DONE]\n\n")
        conn.end_stream()
        r.release()
        return None
    text = "".join(r.text_parts)
    r.release()
    if chat:
        message = {"role": "assistant", "content": text, "reasoning_content": None,
                   "tool_calls": None}  # fmt: skip
        choice: dict[str, Any] = {"index": 0, "message": message}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text}
        obj = "text_completion"
    choice.update(logprobs=None, finish_reason="length", matched_stop=None, hidden_states=None)
    return Response.json(
        {
            "id": rid,
            "object": obj,
            "created": created,
            "model": model,
            "choices": [choice],
            "usage": _usage(r),
            "metadata": None,
            "sglext": None,
        }
    )

"""OpenAI ``/v1/completions`` and ``/v1/chat/completions`` as sglang 0.5.9 serves them.

Streams carry one delta per chunk (``entrypoints/openai/serving_{completions,chat}.py``); with
``stream_options.include_usage`` a last chunk with ``choices: []`` and ``usage`` precedes
``[DONE]``. With ``--sim-tokens-per-chunk k`` each chunk carries k new tokens.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import TYPE_CHECKING, Any

from glmserve.simulator import sampling
from glmserve.simulator.engine import VOCAB_SIZE, Request
from glmserve.simulator.handlers import logprobs as lp
from glmserve.simulator.handlers.generation import (
    DEFAULT_MAX_NEW_TOKENS,
    CollectSink,
    RequestGroup,
    json_object,
    not_ready,
)
from glmserve.simulator.httpserver import Connection, HttpRequest, Response

if TYPE_CHECKING:
    from glmserve.simulator.server import SimServer


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

    __slots__ = ("chat", "conn", "created", "failed", "group", "model", "rid", "sent", "started")

    def __init__(self, conn: Connection, model: str, chat: bool, group: RequestGroup) -> None:
        self.conn = conn
        self.model = model
        self.chat = chat
        self.created = int(time.time())
        self.sent = 0
        self.group = group
        self.rid = ""
        self.started = False
        self.failed = False  # the stream ended with an error event: no usage chunk follows

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
            req.emit_times.extend([req.sent_at] * ntokens)
            return
        self.rid = req.rid
        if req.queue_aborted:
            # _handle_abort_req's output has no prompt_tokens: 0.5.9's stream generators read
            # content["meta_info"]["prompt_tokens"] first (serving_completions.py:211,
            # serving_chat.py:634), so the KeyError ends the stream as an error event
            # (serving_completions.py:362-366, serving_base.py:228-242), then [DONE]
            err = {"object": "error", "message": "'prompt_tokens'", "type": "BadRequestError",
                   "param": None, "code": 400}  # fmt: skip
            self.conn.write_chunk(b"data: " + json.dumps({"error": err}).encode() + b"\n\n")
            self.failed = True
            self.group.finish_one()
            return
        reason = _finish_type(req)
        delta = "".join(req.text_parts[self.sent :])
        self.sent = len(req.out_ids)
        if not self.chat:
            choice = {
                "index": 0,
                "text": delta,
                "logprobs": None,
                "finish_reason": reason,
                "matched_stop": None,
                "hidden_states": None,
            }
            self.conn.write_chunk(
                self._chunk(choice), req.emit_times, ntokens, req.sent_at, req.sent_gap
            )
        else:
            if not self.started:  # first chunk carries the role only
                self.started = True
                first = {"index": 0, "delta": _delta("assistant", ""), "logprobs": None,
                         "finish_reason": None, "matched_stop": None}  # fmt: skip
                self.conn.write_chunk(self._chunk(first))
            choice = {"index": 0, "delta": _delta(content=delta), "logprobs": None,
                      "finish_reason": None, "matched_stop": None}  # fmt: skip
            self.conn.write_chunk(
                self._chunk(choice), req.emit_times, ntokens, req.sent_at, req.sent_gap
            )
            if req.finished:  # then a separate finish_reason chunk with an empty delta
                fin = {"index": 0, "delta": _delta(), "logprobs": None,
                       "finish_reason": reason, "matched_stop": None}  # fmt: skip
                self.conn.write_chunk(self._chunk(fin))
        if req.finished:
            self.group.finish_one()


def _finish_type(req: Request) -> str | None:
    """The choice's finish_reason: the type of SGLang's (serving_completions.py:270-276)."""
    if not req.finished:
        return None
    return str(req.abort_reason["type"]) if req.abort_reason is not None else "length"


def _usage(req: Request) -> dict[str, Any]:
    return {
        "prompt_tokens": req.prompt_tokens,
        "total_tokens": req.prompt_tokens + req.completion_tokens,
        "completion_tokens": req.completion_tokens,
        "prompt_tokens_details": None,
        "reasoning_tokens": 0,
    }


def _openai_error(message: str, kind: str = "BadRequestError") -> Response:
    """A 400 in the shape of SGLang's OpenAI ``ErrorResponse`` (``BadRequestError``)."""
    return Response.json(
        {
            "object": "error",
            "message": message,
            "type": kind,
            "param": None,
            "code": 400,
        },
        400,
    )


async def _serve(
    server: SimServer, req: HttpRequest, conn: Connection, chat: bool
) -> Response | None:
    """One completion or chat completion: SSE chunks with ``stream``, else one JSON body."""
    bad = not_ready(server)
    if bad:
        return bad
    media = req.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != "application/json":
        return _openai_error("Unsupported Media Type: Only 'application/json' is allowed")
    body = json_object(req)
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
    if not chat and isinstance(max_new, int) and max_new <= 0:
        # CompletionRequest's validator (0.5.9 protocol.py:303-308): FastAPI's validation
        # error, answered 400 by http_server.py:409-441 (its text abridged here)
        return _openai_error("1 validation error for CompletionRequest max_tokens: Value "
                             "error, max_tokens must be positive", "Bad Request")  # fmt: skip
    max_new = int(max_new) if max_new else (DEFAULT_MAX_NEW_TOKENS if not chat else 4096)
    stream = bool(body.get("stream"))
    bad = sampling.check(
        sampling.from_openai(body, max_new), VOCAB_SIZE, server.opts.sglang_version
    )
    if bad is not None:  # SamplingParams.verify (simulator/sampling.py)
        if not stream:  # serving_completions.py:380-381 (ValueError -> 400)
            return _openai_error(bad)
        conn.start_stream(req)  # the stream's error event (serving_completions.py:362-366)
        err = {"object": "error", "message": bad, "type": "BadRequestError", "param": None,
               "code": 400}  # fmt: skip
        conn.write_chunk(b"data: " + json.dumps({"error": err}).encode() + b"\n\n")
        conn.write_chunk(b"data: [DONE]\n\n")
        conn.end_stream()
        return None
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    model = str(body.get("model") or server.opts.served_model_name)  # SGLang echoes request.model
    group = RequestGroup(1)
    rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
    sink: Any = OpenAIStreamSink(conn, model, chat, group) if stream else CollectSink(group)
    r = Request(rid, plen, max_new, sink)
    want_lp = bool(body.get("logprobs")) or (not chat and body.get("logprobs") is not None)
    if want_lp and not stream:
        prompt = None if chat else body.get("prompt")
        ids = prompt if isinstance(prompt, list) and prompt and isinstance(prompt[0], int) else None
        text = json.dumps(body["messages"]) if chat else (None if ids else str(prompt))
        lp.attach(server, r, ids, text, 0 if (body.get("echo") and not chat) else None)
    group.abort_on_close(conn, [r])
    if stream:
        conn.start_stream(req)
    server.engine.submit(r)  # type: ignore[union-attr]
    await group.fut
    created = int(time.time())
    if stream:
        if include_usage and not sink.failed:
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
    if r.queue_aborted:  # an HTTPException(503) from tokenizer_manager.py:1178-1184
        r.release()
        return Response.json({"detail": r.abort_reason["message"]}, 503)  # type: ignore[index]
    text = "".join(r.text_parts)
    top = int(body.get("top_logprobs") or 0) if chat else int(body.get("logprobs") or 0)
    logprobs = lp.openai_logprobs(r, chat, top, bool(body.get("echo")) and not chat)
    r.release()
    if chat:
        message = {"role": "assistant", "content": text, "reasoning_content": None,
                   "tool_calls": None}  # fmt: skip
        choice: dict[str, Any] = {"index": 0, "message": message}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text}
        obj = "text_completion"
    if body.get("echo") and not chat and isinstance(body.get("prompt"), str):
        choice["text"] = body["prompt"] + text  # serving_completions prepends the prompt
    choice.update(logprobs=logprobs, finish_reason=_finish_type(r), matched_stop=None,
                  hidden_states=None)  # fmt: skip
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


async def completions(server: SimServer, req: HttpRequest, conn: Connection) -> Response | None:
    return await _serve(server, req, conn, chat=False)


async def chat(server: SimServer, req: HttpRequest, conn: Connection) -> Response | None:
    return await _serve(server, req, conn, chat=True)


ROUTES = {
    "/v1/completions": (("POST",), completions),
    "/v1/chat/completions": (("POST",), chat),
}

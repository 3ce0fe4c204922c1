"""Native ``/generate`` (SGLang's own API), streamed or not, single or batched.

Shapes match sglang 0.5.9: ``/generate`` streams ``data: {json}\\n\\n`` chunks whose ``text``
and ``output_ids`` are cumulative (incremental ``output_ids`` with ``--stream-output``) and
whose ``meta_info`` carries ``id, finish_reason, prompt_tokens, weight_version,
total_retractions, completion_tokens, cached_tokens`` (+ ``e2e_latency`` once finished), then
``data: [DONE]``. With ``--sim-tokens-per-chunk k`` each chunk carries k new tokens.
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
    error,
    json_object,
    not_ready,
)
from glmserve.simulator.httpserver import Connection, HttpRequest, Response
from glmserve.simulator.prompts import PromptCounter
from glmserve.simulator.radix import text_key

if TYPE_CHECKING:
    from glmserve.simulator.server import SimServer


def _finish_reason(req: Request) -> dict[str, Any] | None:
    if not req.finished:
        return None
    if req.abort_reason is not None:
        return dict(req.abort_reason)
    return {"type": "length", "length": len(req.out_ids)}


def queue_abort_chunk(req: Request, created: float) -> bytes:
    """What a stream of a request aborted in the waiting queue gets: ``_handle_abort_req``'s
    output (0.5.9 managers/tokenizer_manager.py:2170-2188: no prompt_tokens, streamed
    output_ids only the last id), yielded before ``[DONE]`` (tokenizer_manager.py:1165-1187)."""
    meta = {"id": req.rid, "finish_reason": req.abort_reason, "weight_version": "default",
            "e2e_latency": time.time() - created, "completion_tokens": 0}  # fmt: skip
    doc = {"text": "", "output_ids": [], "meta_info": meta}
    return b"data: " + json.dumps(doc, separators=(",", ":")).encode() + b"\n\n"


def native_payload(req: Request, created: float, incremental: bool, last_sent: int) -> dict:
    meta: dict[str, Any] = {
        "id": req.rid,
        "finish_reason": _finish_reason(req),
        "prompt_tokens": req.prompt_tokens,
        "weight_version": "default",
        "total_retractions": 0,
        "completion_tokens": len(req.out_ids),
        "cached_tokens": req.cached_tokens,
    }
    if req.finished:
        meta["e2e_latency"] = time.time() - created
    ids = req.out_ids[last_sent:] if incremental else list(req.out_ids)
    return {"text": "".join(req.text_parts), "output_ids": ids, "meta_info": meta}


class NativeStreamSink:
    """Writes /generate SSE chunks straight to the connection (called from the engine)."""

    __slots__ = ("conn", "created", "done", "group", "incremental", "sent")

    def __init__(
        self, conn: Connection, created: float, incremental: bool, group: RequestGroup
    ) -> None:
        self.conn = conn
        self.created = created
        self.incremental = incremental
        self.sent = 0
        self.group = group
        self.done = False

    def flush(self, req: Request, ntokens: int) -> None:
        if self.conn.closed:
            req.emit_times.extend([req.sent_at] * ntokens)
            return
        if req.queue_aborted:
            self.conn.write_chunk(queue_abort_chunk(req, self.created))
            self.group.finish_one()
            return
        ids = ",".join(map(str, req.out_ids[self.sent :])) if self.incremental else req.ids_csv
        self.sent = n = len(req.out_ids)
        if req.finished:
            reason = (
                json.dumps(req.abort_reason, separators=(",", ":"))
                if req.abort_reason is not None
                else f'{{"type":"length","length":{n}}}'
            )
            tail = (
                f'"finish_reason":{reason},"prompt_tokens":'
                f'{req.prompt_tokens},"weight_version":"default","total_retractions":0,'
                f'"completion_tokens":{n},"cached_tokens":{req.cached_tokens},'
                f'"e2e_latency":{time.time() - self.created}}}}}\n\n'
            )
        else:
            tail = (
                f'"finish_reason":null,"prompt_tokens":{req.prompt_tokens},'
                f'"weight_version":"default","total_retractions":0,"completion_tokens":{n},'
                f'"cached_tokens":{req.cached_tokens}}}}}\n\n'
            )
        # TOKEN_TEXT pieces are plain ASCII words: the text needs no JSON escaping
        chunk = (
            f'data: {{"text":"{req.text_acc}","output_ids":[{ids}],'
            f'"meta_info":{{"id":"{req.rid}",{tail}'
        )
        self.conn.write_chunk(chunk.encode(), req.emit_times, ntokens, req.sent_at, req.sent_gap)
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


def _key(body: dict[str, Any], i: int) -> Any:
    """The i-th prompt's prefix-cache key (simulator/radix.py): ids as a tuple, text as bytes."""
    ids = body.get("input_ids")
    if ids is not None:
        return tuple(lp.pick(ids, i) if ids and isinstance(ids[0], list) else ids)
    text = body.get("text")
    if text is not None:
        return text_key(str(lp.pick(text, i)))
    return None


def _sampling(body: dict[str, Any], n: int) -> list[dict[str, Any]]:
    sp = body.get("sampling_params") or {}
    if isinstance(sp, list):
        return sp if len(sp) == n else [sp[0] if sp else {}] * n
    return [sp] * n


def _with_logprobs(server: SimServer, body: dict[str, Any], i: int, r: Request) -> str | None:
    ids = body.get("input_ids")
    if ids is not None:
        ids = ids[i] if ids and isinstance(ids[0], list) else ids
    return lp.attach(
        server, r, ids, lp.pick(body.get("text"), i), lp.pick(body.get("logprob_start_len"), i)
    )


async def generate(server: SimServer, req: HttpRequest, conn: Connection) -> Response | None:
    """``POST /generate``: one request per prompt; SSE with ``stream``, else one JSON body."""
    bad = not_ready(server)
    if bad:
        return bad
    body = json_object(req)
    if isinstance(body, Response):
        return body
    lens = _prompts(body, server.prompts)
    if lens is None:
        return error("Either text, input_ids or input_embeds should be provided.")
    sps = _sampling(body, len(lens))
    ids = body.get("input_ids")
    batch = isinstance(body.get("text"), list) or bool(ids and isinstance(ids[0], list))
    rid0 = body.get("rid")
    created = time.time()
    group = RequestGroup(len(lens))
    stream = bool(body.get("stream"))
    incremental = bool(server.opts.server.stream_output)
    reqs: list[Request] = []
    ctx_len = server.opts.server.context_length or server.opts.model.context_len
    for i, (plen, sp) in enumerate(zip(lens, sps, strict=True)):
        max_new = int(sp.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS) or 0)
        if plen + max_new > ctx_len:
            return error(
                f"Requested token count exceeds the model's maximum context length of "
                f"{ctx_len} tokens. You requested a total of {plen + max_new} tokens: "
                f"{plen} tokens from the input messages and {max_new} tokens for the completion."
            )
        bad = sampling.check(sp, VOCAB_SIZE, server.opts.sglang_version)
        if bad is not None:  # SamplingParams.verify's ValueError (simulator/sampling.py)
            if not stream:
                return error(bad)
            conn.start_stream(req)  # http_server.py:654-668: one error event, then [DONE]
            err = json.dumps({"error": {"message": bad}}, separators=(",", ":"))
            conn.write_chunk(b"data: " + err.encode() + b"\n\ndata: [DONE]\n\n")
            conn.end_stream()
            return None
        if isinstance(rid0, list):
            rid = str(rid0[i])
        elif rid0 and len(lens) == 1:
            rid = str(rid0)
        else:
            rid = uuid.uuid4().hex
        sink = NativeStreamSink(conn, created, incremental, group) if stream else CollectSink(group)
        reqs.append(Request(rid, plen, max(1, max_new), sink))
        reqs[-1].key = _key(body, i)
        if lp.pick(body.get("return_logprob"), i):
            refused = _with_logprobs(server, body, i, reqs[-1])
            if refused:
                return error(refused)
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
    queued = next((r for r in reqs if r.queue_aborted), None)
    if queued is not None:
        # tokenizer_manager.py:1165-1184: status 503 -> fastapi.HTTPException (not a
        # ValueError, so http_server.py:675-683 lets FastAPI answer {"detail": ...})
        for r in reqs:
            r.release()
        return Response.json({"detail": queued.abort_reason["message"]}, 503)  # type: ignore[index]
    outs = [native_payload(r, created, False, 0) for r in reqs]
    for r, out in zip(reqs, outs, strict=True):
        lp.native_meta(r, out["meta_info"], int(lp.pick(body.get("top_logprobs_num"), 0) or 0))
    for r in reqs:
        r.release()
    return Response.json(outs if batch else outs[0])


ROUTES = {"/generate": (("POST", "PUT"), generate)}

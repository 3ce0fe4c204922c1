"""The incremental classifier (:class:`LogDiagnoser`): one line at a time, O(1) per line."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from glmserve.diagnose.cache import (
    _ALL_SHAPE_KEYS,
    _BORING,
    _FOLD,
    _HOT,
    _MAX_FACTS,
    _MAX_SHAPE_BYTES,
    _NARROW_AFTER,
    _PROGRESS_ONLY,
    _SHAPE_MAX_BYTES,
    _block_keys,
    _shape_kind,
)
from glmserve.diagnose.hints import (
    Facts,
    _compile_hint,
    _crash_hint,
    _nccl_hint,
    _weights_hint,
    stage_hint,
)
from glmserve.diagnose.model import (
    _POST_READY_CANDIDATE_LINES,
    _RANK,
    MAX_LINE_CHARS,
    MAX_ROOT_CAUSE_CHARS,
    Category,
    Diagnosis,
    Evidence,
    State,
)
from glmserve.diagnose.normalise import _TP_TAG, _clean, _split_prefix
from glmserve.diagnose.patterns import (
    _ARG_PAIR,
    _CASCADE,
    _DICT_PAIR,
    _ERROR_LEVEL,
    _EXCEPTION,
    _FRAME,
    _FRAME_CTX,
    _GENERATE_OK,
    _KERNEL_WARMUP,
    _KEYWORDS,
    _MAX_TOTAL,
    _NATIVE_DEATH,
    _PATCH_ACTIVE,
    _PATCH_ARMED,
    _PROGRESS,
    _REPORT,
    _SELF_REPORT,
    _SERVER_ARGS,
    _SGLANG_FRAME,
    _SLURM_CANCEL,
    _SOFT_LEVEL,
    _STAGE_FRAMES,
    _TRACEBACK,
    MAX_ARGS_LINE_CHARS,
    _has_any,
    _interleaved_frames,
)
from glmserve.diagnose.progress import NewLines, moves_on
from glmserve.diagnose.rules import _HELP, _USAGE_RULE, RULES, Rule, slurm_end_hint

C = Category


@dataclass
class _Candidate:
    line: int
    text: str
    category: Category
    hint: str
    priority: int
    dooms: bool = False  # a warning-only rule of priority 3: it explains any crash after it
    native: bool = False  # a native death (abort, segfault): after an NCCL WARN, NCCL's doing
    stage: str | None = None  # the start-up stage a cut report's frames name


class LogDiagnoser:
    """Incremental classifier: ``feed`` lines in order, read ``.diagnosis`` at any time."""

    def __init__(self) -> None:
        self.lines_seen = 0
        self._phase = State.STARTING
        self._ready_line: int | None = None
        self._last_progress_line: int | None = None
        self._last_progress: str | None = None
        # Lines already seen during start-up (the watcher's stall rules): a repeat is no progress.
        self._seen = NewLines()
        self._generate_ok = 0  # native POST /generate answered (the warmup sends one)
        self._args: dict[str, str] = {}
        self._tp_size: int | None = None
        self._patches: list[str] = []
        self._patch_ranks: set[int | str] = set()
        self._frame_ctx: Category | None = None
        self._after_frame = False  # the next non-blank line is a frame's source line
        # The traceback being read: where it started (its header, or its first frame when the
        # excerpt has none) and the report marker whose exception line has not come yet.
        self._tb_start: tuple[int, str] | None = None
        self._tb_reported = False
        self._open_report: _Candidate | None = None
        self._strong: _Candidate | None = None  # best fatal rule match
        self._generic: _Candidate | None = None  # first exception / weak rule
        self._warning: _Candidate | None = None  # first non-fatal rule match
        self._marker: _Candidate | None = None  # first cascade marker (self-reports first)
        self._marker_is_report = False
        self._usage: _Candidate | None = None  # an argparse usage banner, until --help shows
        self._hard_marker = False  # a marker READY cannot undo (not just a logged traceback)
        self._crashed = False
        self._last_key: tuple[Any, ...] = (State.STARTING, None, None)
        self._evidence = False  # a line only SGLang (or a crashing Python) writes was seen
        self._shapes: dict[bytes, int] = {}  # feed_block's line-shape cache
        self._shape_bytes = 0
        # slurmstepd's "*** JOB n ... CANCELLED AT ... ***": (line, text, hint) - the scheduler
        # killed the server (EXITED unless a crash came first).
        self._slurm_end: tuple[int, str, str] | None = None

    # -- public -----------------------------------------------------------------------------

    def feed(self, line: str | bytes) -> Diagnosis | None:
        """Consume one log line; return the new diagnosis if the verdict changed, else None.

        "Changed" means a new state, or a crash verdict whose root cause was refined. A chunk
        with embedded newlines is split and counted as several lines; never raises on junk."""
        if isinstance(line, bytes):
            line = line.decode("utf-8", "replace")
        elif not isinstance(line, str):
            line = str(line)
        if "\n" in line.rstrip("\n"):
            changed: Diagnosis | None = None
            for part in line.rstrip("\n").split("\n"):
                changed = self.feed(part) or changed
            return changed
        self.lines_seen += 1
        self._feed_one(line)
        key = self._key()
        if key != self._last_key:
            self._last_key = key
            return self.diagnosis
        return None

    def feed_block(self, lines: list[bytes]) -> None:
        """Consume complete lines (no ``\\n``) in bulk: the same verdict as :meth:`feed` on each,
        at a fraction of the cost for the lines that cannot change it.

        A long serving log is millions of "Decode batch"/access-log lines that differ only in
        their numbers. Each line is reduced to its *shape* (lower case, digits folded to 0:
        no rule keyword holds a digit) and the shape's verdict is cached: a line whose shape
        holds no keyword is skipped, and once READY, of the lines that are only progress just
        the block's last one is read (it is all ``last_progress`` keeps). Everything else, and
        every line until the start-up is over, goes through :meth:`feed`'s full path."""
        base = self.lines_seen
        shapes = self._shapes
        deferred: list[int] = []
        keys = _ALL_SHAPE_KEYS
        misses = 0  # shapes not in the cache; past _NARROW_AFTER the keys are narrowed
        for i, raw in enumerate(lines):
            if len(raw) > _SHAPE_MAX_BYTES:
                kind = _HOT
            else:
                shape = raw.translate(_FOLD)
                kind = shapes.get(shape, -1)
                if kind < 0:
                    misses += 1
                    if misses == _NARROW_AFTER:
                        keys = _block_keys(lines)
                    kind = _shape_kind(shape, keys)
                    if self._shape_bytes < _MAX_SHAPE_BYTES:
                        shapes[shape] = kind
                        self._shape_bytes += len(shape) + 100  # + the dict entry, roughly
            # inside a traceback every line takes the full path (a new record ends it)
            quiet = not self._after_frame and self._tb_start is None
            if kind == _BORING and quiet:
                if not self._evidence:  # only the SGLang prefix could matter on this line
                    self._evidence = _split_prefix(_clean(raw.decode("utf-8", "replace")))[2]
                continue
            if kind == _PROGRESS_ONLY and self._phase is State.READY and quiet:
                deferred.append(i)
                continue
            self.lines_seen = base + i + 1
            self._feed_one(raw.decode("utf-8", "replace"))
        for i in reversed(deferred):
            n = base + i + 1
            if self._last_progress_line is not None and n <= self._last_progress_line:
                break
            text = _clean(lines[i].decode("utf-8", "replace"))[:MAX_LINE_CHARS]
            self._progress(_split_prefix(text)[0], n)
            if self._last_progress_line == n:
                break
        self.lines_seen = base + len(lines)
        self._last_key = self._key()

    def _feed_one(self, line: str) -> None:
        """The full path for one line (``lines_seen`` already counts it)."""
        text = _clean(line)
        if len(text) > MAX_LINE_CHARS:
            keep = MAX_ARGS_LINE_CHARS if "server_args=" in text[:400] else MAX_LINE_CHARS
            text = text[:keep]
        if "\r" in text:
            for seg in text.split("\r"):
                if seg.strip():
                    self._consume(seg)
        else:
            self._consume(text)

    @property
    def diagnosis(self) -> Diagnosis:
        """The verdict so far (a fresh object; the diagnoser keeps no reference to it)."""
        best = self._root() if self._crashed else None
        d = Diagnosis(
            state=State.CRASHED if best else self._phase,
            phase=self._phase,
            last_progress_line=self._last_progress_line,
            last_progress=self._last_progress,
            patch_ranks_active=set(self._patch_ranks),
            patches=list(self._patches),
            tp_size=self._tp_size,
            ready_line=self._ready_line,
            server_args=dict(self._args),
            sglang_log=self._evidence,
        )
        if best:
            d.category, d.line, d.root_cause = best.category, best.line, best.text
            d.hint = best.hint
        elif self._slurm_end is not None:
            d.state = State.EXITED
            d.line, d.root_cause, d.hint = self._slurm_end
        elif self._warning is not None:
            w = self._warning
            d.warning = Evidence(w.line, w.text, w.category, w.hint)
        return d

    # -- internals --------------------------------------------------------------------------

    def _key(self) -> tuple[Any, ...]:
        best = self._root() if self._crashed else None
        if best:
            return (State.CRASHED, best.category, best.line)
        if self._slurm_end is not None:
            return (State.EXITED, None, self._slurm_end[0])
        return (self._phase, None, None)

    def _facts(self) -> Facts:
        return Facts(args=self._args, phase=self._phase, frame_ctx=self._frame_ctx)

    def _root(self) -> _Candidate | None:
        warn = self._warning
        if warn is not None and warn.dooms:
            # A warning that dooms the start-up (a negative KV budget, a GPU this torch was not
            # built for) explains a later crash better than the crash's own lower-rank symptom;
            # a fatal rule's match on a WARNING-level line does not.
            strong = self._strong
            if strong is None or strong.priority < warn.priority:
                return warn
        gen = self._generic
        if (
            warn is not None
            and warn.category is C.NCCL
            and self._strong is None
            and gen is not None
            and gen.native
            and gen.line > warn.line
        ):
            return warn  # an NCCL WARN chain, then the process aborts: NCCL killed it
        return self._strong or self._generic or self._warning or self._marker

    def _consume(self, raw: str) -> None:
        body, tags, prefixed = _split_prefix(raw)
        stripped = body.strip()
        if not stripped:
            return
        n = self.lines_seen
        after_frame, self._after_frame = self._after_frame, False
        self._evidence = self._evidence or prefixed
        low = stripped.lower()
        if "cancelled at" in low:
            sm = _SLURM_CANCEL.search(stripped)
            if sm:
                if self._slurm_end is None:
                    self._slurm_end = (n, stripped[:MAX_ROOT_CAUSE_CHARS], slurm_end_hint(sm)[1])
                return
        if ("serverargs(" in low or "server_args={" in low) and _SERVER_ARGS.search(body):
            self._parse_server_args(body)
            return
        if "glmserve patch" in body:
            pa = _PATCH_ACTIVE.search(body)
            if pa:
                self._record_patch(pa, tags)
                return
        if "patches armed:" in body:
            armed = _PATCH_ARMED.search(body)
            if armed:
                for name in re.split(r"[,\s]+", armed.group("names")):
                    if name and name not in self._patches and len(self._patches) < _MAX_FACTS:
                        self._patches.append(name)
                return
        if self._usage is not None and _HELP.match(stripped):
            self._retract_usage()
            return
        if prefixed and body[:1] not in (" ", "\t") and not _TRACEBACK.search(stripped):
            self._end_traceback()  # a new log record: the traceback before it is over
        if not _has_any(low, _KEYWORDS):
            if not after_frame or prefixed:  # a logger-prefixed line is never frame source
                self._progress(body, n)
            return
        if _FRAME.match(body):
            for pat, cat in _FRAME_CTX:
                if pat.search(body):
                    self._frame_ctx = cat
            self._after_frame = True
            self._on_frame(n, stripped)
            return
        if after_frame and not prefixed and not _EXCEPTION.search(stripped):
            return  # the source line a traceback prints under a frame: code, not an error
        rule = self._match_rule(stripped)
        cascade = bool(_CASCADE.search(stripped)) and (
            rule is not None or not _REPORT.search(stripped) or bool(_TRACEBACK.search(stripped))
        )
        if rule is None and _TRACEBACK.search(stripped):
            if "Traceback" in stripped:
                self._frame_ctx = None
                self._end_traceback()
                self._tb_start = (n, stripped)
            # SGLang's own logger printing a traceback ("[ts TP0] Traceback ...") is a
            # process reporting its failure; before READY that means start-up failed.
            logged = prefixed and "Traceback" in stripped and self._phase is not State.READY
            hard = cascade or bool(_REPORT.search(stripped))
            if hard or logged:
                # A logged traceback alone is soft: SGLang also logs survivable failures with
                # one, so a later READY clears it (a real crash brings the sigquit cascade).
                self._add_marker(n, stripped, hard=hard)
                self._tb_reported = True
                if self._marker is not None and self._marker.line == n:
                    self._open_report = self._marker
            return
        if cascade:
            # A marker; a line flattened by a paste may also carry the error itself, so rules
            # still get to look at it.
            self._add_marker(n, stripped)
            if rule is None:
                return
        is_exc = bool(_EXCEPTION.search(stripped)) or bool(_REPORT.search(stripped))
        self._evidence = self._evidence or rule is not None or is_exc
        if is_exc:
            self._end_traceback()  # its exception line: the report is complete
        if rule is not None:
            rm, r = rule
            cand = _Candidate(
                n,
                stripped[:MAX_ROOT_CAUSE_CHARS],
                r.category,
                r.hint(rm, self._facts()),
                r.priority,
            )
            if is_exc:
                self._frame_ctx = None
            soft = bool(_SOFT_LEVEL.match(stripped)) and r.category is not C.PATCH_FAILED
            errorish = is_exc or bool(_ERROR_LEVEL.search(stripped))
            if not r.fatal or soft or (r.needs_error and not errorish):
                cand.dooms = not r.fatal and r.priority >= 3
                if self._stale(self._warning, n):
                    self._warning = cand
                self._maybe_crash(fatal=False)
            elif r.weak or (r.before_ready and self._phase is State.READY):
                if self._stale(self._generic, n):
                    cand.native = bool(_NATIVE_DEATH.search(stripped))
                    self._generic = cand
                    if r is _USAGE_RULE:
                        self._usage = cand
                self._maybe_crash(fatal=False, exception=True)
            else:
                if self._strong is None or cand.priority > self._strong.priority:
                    self._strong = cand
                self._maybe_crash(fatal=True)
            return
        if is_exc:
            cat = self._frame_ctx or C.CRASH
            if self._stale(self._generic, n):
                self._generic = _Candidate(
                    n, stripped[:MAX_ROOT_CAUSE_CHARS], cat, self._ctx_hint(cat, stripped), 0
                )
                self._generic.native = bool(_NATIVE_DEATH.search(stripped))
            self._frame_ctx = None
            self._maybe_crash(fatal=False, exception=True)
            return
        if _interleaved_frames(stripped):
            self._after_frame = True
            self._on_frame(n, stripped)
            return
        self._progress(body, n)

    def _on_frame(self, n: int, text: str) -> None:
        """A traceback frame. Output that is only a traceback through SGLang's code (no logger
        prefix, no "hit an exception" line, perhaps no header) is a process reporting its
        failure; while its exception line is missing, the outermost start-up stage among its
        frames names the category (issue 20: such output was "not an SGLang log")."""
        if self._tb_start is None:
            self._tb_start = (n, text)
        if not self._tb_reported and _SGLANG_FRAME.search(text) and self._phase is not State.READY:
            start, start_text = self._tb_start
            self._add_marker(start, start_text, hard=False, report=True)
            self._tb_reported = True
            if self._marker is not None and self._marker.line == start:
                self._open_report = self._marker
        rep = self._open_report
        if rep is None or rep.stage is not None:
            return
        for pat, cat, stage in _STAGE_FRAMES:
            if pat.search(text):
                rep.stage, rep.category = stage, cat
                rep.hint = stage_hint(cat, stage, rep.text, self._facts())
                return

    def _end_traceback(self) -> None:
        self._tb_start, self._tb_reported, self._open_report = None, False, None

    def _stale(self, cand: _Candidate | None, n: int) -> bool:
        """May a new candidate replace ``cand``? Only if there is none, or - after READY, with
        no crash yet - if it is an old per-request error that the server survived."""
        if cand is None:
            return True
        return (
            not self._crashed
            and self._phase is State.READY
            and n - cand.line > _POST_READY_CANDIDATE_LINES
        )

    def _ctx_hint(self, cat: Category, line: str) -> str:
        whole = re.match(r"(?P<msg>.*)", line)
        assert whole is not None
        facts = self._facts()
        if cat is C.WEIGHT_LOADING:
            return _weights_hint(whole, facts)
        if cat is C.BAD_ARGS:
            return (
                "SGLang's ServerArgs rejected the flag combination ("
                + line[:160]
                + "): fix the profile; `glmserve check` validates it."
            )
        if cat is C.COMPILE_ERROR:
            return _compile_hint(whole, facts)
        if cat is C.NCCL:
            return _nccl_hint(whole, facts)
        return _crash_hint(line, facts)

    def _match_rule(self, text: str) -> tuple[re.Match[str], Rule] | None:
        for r in RULES:
            m = r.pattern.search(text)
            if m:
                return m, r
        return None

    def _retract_usage(self) -> None:
        """The usage banner was ``--help`` output, not a rejected command line: no crash."""
        if self._generic is self._usage:
            self._generic = None
            if not (self._strong or self._warning or self._marker):
                self._crashed = False
        self._usage = None

    def _add_marker(
        self, n: int, text: str, *, hard: bool = True, report: bool | None = None
    ) -> None:
        self._evidence = True
        self._hard_marker = self._hard_marker or hard
        report = bool(_SELF_REPORT.search(text)) if report is None else report
        if self._marker is None or (report and not self._marker_is_report):
            self._marker_is_report = report
            if "Killed" in text or "warmup" in text:
                hint = _crash_hint(text, self._facts())
            elif report:
                hint = (
                    "a process reported a failure but its exception line is not in the log "
                    "(cut off, or another rank's output interleaved): read the full log around "
                    "this line; --log-level debug and CUDA_LAUNCH_BLOCKING=1 narrow it down."
                )
            else:
                hint = (
                    "a child process died but the log holds no error line for it: read the "
                    "lines above; a silent SIGKILL is often the host OOM killer (dmesg)."
                )
            self._marker = _Candidate(n, text[:MAX_ROOT_CAUSE_CHARS], C.CRASH, hint, 0)
        self._crashed = True

    def _maybe_crash(self, *, fatal: bool, exception: bool = False) -> None:
        if self._crashed:
            return
        if self._phase is State.READY:
            # Per-request errors are logged with tracebacks while the server keeps serving:
            # after READY only a fatal rule or a cascade marker proves a crash.
            if fatal:
                self._crashed = True
            return
        if fatal or exception:
            self._crashed = True

    def _progress(self, body: str, n: int) -> None:
        low = body.lower()
        for keys, pat, state in _PROGRESS:
            if not _has_any(low, keys) or not pat.search(body):
                continue
            if state is State.WARMUP and _KERNEL_WARMUP.search(body):
                state = None
            if pat is _GENERATE_OK:
                self._generate_ok += 1
                state = State.READY if self._generate_ok >= 2 else None
            # Uvicorn and "warmup" lines are any web server's words; the others are SGLang's.
            self._evidence = self._evidence or state is not State.WARMUP
            moved = False
            if state is not None and _RANK[state] > _RANK[self._phase]:
                moved = True
                self._phase = state
                if state is State.READY:
                    self._ready_line = n
                    self._on_ready()
            # During start-up "last progress" follows the watcher's stall rules (shared code):
            # another rank's copy of a line, retry chatter and HTTP access lines (the launcher's
            # own polls) do not move it; a phase change always does. Once READY the stall
            # budgets are over and every serving line counts (feed_block reads only the last).
            if moved or self._phase is State.READY or moves_on(body, self._seen):
                self._last_progress_line = n
                self._last_progress = body.strip()[:200]
            mt = _MAX_TOTAL.search(body) if "max_total_num_tokens" in low else None
            if mt:
                self._args.setdefault("max_running_requests_effective", mt.group(2))
            return

    def _on_ready(self) -> None:
        """READY proves that exceptions (and tracebacks SGLang merely logged) seen before it
        were not fatal - unless a cascade marker says a child died."""
        # uvicorn exits after a failed bind (server.py startup: logger.error(exc); await
        # lifespan.shutdown(); sys.exit(1)), but SGLang's lifespan first joins its warmup
        # thread, which polls --port and so may warm up whatever server holds it and log
        # "fired up and ready to roll" (srt/entrypoints/http_server.py lifespan,
        # _execute_server_warmup): that READY is another server's, never this one's.
        port_taken = self._strong is not None and self._strong.category is C.PORT_IN_USE
        if not self._hard_marker and not port_taken:
            self._crashed = False
            self._strong = self._generic = self._warning = self._marker = None
            self._marker_is_report = False

    def _parse_server_args(self, body: str) -> None:
        # Evidence only as SGLang logs it (the message starts with it), not quoted in prose.
        self._evidence = self._evidence or body.lstrip().startswith(("server_args=", "ServerArgs("))
        pairs = _DICT_PAIR if "server_args={" in body else _ARG_PAIR
        for k, v in pairs.findall(body):
            if k not in self._args and len(self._args) < _MAX_FACTS:
                self._args[k] = v.strip("'\"") if v[:1] in "'\"" else v
        for key in ("tp_size", "tensor_parallel_size"):
            v = self._args.get(key)
            if v and v.isdigit():
                self._tp_size = int(v)
                break

    def _record_patch(self, m: re.Match[str], tags: str) -> None:
        if len(self._patch_ranks) >= _MAX_FACTS:  # memory stays bounded on any input
            return
        name = m.group("name")
        if name not in self._patches and len(self._patches) < _MAX_FACTS:
            self._patches.append(name)
        tp = _TP_TAG.search(tags)
        inner = m.group("inner")
        if tp:
            self._patch_ranks.add(int(tp.group(1)))
            return
        r = re.search(r"\b(?:tp_)?rank[ =:]?(\d+)", inner)
        if r:
            self._patch_ranks.add(int(r.group(1)))
            return
        pid = re.search(r"\bpid[ =:]?(\d+)", inner)
        self._patch_ranks.add(f"pid{pid.group(1)}" if pid else f"line{self.lines_seen}")

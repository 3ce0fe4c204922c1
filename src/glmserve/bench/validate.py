"""Every flag-level check of a bench, before any server is asked: bounds that keep a bench
finite and the client box alive, the URL's shape, and the workload flags
(``bench.gsp_bench.check_workload``). One-line ``ConfigError``s naming the flag.

``validate_settings`` runs once per command (``BenchOptions.plan()``; ``run_bench`` is told so)."""

from __future__ import annotations

import math

from glmserve.bench.settings import BenchSettings, Gates
from glmserve.errors import ConfigError

# Bounds of bench's options (README "Benchmark metric definitions", "Limits"). Each guards
# against a value that would not fail but never end, or exhaust the client box:
MAX_SECONDS = 7 * 24 * 3600  # --duration, --stall-timeout, an open-loop schedule: 7 days
# A closed level spawns one task per slot before the first request: 10,000,000 slots with
# --num-prompts 1 took minutes and gigabytes before sending anything. 100,000 is 24x the
# highest level measured (4,096 streams, README) and starts in about a second.
MAX_CONCURRENCY = 100_000
MAX_WORKERS = 256  # client processes per level; each is a forked Python with its own loop
MAX_RATE_SWEEP = 100  # rates between synchronous and all-at-once (guidellm's default is 10)
# Gamma gaps of shape B vary by 1/sqrt(B): 3% at 1000, already a fixed schedule; far above,
# random.gammavariate overflows (inf -> "alpha and beta must be > 0.0").
MAX_BURSTINESS = 1000.0
# Token lengths and counts: prompts are built before the first request, as Python lists of
# token ids (~36 bytes a token), so these bound the client's memory: --input-len 10**9 was a
# MemoryError, --output-len 10**20 a TypeError deep in the JSON encoder (exit 70).
MAX_LEN = 1 << 20  # tokens per prompt or reply: 1M, beyond any served context today
MAX_PROMPT_TOKENS = 20_000_000  # every prompt built for a bench (~0.7 GB of ids)
MAX_PROMPTS = 1_000_000  # requests per level (bench_serving's runs are thousands)
MAX_WARMUP = 10_000


def _finite(flag: str, value: float | None, high: float | None = None, what: str = "") -> None:
    """A float option is finite, > 0 and at most ``high``: NaN passes every ``<= 0`` check
    (it compares false), and inf or 1e308 seconds is a bench that never ends."""
    if value is None:
        return
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{flag}: expected a finite number > 0{what}, got {value:g}")
    if high is not None and value > high:
        raise ConfigError(f"{flag}: at most {high:g}{what}, got {value:g}")


def _check_brackets(url: str) -> None:
    """An IPv6 host's ``[`` left open: httpx reads the address's last ``:1`` as a port and
    says "Invalid port: ':1'", which names the wrong fault."""
    authority = url.split("://", 1)[-1]
    for stop in "/?#":
        authority = authority.split(stop, 1)[0]
    opened, closed = authority.find("["), authority.find("]")
    if opened >= 0 and closed < opened:
        raise ConfigError(
            f"--url {url!r}: the IPv6 address after '[' has no closing ']' "
            "(expected http://[ADDRESS]:PORT)"
        )
    if closed >= 0 and opened < 0:
        raise ConfigError(
            f"--url {url!r}: a ']' with no '[' before it (expected http://[ADDRESS]:PORT)"
        )


def check_base_url(url: str) -> None:
    """``--url``: http(s), a host, a port 1-65535, no query or fragment (paths are appended
    to it). A URL httpx cannot parse, or one that could never connect (``foo``, ``ftp://x``),
    is a usage error naming the flag, not "cannot reach server" or a crash."""
    import httpx

    _check_brackets(url)
    try:
        parsed = httpx.URL(url)
        port = parsed.port
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        raise ConfigError(f"--url {url!r}: not a URL ({exc})") from exc
    if parsed.userinfo:
        # Not sent by the client, and the URL is stored with the result (settings, meta, the
        # command line), exported and rendered into reports: never echo or keep a password.
        shown = str(parsed.copy_with(username=None, password=None))
        raise ConfigError(
            f"--url {shown}: user:password in the URL is refused (glmserve's client does not "
            "send it, and the URL is stored with the result)"
        )
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ConfigError(f"--url {url!r}: expected http://HOST:PORT or https://HOST:PORT")
    if port is not None and not 1 <= port <= 65535:
        raise ConfigError(f"--url {url!r}: port {port} is not within 1-65535")
    if parsed.query or parsed.fragment:
        raise ConfigError(f"--url {url!r}: no query or fragment; give the server's base URL")


def validate_settings(s: BenchSettings, gates: Gates) -> None:
    """Flag-level checks with one-line errors naming the flag, before any server is asked.

    Every float is checked finite: a NaN or inf that got through used to run forever
    (``--duration``), crash in the arrival schedule (``--burstiness``), or be written into the
    stored JSON (``--slo``)."""
    from glmserve.bench.gsp_bench import check_workload
    from glmserve.bench.trace_replay import resolve

    check_workload(s)  # --dataset-name generated-shared-prefix/mooncake, --gsp-*, --trace-*
    s = resolve(s)  # a trace replay's rate is the trace's: the checks below see it
    mi = s.metrics_interval
    if not math.isfinite(mi) or mi < 0 or mi > 3600:
        raise ConfigError(f"--metrics-interval must be 0 (off) to 3600 seconds, got {mi}")
    if s.base_url:
        check_base_url(s.base_url)
    if s.mode not in ("decode", "concurrency", "rate"):
        raise ConfigError(f"--mode: expected decode, concurrency or rate, got {s.mode!r}")
    if s.rate_sweep is not None and not 1 <= s.rate_sweep <= MAX_RATE_SWEEP:
        raise ConfigError(
            f"--rate-sweep: expected the number of rates to try, 1 to {MAX_RATE_SWEEP}, "
            f"got {s.rate_sweep}"
        )
    if s.mode == "rate" and not (s.request_rate or s.rate_sweep):
        raise ConfigError("--mode rate needs --request-rate or --rate-sweep")
    if s.rate_sweep and s.request_rate:
        raise ConfigError("--rate-sweep picks its own rates: leave out --request-rate")
    if s.api not in ("native", "openai", "chat"):
        raise ConfigError(f"--api: expected native, openai or chat, got {s.api!r}")
    if not s.concurrency or any(c < 1 for c in s.concurrency):
        raise ConfigError("--concurrency: expected positive integers like 1,4,16")
    if max(s.concurrency) > MAX_CONCURRENCY:
        raise ConfigError(f"--concurrency: at most {MAX_CONCURRENCY:,} streams per level, "
                          f"got {max(s.concurrency):,}")  # fmt: skip
    for flag, n in (("--input-len", s.input_len), ("--output-len", s.output_len)):
        if n < 1:  # the flag given, not both: the other one may be fine
            raise ConfigError(f"{flag} must be at least 1, got {n}")
        if n > MAX_LEN:
            raise ConfigError(f"{flag}: at most {MAX_LEN:,} tokens per request, got {n:,}")
    if s.num_prompts is not None and s.num_prompts < 1:
        raise ConfigError("--num-prompts must be at least 1")
    if s.num_prompts is not None and s.num_prompts > MAX_PROMPTS:
        raise ConfigError(
            f"--num-prompts: at most {MAX_PROMPTS:,} per level, got {s.num_prompts:,}"
        )
    if s.warmup < 0:
        raise ConfigError(f"--warmup: expected 0 or more requests, got {s.warmup}")
    if s.warmup > MAX_WARMUP:
        raise ConfigError(f"--warmup: at most {MAX_WARMUP:,} requests, got {s.warmup:,}")
    if s.workers is not None and not 1 <= s.workers <= MAX_WORKERS:
        raise ConfigError(f"--workers: expected 1 to {MAX_WORKERS} client processes, "
                          f"got {s.workers}")  # fmt: skip
    _finite("--duration", s.duration, MAX_SECONDS, " s")
    _finite("--stall-timeout", s.stall_timeout, MAX_SECONDS, " s")
    if s.request_rate is not None and any(math.isnan(r) or not r > 0 for r in s.request_rate):
        raise ConfigError("--request-rate: expected positive rates (req/s) like 5,10,inf")
    _finite("--burstiness", s.burstiness, MAX_BURSTINESS, " (1 = Poisson arrivals)")
    for r in s.request_rate or []:
        n = s.prompts_for(s.max_concurrency or 0, r) or 1
        if math.isfinite(r) and (n - 1) / r > MAX_SECONDS:
            raise ConfigError(f"--request-rate {r:g}: {n} requests would take over 7 days "
                              "to offer")  # fmt: skip
    if s.max_concurrency is not None and not 1 <= s.max_concurrency <= MAX_CONCURRENCY:
        raise ConfigError(f"--max-concurrency: expected 1 to {MAX_CONCURRENCY:,}, "
                          f"got {s.max_concurrency}")  # fmt: skip
    if s.max_concurrency is not None and not (s.request_rate or s.rate_sweep):
        raise ConfigError("--max-concurrency caps open-loop load: give --request-rate too "
                          "(closed-loop levels are --concurrency)")  # fmt: skip
    need = s.prompts_needed()
    if need > MAX_PROMPTS:
        raise ConfigError(f"{need:,} prompts to build (--num-prompts/--duration x rate): at most "
                          f"{MAX_PROMPTS:,}")  # fmt: skip
    if not s.dataset_path and not s.dataset_name and need * s.input_len > MAX_PROMPT_TOKENS:
        raise ConfigError(
            f"--input-len {s.input_len:,} x {need:,} prompts is {need * s.input_len:,} tokens to "
            f"build; at most {MAX_PROMPT_TOKENS:,} (fewer prompts, or --duration cycles them)"
        )
    if not 0.0 <= s.range_ratio() <= 1.0:  # NaN fails this too
        raise ConfigError("--random-range-ratio must be within 0..1")
    if s.rate_sweep and s.range_ratio() != 1.0:
        # Its saturation rule reads completion rates and latency trends within a level;
        # mixed lengths stretch both (an audit: every rate "saturated" at 0.23x capacity).
        raise ConfigError(
            "--rate-sweep compares requests of one shape: leave --random-range-ratio at 1"
        )
    if s.dataset_path is not None:
        from glmserve.bench.workload import check_dataset_file

        check_dataset_file(s.dataset_path)
    _finite("--min-decode-tok-s", gates.min_decode_tok_s)
    _finite("--max-ttft-ms", gates.max_ttft_ms)
    for c, _ in gates.min_output_tok_s or []:
        if c not in s.concurrency:
            raise ConfigError(
                f"--min-output-tok-s {c}:...: concurrency {c} is not in --concurrency"
            )

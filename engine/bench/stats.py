"""Figures from measured requests: percentiles, throughput, cost; and the server's peak memory.

Throughput counts the output tokens of the requests that succeeded, over the wall time of the level
(from its first request sent to its last answer received). Failed requests are counted and grouped
by reason, never dropped silently; their partial output is not counted as throughput.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from engine.bench.client import RequestResult

log = logging.getLogger(__name__)

PERCENTILES = (50, 95, 99)
DEFAULT_WATTS = 65.0
DEFAULT_PRICE_PER_KWH = 0.30


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile with linear interpolation between ranks (numpy's default)."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def distribution(values: Sequence[float]) -> dict[str, float | None]:
    """Mean, p50/p95/p99 and max of ``values`` (all None when there are none)."""
    out: dict[str, float | None] = {"mean": sum(values) / len(values) if values else None}
    for q in PERCENTILES:
        out[f"p{q}"] = percentile(values, q)
    out["max"] = max(values) if values else None
    out["n"] = len(values)
    return out


def cost_per_million(
    tokens_per_s: float | None, *, watts: float, price_per_kwh: float
) -> dict[str, float | None]:
    """Energy (kWh) and cost of a million output tokens at ``tokens_per_s`` drawing ``watts``."""
    if not tokens_per_s:
        return {"kwh_per_million_output_tokens": None, "cost_per_million_output_tokens": None}
    hours = 1e6 / tokens_per_s / 3600.0
    kwh = watts * hours / 1000.0
    return {"kwh_per_million_output_tokens": kwh, "cost_per_million_output_tokens": kwh * price_per_kwh}


def summarize(
    results: Sequence[RequestResult],
    *,
    duration: float | None,
    watts: float,
    price_per_kwh: float,
) -> dict[str, Any]:
    """Every figure of one level from its requests."""
    ok = [r for r in results if r.ok]
    failed = [r for r in results if not r.ok]
    out_tokens = sum(r.output_tokens for r in ok)
    prompt_known = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
    tps = out_tokens / duration if duration else None
    sources = Counter(r.token_source for r in ok)
    return {
        "requests": len(results),
        "completed": len(ok),
        "failed": len(failed),
        "errors": dict(Counter(r.error or "unknown" for r in failed).most_common()),
        "duration_s": duration,
        "output_tokens": out_tokens,
        "prompt_tokens": sum(prompt_known) if prompt_known else None,
        "output_tokens_per_request": distribution([float(r.output_tokens) for r in ok]),
        "prompt_tokens_per_request": distribution([float(x) for x in prompt_known]),
        "requested_tokens_delivered": (out_tokens / sum(r.max_tokens for r in ok)) if ok else None,
        "token_source": sources.most_common(1)[0][0] if sources else None,
        "output_throughput_tok_s": tps,
        "total_throughput_tok_s": ((out_tokens + sum(prompt_known)) / duration)
        if duration and prompt_known
        else None,
        "request_throughput_req_s": len(ok) / duration if duration else None,
        "ttft_s": distribution([r.ttft for r in ok if r.ttft is not None]),
        "tpot_s": distribution([t for r in ok if (t := r.tpot) is not None]),
        "itl_s": distribution([x for r in ok for x in r.itl]),
        "e2e_s": distribution([r.e2e for r in ok if r.e2e is not None]),
        **cost_per_million(tps, watts=watts, price_per_kwh=price_per_kwh),
        **draft_figures(ok),
        **prefix_cache_figures(ok),
    }


def prefix_cache_figures(ok: Sequence[RequestResult]) -> dict[str, Any]:
    """How much of a level's prompts the server's prefix cache held (None where the server does not say): a
    first-token time is only comparable with another when their cache hits are."""
    told = [r for r in ok if r.cached_tokens is not None and r.prompt_tokens]
    if not told:
        return {"cached_prompt_tokens": None, "prefix_cache_hit_rate": None}
    cached = sum(r.cached_tokens or 0 for r in told)
    return {"cached_prompt_tokens": cached, "prefix_cache_hit_rate": cached / sum(r.prompt_tokens or 0 for r in told)}


def draft_figures(ok: Sequence[RequestResult]) -> dict[str, Any]:
    """Speculative decoding over a level's answers: tokens drafted and kept, the share of drafted tokens
    kept, and the share of the output that came from kept drafts (None where the server does not say)."""
    told = [r for r in ok if r.draft_tokens is not None]
    if not told:
        return {"draft_tokens": None, "accepted_draft_tokens": None, "draft_keep_rate": None, "drafted_output_share": None}
    drafted = sum(r.draft_tokens or 0 for r in told)
    kept = sum(r.accepted_draft_tokens or 0 for r in told)
    output = sum(r.output_tokens for r in told)
    return {
        "draft_tokens": drafted,
        "accepted_draft_tokens": kept,
        "draft_keep_rate": kept / drafted if drafted else None,
        "drafted_output_share": kept / output if output else None,
    }


def find_listening_pid(url: str) -> int | None:
    """The pid of the local process listening on ``url``'s port, or None (remote, or not permitted)."""
    import psutil

    from engine.bench.servers import is_local

    if not is_local(url):
        return None
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, PermissionError, OSError):
        conns = None
    if conns is not None:
        for c in conns:
            if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
                return c.pid
    # Where the system-wide table is closed (macOS without root), look through our own user's processes.
    for proc in psutil.process_iter():
        try:
            for c in proc.net_connections(kind="tcp"):
                if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port:
                    return proc.pid
        except (psutil.Error, OSError):
            continue
    return None


class MemorySampler:
    """Samples the resident memory of a process and its children in a thread; keeps the peak.

    Args:
        pid: The server's process.
        interval: Seconds between samples.
    """

    def __init__(self, pid: int, *, interval: float = 0.1) -> None:
        import psutil

        self.pid = pid
        self.interval = interval
        self.peak: int | None = None
        self._proc = psutil.Process(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"rss-{pid}", daemon=True)

    def sample(self) -> int | None:
        import psutil

        try:
            total = self._proc.memory_info().rss
            for child in self._proc.children(recursive=True):
                try:
                    total += child.memory_info().rss
                except psutil.Error:
                    continue
        except psutil.Error:
            return None
        if self.peak is None or total > self.peak:
            self.peak = total
        return total

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def start(self) -> MemorySampler:
        self.sample()
        self._thread.start()
        return self

    def stop(self) -> int | None:
        """Stop sampling; the peak in bytes (None if the process could not be read)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self.sample()
        return self.peak

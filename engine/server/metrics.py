"""Prometheus metrics of one server instance (its own registry: no process globals)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from engine.server.request_log import RequestLog

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class _EngineGauges:
    """Reads running/waiting requests from the engines at scrape time, each load once (names that share weights
    under the first of them)."""

    def __init__(self, stats: Callable[[], dict]) -> None:
        self._stats = stats

    def collect(self):
        stats = self._stats()
        running = GaugeMetricFamily("hearth_requests_running", "Requests being generated", labels=["model"])
        waiting = GaugeMetricFamily("hearth_requests_waiting", "Requests waiting for a slot", labels=["model"])
        hit = GaugeMetricFamily("hearth_prefix_cache_hit_rate", "Share of prompt tokens served from cache", labels=["model"])
        drafted = CounterMetricFamily("hearth_draft_tokens", "Tokens drafted by speculative decoding", labels=["model"])
        kept = CounterMetricFamily(
            "hearth_accepted_draft_tokens", "Drafted tokens the model agreed with and kept", labels=["model"]
        )
        for model, s in stats.items():
            running.add_metric([model], float(s.get("running", 0)))
            waiting.add_metric([model], float(s.get("waiting", 0)))
            if "prefix_cache_hit_rate" in s:
                hit.add_metric([model], float(s["prefix_cache_hit_rate"]))
            if "draft_tokens" in s:
                drafted.add_metric([model], float(s["draft_tokens"]))
                kept.add_metric([model], float(s.get("accepted_draft_tokens", 0)))
        yield running
        yield waiting
        yield hit
        yield drafted
        yield kept


class ServerMetrics:
    """Request and token counters, TTFT and inter-token latency histograms."""

    def __init__(self, engine_stats: Callable[[], dict]) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.ttft = Histogram("hearth_time_to_first_token_seconds", "Time to first token", buckets=LATENCY_BUCKETS, registry=r)
        self.itl = Histogram("hearth_inter_token_latency_seconds", "Time between tokens", buckets=LATENCY_BUCKETS, registry=r)
        self.prompt_tokens = Counter("hearth_prompt_tokens", "Prompt tokens processed", registry=r)
        self.generation_tokens = Counter("hearth_generation_tokens", "Tokens generated", registry=r)
        self.requests = Counter("hearth_requests", "Finished requests by outcome", ["status"], registry=r)
        self.in_flight = 0
        self.request_log = RequestLog()  # each finished request, for GET /api/log/stream
        r.register(_EngineGauges(engine_stats))

    def request_started(self) -> None:
        self.in_flight += 1

    def request_finished(self, status: str) -> None:
        self.in_flight = max(0, self.in_flight - 1)
        self.requests.labels(status=status).inc()

    def observe_ttft(self, seconds: float) -> None:
        self.ttft.observe(seconds)

    def observe_itl(self, seconds: float) -> None:
        self.itl.observe(seconds)

    def count_tokens(self, prompt: int, generated: int) -> None:
        self.prompt_tokens.inc(prompt)
        self.generation_tokens.inc(generated)

    def render(self) -> bytes:
        return generate_latest(self.registry)

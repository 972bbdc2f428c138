"""`hearth bench`: an honest serving benchmark for Hearth and any OpenAI-compatible server.

workload (what to send) -> runner (how: levels, warm-up, interleaving) -> client (one timed
streaming request) -> stats (percentiles, throughput, memory, cost) -> report (JSON, Markdown, plots).
"""

from engine.bench.errors import BenchError, ServerUnreachable

__all__ = ["BenchError", "ServerUnreachable"]

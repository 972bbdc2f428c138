"""Drives the servers through the levels: a warm-up each, then every level on every server in turn.

A level is either a fixed number of requests kept in flight (closed loop: each of ``c`` workers sends
its next request when its last one ends) or a Poisson stream of arrivals at a rate (open loop).
With several servers the order is A B A B ...: each level runs on every server before the next level,
so a drift of the machine (heat, another process) falls on all of them alike.

Results land in :attr:`BenchRunner.levels` as they come, so an interrupted run keeps what it measured.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from engine.bench.client import ChatClient, RequestResult, send
from engine.bench.servers import ServerInfo
from engine.bench.stats import MemorySampler
from engine.bench.workload import BenchRequest

CLOSE_SECONDS = 5.0  # how long an interrupted run waits for a connection to close


def _on_ctrl_c(loop: asyncio.AbstractEventLoop, callback) -> bool:
    """Call ``callback`` on Ctrl-C in place of asyncio's own handling (which only cancels the task, and an HTTP
    stack can swallow a cancellation); False where the loop cannot take signal handlers (Windows, a thread), or
    where Ctrl-C is not Python's to handle (ignored, as in a shell's background job, or taken by the caller)."""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return False
    try:
        loop.add_signal_handler(signal.SIGINT, callback)
    except (NotImplementedError, RuntimeError, ValueError):
        return False
    return True

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RunPlan:
    """What to run: the levels, how many requests each, and how to send them."""

    mode: str  # "concurrency" | "rate"
    levels: tuple[float, ...]
    requests: tuple[int, ...]  # per level
    warmup: int = 2
    seed: int = 0
    temperature: float = 0.0
    ignore_eos: bool = True
    timeout: float = 600.0
    extra_body: tuple[tuple[str, Any], ...] = ()


@dataclass(eq=False)
class LevelRun:
    """One level on one server: its requests as they finish, and the server's peak memory."""

    server: str
    level: float
    requests_planned: int
    results: list[RequestResult] = field(default_factory=list)
    started: float | None = None
    finished: float | None = None
    peak_rss_bytes: int | None = None
    complete: bool = False

    @property
    def duration(self) -> float | None:
        """Seconds from the first request sent to the last answer received (so far)."""
        if self.started is None or not self.results:
            return None
        end = max(r.start + (r.e2e or 0.0) for r in self.results)
        return end if end > 0 else None


class RunObserver(Protocol):
    def warmup_started(self, server: str, total: int) -> None: ...
    def warmup_finished(self, server: str, results: list[RequestResult]) -> None: ...
    def level_started(self, run: LevelRun) -> None: ...
    def request_done(self, run: LevelRun, result: RequestResult) -> None: ...
    def level_finished(self, run: LevelRun) -> None: ...


class _Silent:
    def warmup_started(self, server: str, total: int) -> None:
        pass

    def warmup_finished(self, server: str, results: list[RequestResult]) -> None:
        pass

    def level_started(self, run: LevelRun) -> None:
        pass

    def request_done(self, run: LevelRun, result: RequestResult) -> None:
        pass

    def level_finished(self, run: LevelRun) -> None:
        pass


class BenchRunner:
    """Runs ``plan`` with ``workload`` against ``servers``.

    Args:
        servers: The servers, first one the baseline.
        plan: Levels, request counts and request settings.
        workload: Requests; level ``i`` sends the ``plan.requests[i]`` after those of the levels before it (every
            server the same ones), or the first ones when there are not that many (:meth:`level_requests`).
        warmup_workload: Requests sent (and not measured) to each server before the first level.
        api_key: Bearer token for every server (``api_keys`` overrides it per label).
        observer: Told about progress (the command's progress bars).
    """

    def __init__(
        self,
        servers: Sequence[ServerInfo],
        plan: RunPlan,
        workload: Sequence[BenchRequest],
        *,
        warmup_workload: Sequence[BenchRequest] = (),
        api_key: str | None = None,
        api_keys: dict[str, str] | None = None,
        observer: RunObserver | None = None,
    ) -> None:
        self.servers = list(servers)
        self.plan = plan
        self.workload = list(workload)
        self.warmup_workload = list(warmup_workload)
        self.api_key = api_key
        self.api_keys = api_keys or {}
        self.observer = observer or _Silent()
        self.levels: list[LevelRun] = []
        self.warmups: dict[str, list[RequestResult]] = {}
        self.interrupted = False  # Ctrl-C: no request starts after it

    def _client(self, server: ServerInfo) -> ChatClient:
        return ChatClient(server.url, self.api_keys.get(server.label, self.api_key), self.plan.timeout)

    async def run(self) -> None:
        """Warm up every server, then run each level on each server in turn.

        Raises:
            KeyboardInterrupt: Ctrl-C (what was measured so far stays in :attr:`levels`).
        """
        loop = asyncio.get_running_loop()
        main = asyncio.current_task()
        watching = _on_ctrl_c(loop, lambda: self._interrupt(main))
        clients = {s.label: self._client(s) for s in self.servers}
        try:
            for server in self.servers:
                await self._warmup(server, clients[server.label])
            for level, n in zip(self.plan.levels, self.plan.requests, strict=True):
                for server in self.servers:
                    await self._level(server, clients[server.label], level, n)
        except asyncio.CancelledError:
            if self.interrupted:  # Ctrl-C, as asyncio itself would say it
                raise KeyboardInterrupt from None
            raise
        finally:
            for client in clients.values():  # bounded: a Ctrl-C must end the run even if a connection will not close
                try:
                    await asyncio.wait_for(client.close(), CLOSE_SECONDS)
                except Exception:  # the report is written whatever the client says
                    log.debug("closing a client failed", exc_info=True)
            if watching:
                loop.remove_signal_handler(signal.SIGINT)
        if self.interrupted:
            raise KeyboardInterrupt

    def levels_started(self, label: str) -> int:
        """How many levels ``label`` has begun before this one."""
        return sum(1 for run in self.levels if run.server == label) - 1

    def level_requests(self, index: int, n: int) -> list[BenchRequest]:
        """The requests of level ``index``: prompts no earlier level sent, when the workload has that many (a
        server's prefix cache would answer a replayed prompt's first token from memory); the first ``n`` when it
        has not (``prefix-shared``, whose point is the shared prefix)."""
        start = sum(self.plan.requests[:index])
        if len(self.workload) >= start + n:
            return self.workload[start : start + n]
        return self.workload[:n]

    def _interrupt(self, main: asyncio.Task | None) -> None:
        """Ctrl-C: stop starting requests and end the run; a second one ends it at once."""
        if self.interrupted:
            raise KeyboardInterrupt
        self.interrupted = True
        if main is not None:
            main.cancel()

    def _go_on(self) -> None:
        """Before each request: a run that was interrupted sends no more, whatever its HTTP stack made of the
        cancellation (a request error, or a request that went on)."""
        if self.interrupted:
            raise asyncio.CancelledError

    async def _send(
        self, client: ChatClient, server: ServerInfo, request: BenchRequest, level_start: float
    ) -> RequestResult:
        return await send(
            client,
            server.model,
            request,
            level_start=level_start,
            temperature=self.plan.temperature,
            ignore_eos=self.plan.ignore_eos,
            extra_body=dict(self.plan.extra_body),
        )

    async def _warmup(self, server: ServerInfo, client) -> None:
        reqs = self.warmup_workload[: self.plan.warmup]
        if not reqs:
            return
        self.observer.warmup_started(server.label, len(reqs))
        width = max(1, min(len(reqs), int(max(self.plan.levels)) if self.plan.mode == "concurrency" else 1))
        t0 = time.perf_counter()
        results = self.warmups.setdefault(server.label, [])

        async def one(req: BenchRequest) -> None:
            self._go_on()
            results.append(await self._send(client, server, req, t0))

        for i in range(0, len(reqs), width):
            await asyncio.gather(*(one(r) for r in reqs[i : i + width]))
        self.observer.warmup_finished(server.label, results)

    async def _level(self, server: ServerInfo, client, level: float, n: int) -> None:
        run = LevelRun(server=server.label, level=level, requests_planned=n)
        self.levels.append(run)
        sampler = None
        if server.pid is not None:
            try:
                sampler = MemorySampler(server.pid).start()
            except Exception:  # the process is gone or not ours to read: memory stays unknown
                log.debug("cannot sample pid %s", server.pid, exc_info=True)
        self.observer.level_started(run)
        t0 = time.perf_counter()
        run.started = t0
        reqs = self.level_requests(self.levels_started(server.label), n)

        async def one(req: BenchRequest) -> None:
            self._go_on()
            result = await self._send(client, server, req, t0)
            run.results.append(result)
            self.observer.request_done(run, result)

        try:
            if self.plan.mode == "concurrency":
                queue = iter(reqs)

                async def worker() -> None:
                    for req in queue:  # one shared iterator: each worker takes the next request
                        await one(req)

                await asyncio.gather(*(worker() for _ in range(max(1, min(int(level), n)))))
            else:
                rng = random.Random(self.plan.seed)
                tasks = []
                for req in reqs:
                    tasks.append(asyncio.create_task(one(req)))
                    if not math.isinf(level):
                        await asyncio.sleep(rng.expovariate(level))
                await asyncio.gather(*tasks)
            run.complete = True
        finally:
            run.finished = time.perf_counter()
            if sampler is not None:
                run.peak_rss_bytes = sampler.stop()
            self.observer.level_finished(run)

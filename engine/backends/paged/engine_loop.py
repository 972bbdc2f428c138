"""The paged engine's thread: it loads the model, moves admitted requests into the engine and steps it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from engine.backends.admission import AdmissionQueue
from engine.backends.base import BackendStats
from engine.backends.delivery import delivery_batch
from engine.backends.paged.sequence import Sequence
from engine.backends.paged.startup import LoadedEngine
from engine.backends.paged.streaming import StreamWriter

log = logging.getLogger(__name__)


class EngineLoop(AdmissionQueue[Sequence]):
    """The thread that owns one loaded model, and its queue of requests.

    The thread loads the model as well as running it: torch's CPU kernels run on an OpenMP team per
    calling thread, and once a second thread has its own team the two oversubscribe the cores and
    every parallel op pays a wake-up (decode steps ~1.5x slower).

    Args:
        start: Loads the model and builds its engine; called on the new thread.
        name: The thread's name.

    Raises:
        Exception: (from the constructor) whatever ``start`` raised; the thread has ended.
    """

    def __init__(self, start: Callable[[], LoadedEngine], *, name: str) -> None:
        super().__init__(max_waiting=1)  # the engine config's bound, once it is loaded
        self.stats_requests = 0
        self.stats_prompt_tokens = 0
        started: list[tuple[LoadedEngine, StreamWriter]] = []
        failure: list[BaseException] = []
        ready = threading.Event()

        def run() -> None:
            try:
                loaded = start()
                writer = StreamWriter(loaded.engine, loaded.checkpoint.tokenizer, self._by_id, self._cond)
            except BaseException as exc:  # handed to the constructor, which raises it in the caller's thread
                failure.append(exc)
                ready.set()
                return
            started.append((loaded, writer))
            ready.set()
            self._run(loaded, writer)

        self._thread = threading.Thread(target=run, name=name, daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            raise failure[0]
        self.loaded, self._writer = started[0]
        self.max_waiting = self.loaded.config.max_waiting
        self.max_running = self.loaded.config.max_num_seqs

    # -- called from request threads ------------------------------------------------------------
    def submit(self, seq: Sequence) -> None:
        """Queue ``seq`` for the engine.

        Raises:
            Overloaded: too many requests are already waiting, or the model is being unloaded.
        """
        super().submit(seq)
        with self._cond:
            self.stats_requests += 1
            self.stats_prompt_tokens += seq.num_prompt_tokens

    def stats(self) -> BackendStats:
        with self._cond:
            out = self.loaded.engine.stats(
                waiting=len(self._waiting), requests=self.stats_requests, prompt_tokens=self.stats_prompt_tokens,
                generated_tokens=self._writer.generated_tokens,
            )  # fmt: skip
        out.details["device"] = str(self.loaded.device)
        plan = self.loaded.plan
        out.details["load_plan"] = plan.to_dict() if plan is not None else None
        return out

    def close(self) -> None:
        """Cancel every request, stop the thread and free the KV cache."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout=60)
        self.loaded.engine.runner.kv_caches = []

    # -- the engine thread ----------------------------------------------------------------------
    def _run(self, loaded: LoadedEngine, writer: StreamWriter) -> None:
        engine = loaded.engine
        while True:
            with self._cond:
                while not self._stopping and not self._waiting and not engine.has_work:
                    self._cond.wait()
                if self._stopping:
                    for seq in [*self._waiting, *engine.scheduler.running, *engine.scheduler.waiting]:
                        writer.finish(seq, "cancelled")
                    self._waiting.clear()
                    return
                while self._waiting:
                    engine.add(self._waiting.popleft())
                cancelled = [s for s in (*engine.scheduler.running, *engine.scheduler.waiting) if s.cancelled]
            for seq in cancelled:
                writer.finish(seq, "cancelled")
            try:
                outputs = engine.step()
                with delivery_batch():  # one wake-up of each reader's event loop for the whole step
                    writer.advance(outputs)
            except Exception as exc:  # one bad step must not kill the loop: fail the requests in it
                log.exception("engine step failed")
                for seq in [*engine.scheduler.running, *engine.scheduler.waiting]:
                    writer.finish(seq, "error", error=f"Generation failed: {exc}.")


__all__ = ["EngineLoop"]

"""An asyncio event loop on a thread of its own, for callers that are not async themselves (the
terminal's REPL, the app's Qt thread): MCP sessions and agent runs live there; a run is stopped from
any thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any


class AgentRun:
    """A coroutine running on the runtime's loop; :meth:`stop` cancels it from any thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.task: asyncio.Task | None = None
        self.future: concurrent.futures.Future = concurrent.futures.Future()
        self._stop_asked = False

    def stop(self) -> None:
        self._stop_asked = True

        def cancel() -> None:
            if self.task is not None and not self.task.done():
                self.task.cancel()

        self._loop.call_soon_threadsafe(cancel)

    def result(self, timeout: float | None = None) -> Any:
        """The coroutine's value (None when it was stopped before it began). Raises what it raised."""
        try:
            return self.future.result(timeout)
        except concurrent.futures.CancelledError:
            return None


class AgentRuntime:
    """The loop and its thread; :meth:`close` ends both."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="agent-loop", daemon=True)
        self._thread.start()

    def start(self, coro: Coroutine[Any, Any, Any]) -> AgentRun:
        run = AgentRun(self.loop)

        async def wrapped() -> Any:
            run.task = asyncio.current_task()
            if run._stop_asked:
                raise asyncio.CancelledError
            return await coro

        inner = asyncio.run_coroutine_threadsafe(wrapped(), self.loop)
        inner.add_done_callback(lambda f: _copy(f, run.future))
        return run

    def call(self, coro: Coroutine[Any, Any, Any], timeout: float | None = None) -> Any:
        """Run ``coro`` on the loop and wait for its value."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self.loop.close()


def _copy(src: concurrent.futures.Future, dst: concurrent.futures.Future) -> None:
    if src.cancelled():
        dst.cancel()
        dst.set_running_or_notify_cancel()
    elif src.exception() is not None:
        dst.set_exception(src.exception())
    else:
        dst.set_result(src.result())


__all__ = ["AgentRun", "AgentRuntime"]

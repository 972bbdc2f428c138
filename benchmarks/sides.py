"""Benchmark sides in processes of their own.

torch and llama.cpp run their CPU work on an OpenMP team per calling thread. Two teams in one
process (say raw llama-cpp-python in the main thread and Hearth's decode thread) oversubscribe the
cores: from then on each parallel region waits on sleeping workers, and whichever side runs is
slowed, by a quarter to a half on two cores. A side in a process of its own runs as it would in its
own program, so the benchmarks here put each side in one:

    side = Child("decode_llamacpp:RawSide", model=path, ctx=1024, threads=2)
    side.run(128)  # calls RawSide(...).run(128) in the child
    side.close()
"""

from __future__ import annotations

import importlib
import multiprocessing


class Child:
    """``target`` ("module:Class", a module under benchmarks/) built with ``kwargs`` in a spawned
    process; calling a method here calls it there and returns its (picklable) result."""

    def __init__(self, target: str, **kwargs) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_child_main, args=(child, target, kwargs), daemon=True)
        self._proc.start()
        child.close()
        self._answer()  # built

    def _answer(self):
        try:
            kind, value = self._conn.recv()
        except EOFError:
            raise RuntimeError(f"a benchmark side exited (code {self._proc.exitcode})") from None
        if kind == "error":
            raise RuntimeError(f"a benchmark side failed: {value}")
        return value

    def __getattr__(self, method: str):
        if method.startswith("_"):
            raise AttributeError(method)

        def call(*args):
            self._conn.send((method, args))
            return self._answer()

        return call

    def close(self) -> None:
        if self._proc.is_alive():
            self._conn.send(None)
            self._proc.join(timeout=60)
        if self._proc.is_alive():
            self._proc.kill()


def _child_main(conn, target: str, kwargs: dict) -> None:
    module, _, name = target.partition(":")
    try:
        obj = getattr(importlib.import_module(module), name)(**kwargs)
        conn.send(("ok", None))
        while (job := conn.recv()) is not None:
            method, args = job
            conn.send(("ok", getattr(obj, method)(*args)))
        getattr(obj, "close", lambda: None)()
    except Exception as exc:  # reported to the parent, which raises it
        conn.send(("error", repr(exc)))

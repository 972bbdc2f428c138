"""Every kernel launch goes through :func:`launch`, so the compile check can record them instead.

Inside :func:`recording` the host wrappers run on ``meta`` tensors (shapes and dtypes, no memory)
and each launch is kept as a :class:`Launch`: the kernel, its run-time arguments and its constexprs,
exactly as the engine would pass them. ``compile_check`` compiles those for NVIDIA targets.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

_recorded: list[Launch] | None = None


@dataclass(frozen=True, slots=True)
class Launch:
    kernel: Any  # a triton JITFunction
    grid: tuple[int, ...]
    args: tuple[Any, ...]
    constexprs: tuple[tuple[str, Any], ...]


def launch(kernel, grid: tuple[int, ...], *args: Any, **constexprs: Any) -> None:
    """``kernel[grid](*args, **constexprs)``, or kept for the compile check while recording."""
    if _recorded is not None:
        _recorded.append(Launch(kernel, tuple(grid), args, tuple(sorted(constexprs.items()))))
        return
    kernel[grid](*args, **constexprs)


@contextlib.contextmanager
def recording() -> Iterator[list[Launch]]:
    """Collect launches instead of running them (one thread at a time: the compile check's)."""
    global _recorded
    previous, _recorded = _recorded, []
    try:
        yield _recorded
    finally:
        _recorded = previous


__all__ = ["Launch", "launch", "recording"]

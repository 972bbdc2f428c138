"""The CPU engine's step buffers stay in the process's heap from one step to the next.

Each step on the CPU allocates tens of megabytes that it frees at its end: the logits of every running
sequence (256 rows of a 49,152-word vocabulary are 50 MB), activations, sampling's scratch. glibc serves an
allocation that large from a fresh ``mmap`` and returns it at ``free``, so every step faults its buffers in
again page by page, and the kernel zeroes each page. On 2 cores that was a third of the engine's CPU time.

Raising glibc's mmap and trim thresholds keeps those buffers in the heap, where the next step reuses them.
Called once the model is loaded, so the loader's temporary copies of the weights are already given back.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import platform

log = logging.getLogger(__name__)

#: Allocations up to this size come from the heap, and the heap keeps up to this much free at its top.
KEEP_BYTES = 256 << 20

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def keep_step_buffers(limit: int = KEEP_BYTES) -> bool:
    """Let this process's heap keep freed buffers up to ``limit`` bytes for reuse (glibc only).

    Returns whether the setting took effect: False on other C libraries (macOS, musl), where it is left alone.
    """
    if platform.libc_ver()[0] != "glibc":
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        done = bool(libc.mallopt(_M_MMAP_THRESHOLD, limit)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, limit))
    except (OSError, AttributeError):
        return False
    if done:
        log.debug("the heap keeps freed step buffers up to %d MiB", limit >> 20)
    return done

"""The CPU engine's step buffers stay in the heap between steps instead of being mapped afresh each step."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

# In a process of its own: the setting is process-wide. mallinfo2's hblks counts the blocks glibc maps with
# mmap; a buffer served from the heap adds none. Page faults count the pages the kernel had to zero again.
SCRIPT = """
import ctypes, resource, torch
from engine.backends.paged.heap import keep_step_buffers

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2

def step():
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    mapped = []
    for _ in range(8):
        logits = torch.empty(16 << 20, dtype=torch.float32).fill_(1.0)  # 64 MB, freed at the end of the "step"
        mapped.append(libc.mallinfo2().hblks)
        del logits
    return max(mapped) - libc.mallinfo2().hblks, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults

before = step()
kept = keep_step_buffers()
step()  # the heap grows to hold the buffer once
after = step()
print(kept, *before, *after)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the setting is glibc's")
def test_a_step_buffer_freed_is_reused_from_the_heap_without_faulting_its_pages_in_again():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True, cwd=ROOT,
                         timeout=120).stdout.split()  # fmt: skip
    kept, mapped_before, faults_before, mapped_after, faults_after = out[0], *map(int, out[1:])
    assert kept == "True"
    assert mapped_before == 1  # glibc's default: each 64 MB buffer is its own mapping, returned at free
    assert mapped_after == 0  # kept: served from the heap
    assert faults_after * 4 < faults_before


def test_elsewhere_the_setting_is_left_alone(monkeypatch):
    from engine.backends.paged import heap

    monkeypatch.setattr(heap.platform, "libc_ver", lambda: ("musl", ""))
    assert heap.keep_step_buffers() is False

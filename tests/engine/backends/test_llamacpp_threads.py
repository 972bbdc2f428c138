"""The llama.cpp loop beside a real busy process: it decodes on fewer threads while the process runs, still
answers, and goes back to the full count once the process is gone; a count the user gave never moves."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.backends.base import LoadOptions, ModelSpec
from engine.backends.llamacpp import LlamaCppBackend
from engine.backends.llamacpp.backend import default_threads
from engine.backends.threads import FREE_SHARE, cpu_count, usable_cpus
from engine.types import GenerationRequest, SamplingParams

SPIN = "while True: pass"


def request(n: int) -> GenerationRequest:
    return GenerationRequest(
        model="s",
        prompt="The river town",
        params=SamplingParams(temperature=0, max_tokens=n, ignore_eos=True),
    )


def wait_for(check: Callable[[], bool], seconds: float) -> bool:
    """Poll ``check`` until it holds (True) or ``seconds`` pass (False); the time is a bound, not a measurement."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return check()


def details(backend: LlamaCppBackend) -> dict:
    stats = backend.stats()
    assert stats is not None
    return stats.details


def threads_now(backend: LlamaCppBackend) -> int:
    return details(backend)["threads"]


def quiet_at_full(backend: LlamaCppBackend, full: int) -> bool:
    """The loop has measured the rest of the machine as quiet and decodes on the full count."""
    d = details(backend)
    return (
        d["threads"] == full and d["cpu_used_elsewhere"] is not None and d["cpu_used_elsewhere"] < FREE_SHARE
    )


@pytest.fixture
def decoding(whole_machine, starter_path: Path):
    """The starter on an adaptive loop, kept generating from a thread of its own (the loop samples the
    machine only while it computes)."""
    backend = LlamaCppBackend()
    backend.load(ModelSpec(name="s", path=starter_path), LoadOptions(n_ctx=512, n_seq_max=2))
    stop = threading.Event()

    def generate() -> None:
        while not stop.is_set():
            for _ in backend.stream(request(64)):
                pass

    generator = threading.Thread(target=generate, daemon=True)
    generator.start()
    try:
        yield backend
    finally:
        stop.set()
        generator.join(timeout=60)
        backend.close()


def test_the_loop_gives_a_busy_process_its_core_and_takes_it_back_when_the_process_ends(
    decoding, starter_path
):
    full = default_threads()
    if full < 2:
        pytest.skip("With one thread there is nothing to give up.")
    assert details(decoding)["threads_adaptive"] is True and details(decoding)["threads_full"] == full
    # a quiet machine is measured as quiet within about two seconds (GROW_SECONDS and a few windows); a busy one
    # (the suite's other process) stays busy, and waiting longer for it only delays the skip
    if not wait_for(lambda: quiet_at_full(decoding, full), 6):
        busy = details(decoding)["cpu_used_elsewhere"]
        pytest.skip(
            f"Other work keeps this machine busy ({busy} cores), so the test cannot start from a quiet one."
        )
    # Enough spinning processes that fewer cores than the full team stay free (one on a two-core machine).
    spinners = [
        subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(cpu_count(usable_cpus()) - full + 1)
    ]
    try:
        assert wait_for(lambda: threads_now(decoding) < full, 30), details(decoding)
        assert 1 <= threads_now(decoding) <= full - 1  # on two cores: one thread
        chunks = list(decoding.stream(request(16)))
        assert chunks[-1].finish_reason == "length" and chunks[-1].completion_tokens == 16
        assert "".join(c.text for c in chunks).strip()

        pinned = LlamaCppBackend()  # what `hearth serve --threads N` loads
        pinned.load(
            ModelSpec(name="s", path=starter_path), LoadOptions(n_ctx=512, n_seq_max=1, n_threads=full)
        )
        try:
            assert list(pinned.stream(request(16)))[-1].completion_tokens == 16
            assert details(pinned)["threads"] == full and details(pinned)["threads_adaptive"] is False
        finally:
            pinned.close()
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    if not wait_for(lambda: threads_now(decoding) == full, 20):
        busy = details(decoding)["cpu_used_elsewhere"]
        if busy is not None and busy >= FREE_SHARE:  # someone else's work, not the spinners: nothing to judge
            pytest.skip(f"Other work took the machine ({busy} cores) once the busy process had ended.")
        pytest.fail(f"The loop stayed on fewer threads on a quiet machine: {details(decoding)}")

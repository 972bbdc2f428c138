"""The CPU threads a decode loop's llama.cpp context computes on (see :mod:`engine.backends.threads`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import llama_cpp

from engine.backends.llamacpp.media import Projector
from engine.backends.threads import CpuSample, ThreadPolicy, cpu_count, read_cpu_sample, usable_cpus

log = logging.getLogger(__name__)


class ComputeTeam:
    """The thread policy's count for the cores other processes leave free, set on the context, one fewer while
    pictures are read.

    Args:
        ctx: The loop's context.
        n_threads: Threads on a quiet machine.
        adapt: Use fewer threads while other processes keep cores busy; False keeps ``n_threads``.
        cpu_sample: Reads the machine's CPU counters, None where it cannot (default: those of the CPUs this
            process may use).
        projector: The model's projector, whose picture reading takes a core (None: text only).
    """

    def __init__(
        self,
        ctx: llama_cpp.llama_context_p,
        n_threads: int,
        *,
        adapt: bool,
        cpu_sample: Callable[[], CpuSample | None] | None = None,
        projector: Projector | None = None,
    ) -> None:
        cpus = usable_cpus()
        self.ctx = ctx
        self.projector = projector
        self.policy = ThreadPolicy(n_threads, cpus=cpu_count(cpus), pinned=not adapt)
        self.threads = n_threads  # the threads the context computes on now (see fit)
        self._cpu_sample = cpu_sample or (lambda: read_cpu_sample(cpus))

    def follow_machine(self) -> None:
        """Size the team for the cores other processes leave free (at most once a window)."""
        policy = self.policy
        if not policy.due(time.monotonic()):
            return
        before = policy.threads
        sample = self._cpu_sample()
        if sample is None:  # the system gives no counters: decode on the full count from now on
            log.info("CPU times are not readable here, so decoding keeps %d threads.", policy.full)
            policy.pin()
        else:
            policy.observe(sample)
        if policy.threads != before:
            self.fit()
            log.debug(
                "decoding on %d threads instead of %d: other processes use %.2f cores",
                policy.threads,
                before,
                policy.others or 0.0,
            )

    def fit(self) -> None:
        """Compute on the policy's threads, one fewer while request threads of this process read pictures and
        the team would take every core: a team member sharing its core with a picture being decoded stalls
        every barrier of the step (two threads on two cores, four 1280x960 JPEGs being read: steps of the tiny
        vision model take several times as long as on one thread)."""
        team = self.policy.threads
        reading = self.projector is not None and self.projector.reading
        if 1 < team and team >= self.policy.cpus and reading:
            team -= 1
        if team != self.threads:
            llama_cpp.llama_set_n_threads(self.ctx, team, team)
            self.threads = team


__all__ = ["ComputeTeam"]

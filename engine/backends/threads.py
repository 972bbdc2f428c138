"""How many threads a CPU backend computes on: as many as the cores the rest of the machine leaves free.

A llama.cpp step runs on an OpenMP team whose threads spin at every barrier of the graph. When another
process keeps a core busy, the team member that shares that core with it is off the CPU half of the time,
and every barrier of every step waits for it: on two cores beside one busy process, a two-thread team
decodes at a third of its quiet speed or less, where one thread on the free core keeps about half of it.

:class:`ThreadPolicy` decides from the CPU time the rest of the machine used (all processes but this one,
so the team's own spinning never counts) over short windows. It shrinks the team once other processes take
a core, and grows it back once they leave it. Two thresholds and a change that must hold for a while keep
it from flipping: the team shrinks once the others have held the core for :data:`SHRINK_SECONDS` and grows
once they have left it for :data:`GROW_SECONDS`, as a contended team costs far more than a thread left idle
a little longer. A backend samples while it computes, and while it is idle on fewer threads than its full
count (so that the next request finds the full team on a machine that has gone quiet). Idle on the full
count it does nothing at all, and its next step starts a fresh window: the CPU other processes used over a
long idle stretch says little about the machine now.

The policy is plain arithmetic over :class:`CpuSample` values. :func:`read_cpu_sample` reads them from the
machine: on Linux, the CPUs this process may run on (a cpuset or ``taskset`` leaves the others out of the
count); elsewhere, the whole machine through psutil; and this process's own CPU time.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass

log = logging.getLogger(__name__)

WINDOW_SECONDS = 0.25  # how often the machine is sampled while the backend computes
TAKEN_SHARE = 0.5  # a core counts as taken once other processes use at least this share of it...
FREE_SHARE = 0.3  # ...and as free again only once they use less than this share of it
SHRINK_SECONDS = 0.5  # how long the machine must ask for fewer threads before the team shrinks
GROW_SECONDS = 1.0  # how long it must ask for more before the team grows


@dataclass(frozen=True, slots=True)
class CpuSample:
    """The machine's CPU counters at one moment.

    Attributes:
        at: When, in seconds of a monotonic clock.
        busy: CPU seconds the CPUs this process may use have spent on work (any process) so far.
        own: CPU seconds this process has used so far.
    """

    at: float
    busy: float
    own: float


def usable_cpus() -> frozenset[int] | None:
    """The CPUs this process may run on (a cpuset, ``taskset``), or None where the system does not say."""
    try:
        return frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS, Windows: every CPU of the machine
        return None


def cpu_count(cpus: frozenset[int] | None) -> int:
    """How many CPUs ``cpus`` (None: the whole machine) names."""
    if cpus is not None:
        return max(len(cpus), 1)
    try:
        import psutil

        return psutil.cpu_count() or os.cpu_count() or 1
    except Exception:
        return os.cpu_count() or 1


def busy_seconds(proc_stat: bytes, cpus: frozenset[int], *, tick: float) -> float:
    """CPU seconds the CPUs ``cpus`` have spent on work, from the text of Linux's /proc/stat.

    Idle, waiting on I/O and stolen by the hypervisor are not work of this machine's processes; guest time
    is already counted in user time.
    """
    total = 0
    for line in proc_stat.splitlines():
        if not line.startswith(b"cpu"):
            break
        name, *fields = line.split()
        if name != b"cpu" and int(name[3:]) in cpus:
            user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[:7])
            total += user + nice + system + irq + softirq
    return total * tick


def read_cpu_sample(cpus: frozenset[int] | None = None) -> CpuSample | None:
    """The counters of the CPUs ``cpus`` (None: the whole machine) now, or None where the system does
    not give them (the policy then keeps the full count)."""
    try:
        own = os.times()
        if cpus is not None and os.path.exists("/proc/stat"):
            with open("/proc/stat", "rb") as f:
                busy = busy_seconds(f.read(), cpus, tick=1.0 / os.sysconf("SC_CLK_TCK"))
        else:
            import psutil

            fields = psutil.cpu_times()._asdict()
            not_work = sum(fields.get(k, 0.0) for k in ("idle", "iowait", "steal", "guest", "guest_nice"))
            busy = sum(fields.values()) - not_work
    except Exception as exc:  # a restricted sandbox
        log.debug("cannot read the CPU times: %s", exc)
        return None
    return CpuSample(at=time.monotonic(), busy=busy, own=own.user + own.system)


class ThreadPolicy:
    """Picks a compute team's size from how busy the rest of the machine is.

    Feed it a :class:`CpuSample` whenever :meth:`due` says so while the backend computes. When it goes
    idle, :meth:`idle_poll` says how long to wait before the next sample, or None: then call :meth:`rest`
    and sample again only when it computes. :attr:`threads` is the size to use.

    Args:
        full: The team's size on a quiet machine (the most it ever uses).
        cpus: Logical CPUs the team and the other processes share.
        pinned: Keep ``full`` whatever the machine does (the user chose the count).
    """

    def __init__(self, full: int, *, cpus: int, pinned: bool = False) -> None:
        if full < 1 or cpus < 1:
            raise ValueError(f"a thread policy needs at least one thread and one CPU, not {full} and {cpus}")
        self.full = full
        self.cpus = cpus
        self.pinned = pinned
        self.threads = full
        self.others: float | None = None  # cores the rest of the machine used in the last window
        self._last: CpuSample | None = None
        self._want = full  # what the current run of agreeing windows asks for
        self._held = 0.0  # seconds it has asked for that

    def due(self, now: float) -> bool:
        """Whether a new sample is wanted at ``now`` (seconds of the samples' monotonic clock)."""
        return not self.pinned and (self._last is None or now - self._last.at >= WINDOW_SECONDS)

    def pin(self) -> None:
        """Keep the full count from now on (where the machine's counters cannot be read)."""
        self.pinned = True
        self.threads = self.full

    def as_dict(self) -> dict[str, int | float | bool | None]:
        """The figures a backend reports: the count now, the full count, whether it adapts, and the
        cores other processes used in the last window (None before one was measured)."""
        others = round(self.others, 2) if self.others is not None else None
        return {"threads": self.threads, "threads_full": self.full, "threads_adaptive": not self.pinned,
                "cpu_used_elsewhere": others}  # fmt: skip

    def idle_poll(self) -> float | None:
        """Seconds an idle backend should wait before it samples again: a window while it is on fewer
        threads than its full count, so that it grows back on a machine that went quiet; None once it is
        on the full count (an idle backend then does nothing at all)."""
        return WINDOW_SECONDS if not self.pinned and self.threads < self.full else None

    def rest(self) -> None:
        """The backend stops sampling until it computes again: its next sample starts a fresh window."""
        self._last = None
        self._held = 0.0

    def observe(self, sample: CpuSample) -> int:
        """Take one sample and return the thread count to use from now on."""
        if self.pinned:
            return self.threads
        last, self._last = self._last, sample
        seconds = sample.at - last.at if last is not None else 0.0
        if last is None or seconds <= 0:
            return self.threads
        used = (sample.busy - last.busy) - (sample.own - last.own)
        self.others = min(max(used / seconds, 0.0), float(self.cpus))
        want = self._wanted(self.others)
        if want == self.threads:
            self._held = 0.0
            return self.threads
        same_way = self._held > 0 and (want < self.threads) == (self._want < self.threads)
        self._held = (self._held if same_way else 0.0) + seconds
        self._want = want
        if self._held >= (SHRINK_SECONDS if want < self.threads else GROW_SECONDS) - 1e-9:
            self.threads = want
            self._held = 0.0
        return self.threads

    def _wanted(self, others: float) -> int:
        """The count ``others`` cores of load ask for: fewer past :data:`TAKEN_SHARE` of a core, more
        only below :data:`FREE_SHARE` of one, else the current count (the band between is hysteresis)."""

        def free_cores(share: float) -> int:
            taken = int(others + 1.0 - share + 1e-9)  # cores the others hold at least ``share`` of
            return min(max(self.cpus - taken, 1), self.full)

        fewer = free_cores(TAKEN_SHARE)
        if fewer < self.threads:
            return fewer
        more = free_cores(FREE_SHARE)
        return more if more > self.threads else self.threads


__all__ = ["CpuSample", "ThreadPolicy", "busy_seconds", "cpu_count", "read_cpu_sample", "usable_cpus"]

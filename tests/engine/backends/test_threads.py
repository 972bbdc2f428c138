"""The thread policy, fed with synthetic CPU samples: fewer threads beside a busy process, the full count on a
quiet machine, no flipping on a noisy one, and a pinned count that never moves."""

from __future__ import annotations

import pytest

from engine.backends.threads import (
    GROW_SECONDS,
    SHRINK_SECONDS,
    WINDOW_SECONDS,
    CpuSample,
    ThreadPolicy,
)


class Machine:
    """Counters of a made-up machine: each window, other processes use ``others`` cores and Hearth ``own``."""

    def __init__(self) -> None:
        self.sample = CpuSample(at=100.0, busy=5000.0, own=10.0)

    def window(self, others: float, *, own: float = 2.0, seconds: float = WINDOW_SECONDS) -> CpuSample:
        s = self.sample
        self.sample = CpuSample(
            at=s.at + seconds, busy=s.busy + (others + own) * seconds, own=s.own + own * seconds
        )
        return self.sample


SHRINK_AFTER = round(SHRINK_SECONDS / WINDOW_SECONDS)  # windows in a row
GROW_AFTER = round(GROW_SECONDS / WINDOW_SECONDS)


def feed(policy: ThreadPolicy, machine: Machine, others: float, windows: int, **kw) -> list[int]:
    return [policy.observe(machine.window(others, **kw)) for _ in range(windows)]


def started(full: int = 2, *, cpus: int = 2, pinned: bool = False) -> tuple[ThreadPolicy, Machine]:
    policy, machine = ThreadPolicy(full, cpus=cpus, pinned=pinned), Machine()
    policy.observe(machine.sample)  # the first sample only starts a window
    return policy, machine


def test_a_quiet_machine_keeps_the_full_count_however_hard_hearth_itself_computes():
    policy, machine = started()
    # Hearth's own team spinning on both cores is not load from elsewhere.
    assert feed(policy, machine, 0.05, 40, own=2.0) == [2] * 40
    assert policy.others == pytest.approx(0.05)


def test_one_busy_process_on_two_cores_leaves_one_thread_after_the_change_persists():
    policy, machine = started()
    # Beside a two-thread team the busy process gets about two thirds of a core (three runnable threads on two).
    counts = feed(policy, machine, 0.67, SHRINK_AFTER + 3)
    assert counts[: SHRINK_AFTER - 1] == [2] * (SHRINK_AFTER - 1)  # one busy window is not enough
    assert counts[SHRINK_AFTER - 1 :] == [1] * 4
    # With the team at one thread the busy process has its core to itself: still one.
    assert feed(policy, machine, 1.0, 20) == [1] * 20


def test_the_full_count_comes_back_once_the_machine_is_quiet_for_long_enough():
    policy, machine = started()
    feed(policy, machine, 1.0, SHRINK_AFTER)
    assert policy.threads == 1
    counts = feed(policy, machine, 0.02, GROW_AFTER + 2)
    assert counts[: GROW_AFTER - 1] == [1] * (GROW_AFTER - 1)
    assert counts[GROW_AFTER - 1 :] == [2] * 3


def test_load_between_the_two_thresholds_changes_nothing_either_way():
    for start_busy in (False, True):
        policy, machine = started()
        if start_busy:
            feed(policy, machine, 1.0, SHRINK_AFTER)
        before = policy.threads
        assert feed(policy, machine, 0.4, 50) == [before] * 50


def test_a_machine_that_flips_between_busy_and_quiet_every_window_never_moves_the_count():
    policy, machine = started()
    counts = [policy.observe(machine.window(1.0 if i % 2 else 0.0)) for i in range(60)]
    assert counts == [2] * 60
    feed(policy, machine, 1.0, SHRINK_AFTER)
    # Quiet, but never for GROW_SECONDS in a row.
    counts = [policy.observe(machine.window(0.0 if i % GROW_AFTER else 1.0)) for i in range(60)]
    assert counts == [1] * 60


def test_a_pinned_count_never_changes_and_asks_for_no_samples():
    policy, machine = started(pinned=True)
    assert not policy.due(machine.sample.at + 10)
    assert policy.idle_poll() is None
    assert feed(policy, machine, 2.0, 30) == [2] * 30
    assert policy.as_dict() == {
        "threads": 2,
        "threads_full": 2,
        "threads_adaptive": False,
        "cpu_used_elsewhere": None,
    }


def test_an_idle_stretch_on_the_full_count_is_no_measurement_and_breaks_a_busy_run():
    policy, machine = started()
    feed(policy, machine, 1.0, SHRINK_AFTER - 1)
    assert policy.idle_poll() is None  # idle on the full count: no samples...
    policy.rest()
    assert policy.due(machine.sample.at)  # ...until the next step, which starts a fresh window
    # Thirty idle seconds in which other processes ran: not counted, nor is the busy window before them.
    assert policy.observe(machine.window(1.0, own=0.0, seconds=30.0)) == 2
    assert feed(policy, machine, 1.0, SHRINK_AFTER) == [2] * (SHRINK_AFTER - 1) + [1]


def test_idle_on_fewer_threads_it_keeps_sampling_and_grows_back_on_a_quiet_machine():
    policy, machine = started()
    feed(policy, machine, 1.0, SHRINK_AFTER)
    assert policy.idle_poll() == WINDOW_SECONDS
    counts = feed(policy, machine, 0.0, GROW_AFTER, own=0.0)  # idle windows: Hearth uses nothing
    assert counts[-1] == 2 and policy.idle_poll() is None


def test_a_long_window_counts_for_its_length():
    # A slow step (a long prompt on a big model) closes a window of several seconds: enough on its own.
    policy, machine = started()
    assert policy.observe(machine.window(1.0, seconds=3 * SHRINK_SECONDS)) == 1
    assert policy.observe(machine.window(0.0, seconds=GROW_SECONDS)) == 2


def test_a_busy_run_interrupted_by_a_quiet_window_starts_again():
    policy, machine = started()
    feed(policy, machine, 1.0, SHRINK_AFTER - 1)
    policy.observe(machine.window(0.0))
    assert feed(policy, machine, 1.0, SHRINK_AFTER) == [2] * (SHRINK_AFTER - 1) + [1]


def test_samples_come_once_a_window():
    policy, machine = started()
    at = machine.sample.at
    assert not policy.due(at + WINDOW_SECONDS / 2)
    assert policy.due(at + WINDOW_SECONDS)


def test_a_bigger_machine_gives_up_only_the_cores_others_take():
    # 16 logical CPUs, a team of 8: three busy processes leave plenty, ten leave six cores.
    policy, machine = started(8, cpus=16)
    assert feed(policy, machine, 3.0, 10) == [8] * 10
    feed(policy, machine, 10.0, SHRINK_AFTER)
    assert policy.threads == 6
    assert policy.as_dict() == {
        "threads": 6,
        "threads_full": 8,
        "threads_adaptive": True,
        "cpu_used_elsewhere": 10.0,
    }


def test_never_fewer_than_one_thread():
    policy, machine = started()
    feed(policy, machine, 2.0, 10)
    assert policy.threads == 1


def test_without_the_machines_counters_the_full_count_is_kept():
    policy, machine = started()
    feed(policy, machine, 1.0, SHRINK_AFTER)
    policy.pin()
    assert policy.threads == 2 and policy.as_dict()["threads_adaptive"] is False


def test_a_policy_without_threads_or_cpus_is_refused():
    with pytest.raises(ValueError, match="at least one thread"):
        ThreadPolicy(0, cpus=2)


@pytest.mark.parametrize("cpus", ["usable", "machine"])
def test_the_machines_counters_are_cpu_seconds_that_include_this_process(cpus):
    # Both counters in the same unit, this process's work counted in the machine's: what the policy subtracts.
    import os

    from engine.backends.threads import read_cpu_sample, usable_cpus

    which = usable_cpus() if cpus == "usable" else None
    before = read_cpu_sample(which)
    start = os.times()
    while (os.times().user + os.times().system) - (start.user + start.system) < 0.3:
        pass
    after = read_cpu_sample(which)
    assert before is not None and after is not None
    own = after.own - before.own
    assert own >= 0.3
    assert after.busy - before.busy >= 0.9 * own


def test_only_the_cpus_this_process_may_use_are_counted():
    # A cpuset of CPUs 1 and 3: work on 0 and 2 is another cpuset's business. Idle, I/O wait and steal
    # are not work; guest time is already in user time.
    from engine.backends.threads import busy_seconds

    stat = (
        b"cpu  900 0 90 5000 10 0 0 70 0 0\n"
        b"cpu0 500 0 50 100 0 0 0 0 0 0\n"
        b"cpu1 100 10 20 1000 5 3 2 60 40 0\n"
        b"cpu2 200 0 10 2000 0 0 0 0 0 0\n"
        b"cpu3 100 0 10 1900 5 0 0 10 0 0\n"
        b"intr 12345 0 0\n"
    )
    assert busy_seconds(stat, frozenset({1, 3}), tick=0.01) == pytest.approx((135 + 110) * 0.01)

"""The slots go round client requests, not sequences: the next admitted and the sequence paused for a newcomer."""

from __future__ import annotations

from dataclasses import dataclass

from engine.backends.fair_share import (
    MAX_WAIT_STEPS,
    next_admitted,
    one_row_per_request,
    preemption_victim,
    prompt_order,
)


@dataclass(eq=False)
class Seq:
    group: str
    name: str = ""
    decoding: bool = True


def _decoding(s: Seq) -> bool:
    return s.decoding


def test_the_next_admitted_is_the_first_waiting_of_the_request_with_fewest_running():
    running = [Seq("a"), Seq("a"), Seq("b")]
    waiting = [Seq("a", "a3"), Seq("a", "a4"), Seq("b", "b2"), Seq("c", "c1")]
    assert next_admitted(waiting, running).name == "c1"  # nothing running yet
    assert next_admitted(waiting[:3], running).name == "b2"  # one running against two
    assert next_admitted(waiting[:2], running).name == "a3"  # in line within its request


def test_a_request_with_nothing_running_takes_a_slot_from_one_holding_two_more():
    choices = [Seq("n4", f"c{i}") for i in range(4)]
    assert preemption_victim(Seq("chat"), choices, pausable=_decoding) is choices[-1]  # the last admitted
    choices[-1].decoding = False  # still computing its prompt: the one before it goes
    assert preemption_victim(Seq("chat"), choices, pausable=_decoding) is choices[-2]


def test_no_slot_passes_back_and_forth_between_requests():
    # Four single requests: each holds one slot, so a fifth waits its turn.
    singles = [Seq(f"r{i}") for i in range(4)]
    assert preemption_victim(Seq("r5"), singles, pausable=_decoding) is None
    # Two slots each: the paused choice (one running) does not take a slot back.
    mixed = [Seq("a"), Seq("a"), Seq("b"), Seq("b")]
    assert preemption_victim(Seq("a"), mixed, pausable=_decoding) is None
    # Three against one: the second request gets its second slot from the first.
    uneven = [Seq("a", "a1"), Seq("a", "a2"), Seq("a", "a3"), Seq("b", "b1")]
    assert preemption_victim(Seq("b"), uneven, pausable=_decoding).name == "a3"


def test_while_several_requests_decode_each_puts_one_row_in_a_step_its_choices_in_turn():
    choices = [Seq("n4", f"c{i}") for i in range(4)]
    chat = Seq("chat", "chat")
    last = {s.name: 0 for s in [*choices, chat]}
    assert one_row_per_request(choices, lambda s: last[s.name]) == choices  # alone: every choice decodes
    turns = []
    for step in range(1, 9):
        rows = one_row_per_request([*choices, chat], lambda s: last[s.name])
        assert chat in rows and len(rows) == 2
        for s in rows:
            last[s.name] = step
        turns.append(next(s.name for s in rows if s is not chat))
    assert turns == ["c0", "c1", "c2", "c3"] * 2


def test_prompts_are_read_shortest_first_until_one_has_waited_its_steps():
    # (arrived at step, tokens left): a long document, then short questions arriving while it is read
    prompts = {"document": (0, 1800), "question": (5, 12), "later": (9, 40)}
    order = lambda step: sorted(prompts, key=lambda k: prompt_order(step, *prompts[k]))  # noqa: E731
    assert order(10) == ["question", "later", "document"]
    assert order(MAX_WAIT_STEPS) == ["document", "question", "later"]  # it waited long enough: it goes first
    assert order(MAX_WAIT_STEPS + 5) == ["document", "question", "later"]  # then by arrival

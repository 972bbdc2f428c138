"""Tool results are untrusted text: cut for the model and the card, escape sequences never sent to a terminal."""

from __future__ import annotations

from engine.agent import ToolCallRecord, truncate
from engine.agent.terminal import CARD_RESULT_CHARS, format_card


def test_truncate_says_how_much_was_cut():
    assert truncate("abc", 5) == "abc"
    cut = truncate("x" * 1000, 100)
    assert cut.startswith("x" * 100) and "900 more characters cut" in cut and len(cut) < 140


def test_card_shows_tool_arguments_result_duration_and_escapes_control_characters():
    call = ToolCallRecord(id="call_1", name="lookup", arguments='{"word": "cat"}', server="rec", status="done",
                          result="\x1b[2Jred\x07 " + "y" * 2000, duration=0.0123)  # fmt: skip
    card = format_card(call)
    lines = card.splitlines()
    assert lines[0] == "┌ tool lookup on rec · done · 12 ms"
    assert lines[1] == '│ arguments: {"word": "cat"}'
    assert "\x1b" not in card and "\x07" not in card and "\\x1b[2Jred\\x07" in card
    assert "more characters cut" in card and card.count("y") <= CARD_RESULT_CHARS
    denied = format_card(ToolCallRecord(id="c", name="lookup", arguments="{}", status="denied", result="denied by the user"))
    assert "│ error: denied by the user" in denied and "· -" in denied.splitlines()[0]

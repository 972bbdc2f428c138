"""Speculative decoding in the app: an answer that repeats its input says under it how much was drafted
("48 tokens · 60% drafted"), and the figure is kept with the message."""

from __future__ import annotations

from app.store.records import AnswerStats
from app.widgets.message_bubble import stats_text
from tests.app.helpers import bubbles, fresh_chat, send_and_wait

TEXT = (
    "The lighthouse stood at the end of the harbour wall, white against the grey sea. Every evening the keeper "
    "climbed the hundred and twelve steps to light the lamp, and every morning he climbed them again to put it out."
)


def test_the_footer_says_what_share_was_drafted():
    assert stats_text(AnswerStats(tokens=312, drafted_tokens=181), False) == "312 tokens · 58% drafted"
    assert stats_text(AnswerStats(tokens=40), False) == "40 tokens"


def test_an_answer_that_copies_its_input_is_partly_drafted(qtbot, window, store):
    chat_id = fresh_chat(window, max_tokens=48)
    outcome = send_and_wait(qtbot, window, f"Copy this text exactly:\n\n{TEXT}")
    assert outcome.error is None
    stats = outcome.message.stats
    assert 0 < stats.drafted_tokens < stats.tokens
    assert "% drafted" in bubbles(window)[-1].stats.text()
    assert store.messages(chat_id)[-1].stats.drafted_tokens == stats.drafted_tokens

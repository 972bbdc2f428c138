"""Speculative decoding in the app: an answer that repeats its input says under it how much was drafted
("48 tokens · 60% drafted"), and the figure is kept with the message."""

from __future__ import annotations

import httpx

from app.store.records import AnswerStats
from app.widgets.message_bubble import stats_text
from engine.starter import STARTER_NAME
from tests.app.helpers import bubbles, fresh_chat, send_and_wait

TEXT = (
    "The lighthouse stood at the end of the harbour wall, white against the grey sea. Every evening the keeper "
    "climbed the hundred and twelve steps to light the lamp, and every morning he climbed them again to put it out."
)


def test_the_footer_says_what_share_was_drafted():
    assert stats_text(AnswerStats(tokens=312, accepted_draft_tokens=181), False) == "312 tokens · 58% drafted"
    assert stats_text(AnswerStats(tokens=40), False) == "40 tokens"


def accepted_drafts(engine) -> int:
    """The worker's count of drafted tokens kept, over every request so far."""
    reply = httpx.get(f"{engine.root_url}/api/stats", headers={"Authorization": f"Bearer {engine.token}"}, timeout=30)
    return int(reply.json()["models"].get(STARTER_NAME, {}).get("accepted_draft_tokens", 0))


def test_an_answer_says_as_much_as_the_worker_drafted_for_it(qtbot, window, store, engine):
    # Whether drafts pay depends on the machine (the worker measures what a drafted row costs; on one thread of
    # a small CPU, none does): the answer shows what the worker reports for it, and the figure is kept.
    chat_id = fresh_chat(window, max_tokens=48)
    before = accepted_drafts(engine)
    outcome = send_and_wait(qtbot, window, f"Copy this text exactly:\n\n{TEXT}")
    assert outcome.error is None
    stats = outcome.message.stats
    assert 0 <= stats.accepted_draft_tokens <= accepted_drafts(engine) - before  # the app's other requests (a title) too
    assert ("% drafted" in bubbles(window)[-1].stats.text()) == (stats.accepted_draft_tokens > 0)
    assert bubbles(window)[-1].stats.text() == stats_text(stats, False)
    assert ("guessed ahead" in bubbles(window)[-1].stats.toolTip()) == (stats.accepted_draft_tokens > 0)  # says what it is
    assert store.messages(chat_id)[-1].stats.accepted_draft_tokens == stats.accepted_draft_tokens

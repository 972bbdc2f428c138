"""Counts read as English: one of a thing is singular ("1 token", "1 file, 1 chunk"), more are plural."""

from __future__ import annotations

from app.features.documents import DocCollection
from app.store import AnswerStats
from app.units import counted
from app.widgets.message_bubble import stats_text


def test_one_of_a_thing_is_singular():
    assert [counted(n, "token") for n in (0, 1, 2)] == ["0 tokens", "1 token", "2 tokens"]
    assert counted(1, "match", "matches") == "1 match" and counted(3, "match", "matches") == "3 matches"


def test_an_answer_of_one_token_says_so():
    assert stats_text(AnswerStats(tokens=1, ttft=0.5, finish_reason="cancelled"), False) == "1 token · first token 500 ms · stopped"  # fmt: skip
    assert stats_text(AnswerStats(tokens=2), False) == "2 tokens"


def test_a_collection_of_one_file_and_one_chunk_says_so():
    one = DocCollection("notes", files=1, chunks=1, embedded=1, failed=(), phase=None, paused=False)
    assert one.summary == "notes — 1 file, 1 chunk"
    many = DocCollection("notes", files=2, chunks=5, embedded=5, failed=(), phase=None, paused=False)
    assert many.summary == "notes — 2 files, 5 chunks"

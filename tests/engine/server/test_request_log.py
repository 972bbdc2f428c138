"""The live request log: every reader gets each record, and a slow reader loses records, counted, without
holding anything up."""

from __future__ import annotations

import asyncio

from engine.server.request_log import RequestLog, dialect_of, finished_record


def _record(i: int):
    return finished_record(model=f"m{i}", path="/api/chat", status="ok", t0=0.0, first_token_at=0.25,
                           prompt_tokens=3, completion_tokens=11, now=1.25)  # fmt: skip


def test_a_record_says_dialect_tokens_ttft_and_rate():
    r = _record(0)
    assert (r.dialect, r.prompt_tokens, r.completion_tokens) == ("ollama", 3, 11)
    assert r.ttft_ms == 250.0 and r.tokens_per_second == 10.0 and r.duration_ms == 1250.0
    assert dialect_of("/v1/messages") == "anthropic" and dialect_of("/v1/chat/completions") == "openai"
    assert finished_record(model="m", path="/v1/completions", status="cancelled", t0=0.0, first_token_at=None,
                           prompt_tokens=5, completion_tokens=0, now=0.5).ttft_ms is None  # fmt: skip


def test_a_slow_reader_loses_records_counted_and_a_fast_one_loses_none():
    async def scenario():
        log = RequestLog(queue_size=4)
        slow, fast = log.subscribe(), log.subscribe()
        got_fast = []
        for i in range(10):  # publishing never waits for a reader
            log.publish(_record(i))
            record, dropped = await fast.next(1.0)
            got_fast.append((record.model, dropped))
        first = await slow.next(1.0)
        rest = [await slow.next(1.0) for _ in range(3)]
        after = await slow.next(0.01)
        log.unsubscribe(slow)
        log.unsubscribe(fast)
        return log, got_fast, first, rest, after

    log, got_fast, first, rest, after = asyncio.run(scenario())
    assert got_fast == [(f"m{i}", 0) for i in range(10)]
    assert first[0].model == "m0" and first[1] == 6  # the six that did not fit, told with the next one read
    assert [(r.model, d) for r, d in rest] == [("m1", 0), ("m2", 0), ("m3", 0)]
    assert after is None
    assert (log.published, log.dropped, log.subscribers) == (10, 6, 0)

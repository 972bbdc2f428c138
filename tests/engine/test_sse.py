"""The SSE parser the app's chat stream and the remote-provider relay both read events with."""

from __future__ import annotations

from engine.sse import SseParser


def test_events_split_anywhere_are_put_back_together():
    stream = b'data: {"a": 1}\n\n: comment\r\ndata: line one\r\ndata: line two\r\n\r\ndata: [DONE]\n\n'
    whole = SseParser().feed(stream)
    assert whole == ['{"a": 1}', "line one\nline two", "[DONE]"]
    for cut in range(1, len(stream)):
        parser = SseParser()
        assert parser.feed(stream[:cut]) + parser.feed(stream[cut:]) == whole, cut


def test_any_line_ending_and_an_unterminated_last_event():
    stream = b': ping\r\n\r\ndata: {"a":1}\r\n\r\ndata: {"b":\ndata: 2}\n\ndata: [DONE]\r\r'
    for step in (1, 3, len(stream)):
        parser = SseParser()
        events = []
        for i in range(0, len(stream), step):
            events += parser.feed(stream[i : i + step])
        events += parser.close()
        assert events == ['{"a":1}', '{"b":\n2}', "[DONE]"]

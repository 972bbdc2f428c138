"""`hearth bench`'s client reads server-sent events however a server frames them, and names each failure."""

from __future__ import annotations

import asyncio
import contextlib
import json

from engine.bench.client import ChatClient, proxy_for, send
from engine.bench.workload import BenchRequest

REQUEST = BenchRequest(messages=({"role": "user", "content": "hi"},), max_tokens=3)


def chunk(content: str | None = None, finish: str | None = None, **more) -> dict:
    delta = {"content": content} if content is not None else {}
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]} | more


async def answer(status: str, content_type: str, pieces: list[bytes], *, keep_alive: bool = False,
                 close_kept: bool = False):
    """Serve a raw HTTP answer (the body as ``pieces``, each its own write) on a free loopback port: the
    connection closes after it, or with ``keep_alive`` the body is chunked and the connection waits for the next
    request (``close_kept``: the server closes it as the next request comes, never answering it, as llama-server
    does after a stream). Each answered request goes into the returned list, with the number of its connection."""
    seen: list[dict] = []
    connections = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        number = connections
        while head := await reader.readuntil(b"\r\n\r\n") if not reader.at_eof() else b"":
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
            seen.append({"head": head.decode(), "body": json.loads(await reader.readexactly(length)), "connection": number})
            framing = "Transfer-Encoding: chunked" if keep_alive else "Connection: close"
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n{framing}\r\n\r\n".encode())
            for piece in pieces:
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece) if keep_alive else piece)
                await writer.drain()
                await asyncio.sleep(0.01)  # each piece its own read on the other side
            if not keep_alive:
                break
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            if close_kept:  # the next request on it is read and never answered
                with contextlib.suppress(asyncio.IncompleteReadError):
                    await reader.readuntil(b"\r\n\r\n")
                break
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1", seen


def run(status: str, content_type: str, pieces: list[bytes], **send_args):
    async def main():
        server, url, seen = await answer(status, content_type, pieces)
        client = ChatClient(url, "the-key", timeout=30)
        try:
            return await send(client, "m", REQUEST, level_start=0.0, **send_args), seen
        finally:
            await client.close()
            server.close()
            await server.wait_closed()

    return asyncio.run(main())


def test_events_split_anywhere_with_crlf_comments_and_fields_are_read_whole():
    usage = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8, "prompt_tokens_details": {"cached_tokens": 4},
             "completion_tokens_details": {"accepted_prediction_tokens": 1, "rejected_prediction_tokens": 2}}  # fmt: skip
    stream = (
        b": keep-alive\r\n\r\n"
        + b"event: message\r\nid: 1\r\ndata: " + json.dumps(chunk("one")).encode() + b"\r\n\r\n"
        + b"data:" + json.dumps(chunk(" two")).encode() + b"\n\n"  # no space after the colon
        + b"data: " + json.dumps(chunk(" three")).encode() + b"\n\n"
        + b"data: " + json.dumps(chunk(None, "length")).encode() + b"\n\n"
        + b"data: " + json.dumps(chunk(choices=[], usage=usage)).encode() + b"\n\n"
        + b"data: [DONE]\n\n"
    )
    pieces = [stream[i : i + 7] for i in range(0, len(stream), 7)]  # split inside lines, fields and the CRLFs
    result, seen = run("200 OK", "text/event-stream; charset=utf-8", pieces, extra_body={"seed": 3})
    assert result.ok, result.error
    assert (result.content_chunks, result.finish_reason, len(result.itl)) == (3, "length", 2)
    assert (result.output_tokens, result.prompt_tokens, result.token_source) == (3, 5, "usage")
    assert (result.cached_tokens, result.draft_tokens, result.accepted_draft_tokens) == (4, 3, 1)
    (request,) = seen
    assert "authorization: bearer the-key" in request["head"].lower()
    body = request["body"]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert (body["model"], body["max_tokens"], body["ignore_eos"], body["seed"]) == ("m", 3, True, 3)


def test_a_last_event_without_its_blank_line_or_done_still_counts_and_chunks_stand_in_for_usage():
    stream = b"data: " + json.dumps(chunk("a")).encode() + b"\n\ndata: " + json.dumps(chunk("b", "stop")).encode()
    result, _ = run("200 OK", "text/event-stream", [stream])
    assert result.ok and (result.content_chunks, result.finish_reason) == (2, "stop")
    assert (result.output_tokens, result.token_source) == (2, "chunks")  # the server gave no usage


def test_refusals_error_events_and_answers_that_are_not_streams_are_each_named():
    body = json.dumps({"error": {"message": "64 requests are already waiting", "type": "rate_limit"}}).encode()
    result, _ = run("429 Too Many Requests", "application/json", [body])
    assert not result.ok and result.error == "HTTP 429: 64 requests are already waiting"

    result, _ = run("503 Service Unavailable", "text/plain", [b"the model is loading"])
    assert result.error == "HTTP 503: the model is loading"

    failing = b"data: " + json.dumps(chunk("a")).encode() + b"\n\ndata: " + json.dumps({"error": {"message": "out of memory"}}).encode() + b"\n\n"
    result, _ = run("200 OK", "text/event-stream", [failing])
    assert not result.ok and result.error == "error in the stream: out of memory"

    result, _ = run("200 OK", "application/json", [json.dumps({"choices": []}).encode()])
    assert result.error == "error in the stream: the server answered with application/json, not a stream of events"

    result, _ = run("200 OK", "text/event-stream", [b"data: {not json\n\n"])
    assert result.error == "error in the stream: an event that is not JSON: {not json"

    cut = b"data: " + json.dumps(chunk("a")).encode() + b"\n\n"  # the connection closes before the end
    result, _ = run("200 OK", "text/event-stream", [cut])
    assert not result.ok and result.error == "the stream ended without a finish_reason"


def test_answers_read_to_their_end_keep_their_connection_and_the_environment_names_the_proxy(tmp_path, monkeypatch):
    # a netrc with a default entry (which would clash with the key's header), and a proxy this machine bypasses
    (tmp_path / "netrc").write_text("default login someone password secret\n")
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    stream = b"data: " + json.dumps(chunk("a", "stop")).encode() + b"\n\ndata: [DONE]\n\n"

    async def main(close_kept: bool):
        server, url, seen = await answer("200 OK", "text/event-stream", [stream[:9], stream[9:]], keep_alive=True,
                                         close_kept=close_kept)  # fmt: skip
        client = ChatClient(url, "k", timeout=30)
        try:
            results = []
            for _ in range(3):
                results.append(await send(client, "m", REQUEST, level_start=0.0))
        finally:
            await client.close()
            server.close()
            await server.wait_closed()
        return results, seen

    results, seen = asyncio.run(main(close_kept=False))
    assert all(r.ok for r in results), [r.error for r in results]
    assert [r["connection"] for r in seen] == [1, 1, 1]  # one connection, kept from answer to answer
    # a server that closes the connections it said it would keep: each request goes again on a new one
    results, seen = asyncio.run(main(close_kept=True))
    assert all(r.ok for r in results), [r.error for r in results]
    assert [r["connection"] for r in seen] == [1, 2, 3]
    assert proxy_for("http://127.0.0.1:8000/v1/chat/completions") is None
    assert proxy_for("http://10.1.2.3:8000/v1/chat/completions") == "http://127.0.0.1:9"
    monkeypatch.setenv("NO_PROXY", "10.1.2.3")
    assert proxy_for("http://10.1.2.3:8000/v1/chat/completions") is None


def test_a_server_that_is_not_there_is_a_connection_error():
    async def main():
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        client = ChatClient(f"http://127.0.0.1:{port}/v1", None, timeout=5)
        try:
            return await send(client, "m", REQUEST, level_start=0.0)
        finally:
            await client.close()

    result = asyncio.run(main())
    assert not result.ok and result.error is not None and result.error.startswith("connection error")

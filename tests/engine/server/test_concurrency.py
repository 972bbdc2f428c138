"""Many clients at once, disconnects, overload, shutdown and crashes, against real workers."""

from __future__ import annotations

import os
import signal
import threading
import time

import httpx
import openai
import pytest

from tests.engine.server.conftest import MODEL, Server

PROMPTS = [
    "Name three colours.",
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "List three fruits.",
    "What is 2 + 2?",
    "Say hello in Spanish.",
    "Name a famous scientist.",
    "What do bees make?",
]


def ask(client, prompt: str, *, stream: bool) -> str:
    kw = dict(model=MODEL, messages=[{"role": "user", "content": prompt}], max_tokens=16, temperature=0)
    if not stream:
        return client.chat.completions.create(**kw).choices[0].message.content
    parts = []
    for chunk in client.chat.completions.create(**kw, stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
    return "".join(parts)


def test_eight_concurrent_streams_each_get_their_own_answer(server):
    client = server.client()
    alone = [ask(client, p, stream=False) for p in PROMPTS]
    results: dict[int, str] = {}

    def worker(i: int) -> None:
        results[i] = ask(server.client(), PROMPTS[i], stream=True)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert [results[i] for i in range(len(PROMPTS))] == alone


def running(server) -> int:
    stats = httpx.get(f"{server.root}/api/stats", headers=server.headers).json()
    return stats["models"][MODEL]["running"]


def loaded(server) -> None:
    """The starter loaded first (the session's server is shared: another file's test may have unloaded it), so that
    the request under test is generating, not loading, when its client leaves."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
    assert httpx.post(f"{server.base_url}/chat/completions", json=body, headers=server.headers, timeout=120).status_code == 200


def test_disconnect_mid_stream_frees_its_place(server):
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Tell me a very long story."}],
        "max_tokens": 1500,
        "ignore_eos": True,
        "stream": True,
    }
    loaded(server)
    with httpx.stream("POST", f"{server.base_url}/chat/completions", json=body, headers=server.headers, timeout=60) as r:
        lines = r.iter_lines()
        for _ in range(6):
            next(lines)
        assert running(server) == 1
    assert wait_idle(server) == 0


def wait_idle(server) -> int:
    # up to 10 s: far less than the 1500 tokens of the requests below take here (over 15 s), so a slot that was
    # not freed still fails the test, and a loaded machine has time to notice the disconnect
    for _ in range(200):
        if running(server) == 0:
            break
        time.sleep(0.05)
    return running(server)


@pytest.mark.parametrize("path", ["/chat/completions", "/messages"])
def test_a_non_streamed_request_whose_client_leaves_is_cancelled(server, path):
    # 1500 tokens take many seconds here; the client gives up after one, and the slot is free soon after.
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Tell me a very long story."}],
        "max_tokens": 1500,
        "ignore_eos": True,
    }
    loaded(server)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server.base_url}{path}", json=body, headers=server.headers, timeout=httpx.Timeout(60, read=1.0))
    assert wait_idle(server) == 0


def test_cors_origin_when_asked():
    s = Server("--parallel", "1", "--ctx", "512", "--cors-origin", "http://app.example", api_key=None)
    try:
        ok = httpx.options(
            f"{s.base_url}/models", headers={"Origin": "http://app.example", "Access-Control-Request-Method": "GET"}
        )
        assert ok.headers.get("access-control-allow-origin") == "http://app.example"
        other = httpx.get(f"{s.base_url}/models", headers={"Origin": "http://evil.example"})
        assert "access-control-allow-origin" not in other.headers
    finally:
        s.stop()


def test_overload_is_429_with_retry_after_and_sigterm_ends_streams_cleanly():
    # The first request runs long enough that the second is still waiting when the third comes, on a slow machine too.
    s = Server("--parallel", "1", "--ctx", "2048", "--max-waiting", "1")
    try:
        body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 1500, "ignore_eos": True, "stream": True}
        first = httpx.stream("POST", f"{s.base_url}/completions", json=body, headers=s.headers, timeout=60)
        r1 = first.__enter__()
        lines = r1.iter_lines()
        next(lines)
        second = threading.Thread(
            target=lambda: httpx.post(f"{s.base_url}/completions", json={**body, "stream": False}, headers=s.headers, timeout=60)
        )
        second.start()
        deadline = time.monotonic() + 60
        while (waiting := httpx.get(f"{s.root}/api/stats", headers=s.headers).json()["models"][MODEL]["waiting"]) != 1:
            assert time.monotonic() < deadline, "the second request never queued"
            time.sleep(0.05)
        assert waiting == 1 and running(s) == 1
        third = httpx.post(f"{s.base_url}/completions", json={**body, "stream": False}, headers=s.headers, timeout=60)
        assert third.status_code == 429
        assert int(third.headers["retry-after"]) >= 1
        assert third.json()["error"]["type"] == "rate_limit_error"

        s.proc.send_signal(signal.SIGTERM)
        rest = list(lines)
        data = [line for line in rest if line.startswith("data: ")]
        assert data[-1] == "data: [DONE]"
        assert '"finish_reason":"stop"' in data[-2]
        first.__exit__(None, None, None)
        second.join(30)
        assert s.proc.wait(30) == 0
    finally:
        s.stop()


def test_non_loopback_host_warns():
    import subprocess
    import sys

    from engine.worker.supervisor import free_port

    port = free_port("0.0.0.0")
    proc = subprocess.Popen(  # without --insecure-no-key it is refused (test_keys.py)
        [sys.executable, "-m", "engine.cli", "serve", "--host", "0.0.0.0", "--port", str(port), "--insecure-no-key"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stderr.readline()
        assert "warning" in line and "0.0.0.0" in line and "no API key" in line
    finally:
        proc.terminate()
        proc.wait(15)


def test_supervisor_restarts_a_killed_worker_mid_stream():
    from engine.worker import WorkerSupervisor

    events = []
    sup = WorkerSupervisor(model=MODEL, extra_args=["--parallel", "2", "--ctx", "1024"], on_event=lambda e: events.append(e))
    sup.start()
    try:
        client = openai.OpenAI(base_url=sup.base_url, api_key=sup.api_key, max_retries=0, timeout=60)
        stream = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Count to a thousand."}], max_tokens=1000, stream=True
        )
        next(iter(stream))
        os.kill(sup.pid, signal.SIGKILL)
        with pytest.raises((openai.APIError, httpx.HTTPError)):
            for _ in stream:
                pass
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and [e.kind for e in events].count("ready") < 2:
            time.sleep(0.05)
        kinds = [e.kind for e in events]
        assert "crashed" in kinds and kinds.count("ready") == 2
        client = openai.OpenAI(base_url=sup.base_url, api_key=sup.api_key, max_retries=0, timeout=60)
        answer = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=8, temperature=0)
        assert answer.choices[0].message.content
        assert sup.restarts == 1
    finally:
        sup.stop()
    assert events[-1].kind == "stopped"


def test_worker_ends_when_the_app_is_killed():
    import subprocess
    import sys

    import psutil

    code = (
        "import sys, time\n"
        "from engine.worker import WorkerSupervisor\n"
        "s = WorkerSupervisor(extra_args=['--parallel', '1', '--ctx', '512'])\n"
        "s.start()\n"
        "print(s.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    app = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        worker_pid = int(app.stdout.readline())
        assert psutil.pid_exists(worker_pid)
        app.kill()
        app.wait()
        worker = psutil.Process(worker_pid)
        worker.wait(30)  # raises TimeoutExpired if the orphan lives on
    finally:
        app.kill()


BURST_ROUTES = {  # every dialect: its path and a long answer, streamed
    "openai chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Tell a story."}], "max_tokens": 400}),
    "openai completions": ("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 400, "ignore_eos": True}),
    "responses": ("/v1/responses", {"input": "Tell a story.", "max_output_tokens": 400}),
    "anthropic": ("/v1/messages", {"messages": [{"role": "user", "content": "Tell a story."}], "max_tokens": 400}),
    "ollama": ("/api/chat", {"messages": [{"role": "user", "content": "Tell a story."}], "options": {"num_predict": 400}}),
}


def test_a_burst_of_as_many_clients_as_slots_is_never_refused_in_any_dialect_and_a_dead_engine_is_restarted():
    # The paged engine (in its own process) with 8 slots and no queue: each dialect's 8 clients at once all run;
    # a ninth, while all 8 still generate (they ignore the end of text), is refused.
    s = Server("--backend", "paged", "--parallel", "8", "--ctx", "1024", "--max-waiting", "0", "--speculative", "off")
    try:
        for dialect, (path, body) in BURST_ROUTES.items():
            body = {"model": MODEL, **body, "stream": True, "temperature": 0.8, "seed": 1}
            streams = [httpx.stream("POST", f"{s.root}{path}", json=body, headers=s.headers, timeout=120) for _ in range(8)]
            responses = []
            statuses: list[int] = []
            go = threading.Barrier(8)

            def start(st, go=go, responses=responses, statuses=statuses):
                go.wait()
                r = st.__enter__()
                lines = r.iter_lines()  # kept: a line iterator dropped closes the response, and the client leaves
                responses.append((st, lines))
                statuses.append(r.status_code)
                if r.status_code == 200:
                    next(lines)  # the answer has begun

            threads = [threading.Thread(target=start, args=(st,)) for st in streams]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=300)
            assert statuses == [200] * 8, dialect
            if "ignore_eos" in body:
                ninth = httpx.post(f"{s.root}{path}", json={**body, "stream": False}, headers=s.headers, timeout=60)
                assert ninth.status_code == 429, ninth.text
            for st, _ in responses:
                st.__exit__(None, None, None)  # the clients leave: their slots come free
            deadline = time.monotonic() + 60
            while running(s):
                assert time.monotonic() < deadline, "cancelled requests kept their slots"
                time.sleep(0.05)

        # The engine's process dies mid-answer: the answer ends saying so, and the engine is started again.
        body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 400, "ignore_eos": True, "stream": True}
        with httpx.stream("POST", f"{s.base_url}/completions", json=body, headers=s.headers, timeout=120) as r:
            lines = r.iter_lines()
            next(lines)
            engine = httpx.get(f"{s.root}/api/stats", headers=s.headers).json()["models"][MODEL]
            os.kill(engine["engine_process"], signal.SIGKILL)
            rest = "\n".join(lines).strip()
        assert "engine process ended unexpectedly" in rest and rest.endswith("data: [DONE]")
        deadline = time.monotonic() + 120
        while (again := httpx.post(f"{s.base_url}/completions", json={**body, "stream": False, "max_tokens": 4},
                                   headers=s.headers, timeout=120)).status_code == 429:  # fmt: skip
            assert time.monotonic() < deadline, "the engine was not started again"
            time.sleep(0.2)
        assert again.status_code == 200 and again.json()["usage"]["completion_tokens"] == 4
        stats = httpx.get(f"{s.root}/api/stats", headers=s.headers).json()["models"][MODEL]
        assert stats["engine_restarts"] == 1 and stats["engine_process"] != engine["engine_process"]
        shown = httpx.get(f"{s.root}/api/ps", headers=s.headers).json()["models"][0]
        assert shown["size"] > 0 and shown["size_vram"] == 0  # on this CPU: `ollama ps` would say 100% CPU
        # the paged engine writes answers only: an embeddings request is refused in a sentence naming the model
        for path, body in (("/v1/embeddings", {"input": "a colour"}), ("/api/embed", {"input": "a colour"})):
            r = httpx.post(f"{s.root}{path}", json={"model": MODEL, **body}, headers=s.headers, timeout=60)
            assert r.status_code == 400 and f"Model '{MODEL}' cannot make embeddings on the paged backend" in r.text
    finally:
        s.stop()

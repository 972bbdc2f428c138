"""Remote providers end to end: a local `hearth serve` that knows, through `hearth remote add`,
llama-cpp-python's server and a second Hearth, and passes their models through its own API."""

from __future__ import annotations

import json
import os
import stat
import threading
from contextlib import contextmanager

import anthropic
import httpx
import ollama
import openai
import pytest

from engine.cli import main
from engine.starter import STARTER_NAME
from engine.worker.net import free_port
from tests.engine.server.conftest import openai_schemas, openai_spec  # noqa: F401 - the fixtures
from tests.remote.conftest import (
    ALIAS,
    LLAMA_KEY,
    LOCAL_KEY,
    PROVIDER_KEY,
    LlamaCppServer,
    SilentServer,
    data_folder,
    hearth_serve,
    openai_client,
)

LLAMA_MODEL = f"llama/{ALIAS}"
HEARTH_MODEL = f"hearth2/{STARTER_NAME}"
QUESTION = [{"role": "user", "content": "Name three colours."}]


@contextmanager
def environ(**values: str):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="module")
def local_home(tmp_path_factory):
    return tmp_path_factory.mktemp("local-home")


@pytest.fixture(scope="module")
def local(local_home, llama_server, provider_hearth):
    """The user's own Hearth, given three providers with `hearth remote add` while it runs: the
    llama.cpp server, the second Hearth (by its bare address), and the llama.cpp server with a wrong key."""
    sup = hearth_serve(local_home, LOCAL_KEY, log=local_home / "worker.log")
    keys = {"T_LLAMA_KEY": LLAMA_KEY, "T_PROVIDER_KEY": PROVIDER_KEY, "T_WRONG_KEY": "not-the-key"}
    with data_folder(local_home), environ(**keys):
        assert main(["remote", "add", "llama", llama_server.base_url, "--api-key-env", "T_LLAMA_KEY"]) == 0
        bare = provider_hearth.base_url.removesuffix("/v1")
        assert main(["remote", "add", "hearth2", bare, "--api-key-env", "T_PROVIDER_KEY"]) == 0
        assert main(["remote", "add", "badkey", llama_server.base_url, "--api-key-env", "T_WRONG_KEY"]) == 0
    yield sup
    sup.stop()


def api(sup) -> httpx.Client:
    return httpx.Client(base_url=sup.base_url, headers=sup.headers(), timeout=60)


def admin(sup) -> httpx.Client:
    return httpx.Client(base_url=sup.base_url.removesuffix("/v1"), headers=sup.headers(), timeout=60)


def sse(client: httpx.Client, path: str, body: dict) -> list:
    """The ``data`` of every event of a streamed answer (JSON decoded, ``[DONE]`` as is)."""
    out = []
    with client.stream("POST", path, json=body) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.startswith("data: "):
                data = line[6:]
                out.append(data if data == "[DONE]" else json.loads(data))
    return out


def content_of(events: list) -> list[str]:
    return [
        c["delta"]["content"]
        for e in events
        if isinstance(e, dict)
        for c in e.get("choices", [])
        if c.get("delta", {}).get("content")
    ]


# -- the store and the CLI -----------------------------------------------------------------------
def test_cli_add_list_rm_keeps_the_key_out_of_the_providers_file(local, local_home, llama_server, capsys):
    with data_folder(local_home), environ(T_KEY=LLAMA_KEY):
        assert main(["remote", "add", "scratch", llama_server.base_url, "--api-key-env", "T_KEY", "--timeout", "30"]) == 0
        out = capsys.readouterr().out
        assert f"Added 'scratch' at {llama_server.base_url}" in out
        assert f"scratch/{ALIAS}" in out  # the models it serves, right away

        providers = (local_home / "remotes.json").read_text()
        assert "scratch" in providers and LLAMA_KEY not in providers
        keys = local_home / "remote-keys.json"
        assert json.loads(keys.read_text())["scratch"] == LLAMA_KEY
        assert stat.S_IMODE(keys.stat().st_mode) == 0o600

        assert main(["remote", "list"]) == 0
        listing = capsys.readouterr().out
        assert "scratch" in listing and "key in file" in listing and f"scratch/{ALIAS}" in listing
        assert main(["remote", "list", "--json"]) == 0
        entries = {e["name"]: e for e in json.loads(capsys.readouterr().out)}
        assert entries["scratch"]["state"] == "ok" and entries["scratch"]["timeout"] == 30
        assert entries["badkey"]["state"] == "refused"

        assert main(["remote", "rm", "scratch"]) == 0
        assert "Removed 'scratch'" in capsys.readouterr().out
        assert "scratch" not in json.loads(keys.read_text())
        assert main(["remote", "rm", "scratch"]) == 1
        assert "no remote provider named 'scratch'" in capsys.readouterr().err


def test_cli_refuses_bad_input_with_one_sentence(local, local_home, capsys):
    with data_folder(local_home):
        assert main(["remote", "add", "a/b", "http://127.0.0.1:9/v1"]) == 1
        assert "cannot name a provider" in capsys.readouterr().err
        assert main(["remote", "add", "x", "ftp://host/v1"]) == 1
        assert "is not a server address" in capsys.readouterr().err
        assert main(["remote", "add", "x", "http://127.0.0.1:9/v1", "--api-key-env", "T_UNSET_VAR_42"]) == 1
        err = capsys.readouterr().err
        assert "T_UNSET_VAR_42 is empty or not set" in err and len(err.strip().splitlines()) == 1
        assert main(["remote", "add", "llama", "http://127.0.0.1:9/v1"]) == 1
        assert "named 'llama' exists" in capsys.readouterr().err


def test_a_wrong_key_is_named_when_added(local_home, llama_server, capsys):
    with data_folder(local_home), environ(T_KEY="wrong"):
        assert main(["remote", "add", "wrongtoo", llama_server.base_url, "--api-key-env", "T_KEY"]) == 0
        err = capsys.readouterr().err
        assert "'wrongtoo'" in err and "refused the API key (HTTP 401)" in err
        assert main(["remote", "rm", "wrongtoo"]) == 0


def test_hearth_models_marks_remote_models_with_their_provider(local, local_home, llama_server, capsys):
    with data_folder(local_home):
        assert main(["models"]) == 0
    captured = capsys.readouterr()
    lines = {line.split()[0]: line for line in captured.out.splitlines()}
    assert STARTER_NAME in lines
    assert f"llama at {llama_server.base_url}" in lines[LLAMA_MODEL]
    assert lines[HEARTH_MODEL].split()[1] == "remote" and "hearth2 at" in lines[HEARTH_MODEL]
    # A provider that refuses the key is one line of explanation, not a failure of the listing.
    (note,) = [n for n in captured.err.splitlines() if "badkey" in n]
    assert note.startswith("note: The remote provider 'badkey'") and "refused the API key" in note

    with data_folder(local_home):
        assert main(["models", "--json"]) == 0
    entries = {e["name"]: e for e in json.loads(capsys.readouterr().out)}
    assert entries[LLAMA_MODEL]["provider"] == "llama" and entries[LLAMA_MODEL]["remote_id"] == ALIAS
    assert entries[STARTER_NAME]["format"] == "gguf"


def test_hearth_chat_talks_to_a_listed_remote_model(local, local_home, llama_server, capsys):
    question = "Name three colours."
    direct = llama_server.repeated_chat(
        model=ALIAS, messages=[{"role": "user", "content": question}], temperature=0, top_p=0.95, max_tokens=12
    )
    with data_folder(local_home):
        code = main(["chat", "--model", LLAMA_MODEL, "--temperature", "0", "--max-tokens", "12", question])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.out.strip() == direct.choices[0].message.content.strip()  # greedy: the provider's own answer
    assert "not available locally" not in captured.err

    with data_folder(local_home):  # the same provider with a key it refuses: one sentence, no traceback
        main(["chat", "--model", f"badkey/{ALIAS}", "--max-tokens", "4", question])
    err = capsys.readouterr().err
    assert "The remote provider 'badkey'" in err and "refused the API key" in err and "Traceback" not in err


# -- the local API ----------------------------------------------------------------------------------
def test_models_are_listed_with_their_provider(local, openai_schemas):  # noqa: F811
    with api(local) as c:
        raw = c.get("/models").json()
    openai_schemas("ListModelsResponse", raw)
    owners = {m["id"]: m["owned_by"] for m in raw["data"]}
    assert owners[LLAMA_MODEL] == "llama" and owners[HEARTH_MODEL] == "hearth2"
    assert STARTER_NAME in owners
    assert not any(i.startswith("badkey/") for i in owners)  # refused: nothing to list
    ids = [m.id for m in openai_client(local.base_url, LOCAL_KEY).models.list()]
    assert LLAMA_MODEL in ids and HEARTH_MODEL in ids
    with api(local) as c:
        one = c.get(f"/models/{LLAMA_MODEL}").json()
        missing = c.get("/models/llama/no-such-model")
    openai_schemas("Model", one)
    assert one["id"] == LLAMA_MODEL and one["owned_by"] == "llama"
    assert missing.status_code == 404 and "'llama' does not serve" in missing.json()["error"]["message"]


@pytest.mark.parametrize("public", [LLAMA_MODEL, HEARTH_MODEL])
def test_streamed_chat_passes_through_event_by_event(local, llama_server, provider_hearth, openai_schemas, public):  # noqa: F811
    provider = llama_server if public == LLAMA_MODEL else provider_hearth
    key = LLAMA_KEY if public == LLAMA_MODEL else PROVIDER_KEY
    remote_id = public.split("/", 1)[1]
    body = {"messages": QUESTION, "max_tokens": 16, "temperature": 0, "seed": 1, "stream": True}
    with httpx.Client(base_url=provider.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as c:
        sse(c, "/chat/completions", {**body, "model": remote_id})  # asked twice: see LlamaCppServer.repeated_chat
        direct = sse(c, "/chat/completions", {**body, "model": remote_id})
    with api(local) as c:
        relayed = sse(c, "/chat/completions", {**body, "model": public})

    assert relayed[-1] == "[DONE]"
    chunks = [e for e in relayed if isinstance(e, dict)]
    for chunk in chunks:
        openai_schemas("CreateChatCompletionStreamResponse", chunk)
        assert chunk["model"] == public
    # Every event the provider sent arrives on its own (nothing coalesced), with the same text.
    assert content_of(relayed) == content_of(direct) and len(content_of(relayed)) > 1
    assert len(chunks) == len([e for e in direct if isinstance(e, dict)])

    # The official client sees an ordinary stream.
    stream = openai_client(local.base_url, LOCAL_KEY).chat.completions.create(
        model=public, messages=QUESTION, max_tokens=16, temperature=0, seed=1, stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "".join(content_of(direct))


def test_non_streamed_chat_and_completion_pass_through(local, openai_schemas):  # noqa: F811
    client = openai_client(local.base_url, LOCAL_KEY)
    with api(local) as c:
        raw = c.post("/chat/completions", json={"model": HEARTH_MODEL, "messages": QUESTION, "max_tokens": 8}).json()
    openai_schemas("CreateChatCompletionResponse", raw)
    assert raw["model"] == HEARTH_MODEL and raw["choices"][0]["message"]["content"]
    assert raw["usage"]["completion_tokens"] <= 8

    chat = client.chat.completions.create(model=LLAMA_MODEL, messages=QUESTION, max_tokens=8, temperature=0)
    assert chat.model == LLAMA_MODEL and chat.choices[0].message.content
    text = client.completions.create(model=LLAMA_MODEL, prompt="Once upon a time", max_tokens=6, temperature=0)
    assert text.model == LLAMA_MODEL and text.choices[0].text


def test_a_wrong_key_is_a_clear_401_naming_the_provider(local, llama_server):
    client = openai_client(local.base_url, LOCAL_KEY)
    for stream in (False, True):
        with pytest.raises(openai.AuthenticationError) as err:
            client.chat.completions.create(model=f"badkey/{ALIAS}", messages=QUESTION, max_tokens=4, stream=stream)
        assert err.value.status_code == 401
        message = err.value.body["message"]
        assert message == (
            f"The remote provider 'badkey' at {llama_server.base_url} refused the API key (HTTP 401); "
            "remove it and add it again with the right key."
        )
        assert err.value.body["code"] == "remote_auth_failed"
    # The local API's own key check is a different error: the app tells them apart by code.
    with httpx.Client(base_url=local.base_url, timeout=10) as c:
        own = c.get("/models", headers={"Authorization": "Bearer wrong"})
    assert own.status_code == 401 and own.json()["error"]["code"] == "invalid_api_key"


def test_unreachable_and_hung_providers_are_clear_and_never_block_local_models(local):
    silent = SilentServer()
    down_url = f"http://127.0.0.1:{free_port()}/v1"
    with admin(local) as c:
        for name, url, timeout in (("down", down_url, None), ("hung", silent.base_url, 4)):
            r = c.post("/api/remotes", json={"name": name, "url": url, "timeout": timeout})
            assert r.status_code == 200, r.text
            assert r.json()["state"] == ("unreachable" if name == "down" else "timeout")
    try:
        client = openai_client(local.base_url, LOCAL_KEY)
        with pytest.raises(openai.APIStatusError) as err:
            client.chat.completions.create(model="down/any", messages=QUESTION, max_tokens=4)
        assert err.value.status_code == 502
        assert err.value.body["message"] == (
            f"The remote provider 'down' at {down_url} cannot be reached (connection refused); check that it is running."
        )

        # While a request waits on the hung provider, local chats go on.
        outcome = {}

        def ask_hung():
            try:
                client.chat.completions.create(model="hung/any", messages=QUESTION, max_tokens=4, stream=True)
            except openai.APIStatusError as exc:
                outcome["error"] = exc

        waiting = threading.Thread(target=ask_hung)
        waiting.start()
        local_answer = client.chat.completions.create(model=STARTER_NAME, messages=QUESTION, max_tokens=4, temperature=0)
        still_waiting = waiting.is_alive()
        waiting.join(30)
        assert local_answer.choices[0].message.content and still_waiting
        error = outcome["error"]
        assert error.status_code == 504
        assert error.body["message"] == (
            f"The remote provider 'hung' at {silent.base_url} did not answer within 4 s; "
            "it may be overloaded, or add it again with a longer --timeout."
        )
        # The listing still answers, with the local models and the providers that work.
        ids = [m.id for m in client.models.list()]
        assert STARTER_NAME in ids and LLAMA_MODEL in ids and not any(i.startswith(("down/", "hung/")) for i in ids)
    finally:
        with admin(local) as c:
            assert c.delete("/api/remotes/down").json() == {"removed": "down"}
            assert c.delete("/api/remotes/hung").json() == {"removed": "hung"}
            gone = c.delete("/api/remotes/hung")
        silent.close()
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "provider_not_found"


def test_a_provider_stopped_mid_stream_ends_the_stream_cleanly(local, starter_path):
    dying = LlamaCppServer(starter_path, n_ctx=2048)
    try:
        with admin(local) as c:
            added = c.post("/api/remotes", json={"name": "dying", "url": dying.base_url, "api_key": dying.api_key})
        assert added.json()["models"][0]["id"] == f"dying/{ALIAS}"
        client = openai_client(local.base_url, LOCAL_KEY)
        stream = client.chat.completions.create(
            model=f"dying/{ALIAS}",
            messages=[{"role": "user", "content": "Tell me a very long story about a dragon."}],
            max_tokens=1500,
            stream=True,
        )
        received = []
        with pytest.raises(openai.APIError) as err:
            for chunk in stream:
                received.append(chunk)
                if len(received) == 4:
                    dying.kill()
        assert len(received) >= 4
        assert f"The remote provider 'dying' at {dying.base_url} stopped while answering" in err.value.message

        # Local chats are unaffected, and the dead provider no longer stalls anything.
        answer = client.chat.completions.create(model=STARTER_NAME, messages=QUESTION, max_tokens=4, temperature=0)
        assert answer.choices[0].message.content
        with pytest.raises(openai.APIStatusError) as again:
            client.chat.completions.create(model=f"dying/{ALIAS}", messages=QUESTION, max_tokens=4)
        assert again.value.status_code == 502 and "cannot be reached" in again.value.body["message"]
    finally:
        dying.stop()
        with admin(local) as c:
            c.delete("/api/remotes/dying")


def test_a_hearth_never_forwards_a_forwarded_request(local, provider_hearth):
    """A provider that is, by mistake, a Hearth pointing back answers with its local models only."""
    with api(local) as c:
        plain = [m["id"] for m in c.get("/models").json()["data"]]
        marked = [m["id"] for m in c.get("/models", headers={"X-Hearth-Forwarded": "1"}).json()["data"]]
        refused = c.post(
            "/chat/completions",
            json={"model": LLAMA_MODEL, "messages": QUESTION, "max_tokens": 2},
            headers={"X-Hearth-Forwarded": "1"},
        )
    local_models = [m for m in plain if "/" not in m]  # the providers' models are provider/model
    # (the session's data folder may hold more than the starter: the documents tests' embedding model)
    assert LLAMA_MODEL in plain and STARTER_NAME in marked and marked == local_models
    assert refused.status_code == 404 and refused.json()["error"]["code"] == "model_not_found"


# -- benchmarking a provider ---------------------------------------------------------------------
def test_bench_compares_a_provider_through_hearth_and_directly(local, llama_server, tmp_path):
    out = tmp_path / "report"
    args = ["bench", "--url", local.base_url, "--api-key", LOCAL_KEY, "--model", LLAMA_MODEL]
    args += ["--concurrency", "1", "--requests", "3", "--input-len", "fixed:8", "--output-len", "fixed:6"]
    args += ["--warmup", "0", "--no-ignore-eos", "--out", str(out)]
    assert main(args) == 0
    report = json.loads((out / "bench.json").read_text())
    (server,) = report["setup"]["servers"]
    assert server["kind"] == "hearth" and server["model"] == LLAMA_MODEL
    assert [(r["level"], r["completed"], r["failed"]) for r in report["results"]] == [(1, 3, 0)]
    assert all(r["ok"] and r["ttft_s"] > 0 and r["output_tokens"] >= 1 for r in report["requests"])

    direct = tmp_path / "direct"
    args = ["bench", "--url", llama_server.base_url, "--api-key", LLAMA_KEY, "--model", ALIAS]
    args += ["--concurrency", "1", "--requests", "2", "--input-len", "fixed:8", "--output-len", "fixed:6"]
    args += ["--warmup", "0", "--no-ignore-eos", "--out", str(direct)]
    assert main(args) == 0
    report = json.loads((direct / "bench.json").read_text())
    (server,) = report["setup"]["servers"]
    assert server["kind"] == "llama-cpp-python" and server["model"] == ALIAS
    assert [(r["level"], r["completed"], r["failed"]) for r in report["results"]] == [(1, 2, 0)]


# -- local names first, and remote models in every dialect -----------------------------------------
def anthropic_client(sup) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=sup.base_url.removesuffix("/v1"), api_key=LOCAL_KEY, max_retries=0, timeout=60)


def ollama_client(sup) -> ollama.Client:
    return ollama.Client(host=sup.base_url.removesuffix("/v1"), headers=sup.headers(), timeout=60)


@contextmanager
def imported(home, name: str, path):
    """A local import named ``name`` (the starter's file), for the duration of a test."""
    from engine.catalog.registry import ModelRegistry

    registry = ModelRegistry(home, register_starter=False)
    registry.register(path, name=name)
    try:
        yield name
    finally:
        registry.remove(name)
        registry.close()


def test_a_provider_named_as_a_local_model_owner_is_refused_in_the_cli_and_the_api(local, local_home, starter_path, capsys):
    with imported(local_home, "HuggingFaceTB/smollm2:Q4", starter_path):
        with data_folder(local_home):
            assert main(["remote", "add", "HuggingFaceTB", "http://127.0.0.1:9/v1"]) == 1
        err = capsys.readouterr().err.strip()
        assert err.startswith("hearth: The local model 'HuggingFaceTB/") and err.endswith("choose another provider name.")
        with admin(local) as c:
            r = c.post("/api/remotes", json={"name": "huggingfacetb", "url": "http://127.0.0.1:9/v1"})
            names = [p["name"] for p in c.get("/api/remotes").json()["providers"]]
    assert r.status_code == 400 and r.json()["error"]["param"] == "name"
    assert "would share its names; choose another provider name." in r.json()["error"]["message"]
    assert "HuggingFaceTB" not in names and "huggingfacetb" not in names


def test_a_local_name_resolves_first_even_under_a_providers_name(local, local_home, starter_path):
    """A provider added before a local model took its name as an owner never gets that model's
    chats: were they forwarded, this provider (nothing listens there) would answer 502."""
    down = f"http://127.0.0.1:{free_port()}/v1"
    with admin(local) as c:
        assert c.post("/api/remotes", json={"name": "acme", "url": down}).status_code == 200
    try:
        with imported(local_home, "acme/smollm2:Q4", starter_path) as name:
            client = openai_client(local.base_url, LOCAL_KEY)
            chat = client.chat.completions.create(model=name, messages=QUESTION, max_tokens=4, temperature=0)
            assert chat.model == name and chat.choices[0].message.content
            claude = anthropic_client(local)
            message = claude.messages.create(model=name, messages=QUESTION, max_tokens=4, extra_body={"temperature": 0})
            assert message.model == name and message.content[0].text
            answer = ollama_client(local).chat(
                model=name, messages=QUESTION, options={"temperature": 0, "num_predict": 4}
            )
            assert answer.model == name and answer.message.content
    finally:
        with admin(local) as c:
            c.delete("/api/remotes/acme")


@pytest.fixture
def direct_answer(llama_server) -> str:
    """The provider's own greedy answer to QUESTION, asked directly just before the test relays it."""
    chat = llama_server.repeated_chat(model=ALIAS, messages=QUESTION, temperature=0, max_tokens=12)
    return chat.choices[0].message.content


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_remote_model_through_the_anthropic_sdk(local, direct_answer, stream):
    claude = anthropic_client(local)
    args = {"model": LLAMA_MODEL, "messages": QUESTION, "max_tokens": 12, "extra_body": {"temperature": 0}}
    if stream:
        with claude.messages.stream(**args) as events:
            text = "".join(events.text_stream)
            message = events.get_final_message()
    else:
        message = claude.messages.create(**args)
        text = message.content[0].text
    assert text == direct_answer and message.model == LLAMA_MODEL
    assert message.usage.output_tokens > 0 and message.stop_reason in ("end_turn", "max_tokens")


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_remote_model_through_the_responses_api(local, direct_answer, stream):
    client = openai_client(local.base_url, LOCAL_KEY)
    args = {"model": LLAMA_MODEL, "input": QUESTION[0]["content"], "max_output_tokens": 12, "temperature": 0}
    if stream:
        deltas, final = [], None
        for event in client.responses.create(**args, stream=True):
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
            elif event.type in ("response.completed", "response.incomplete"):
                final = event.response
        assert final is not None and "".join(deltas) == final.output_text
    else:
        final = client.responses.create(**args)
    assert final.output_text == direct_answer and final.model == LLAMA_MODEL


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("kind", ["chat", "generate"])
def test_a_remote_model_through_the_ollama_client(local, direct_answer, kind, stream):
    client = ollama_client(local)
    options = {"temperature": 0, "num_predict": 12}
    if kind == "chat":
        answer = client.chat(model=LLAMA_MODEL, messages=QUESTION, options=options, stream=stream)
    else:
        answer = client.generate(model=LLAMA_MODEL, prompt=QUESTION[0]["content"], options=options, stream=stream)
    parts = list(answer) if stream else [answer]
    text = "".join(p.message.content if kind == "chat" else p.response for p in parts)
    assert text == direct_answer and parts[-1].done
    assert all(p.model == LLAMA_MODEL for p in parts)
    assert f"{LLAMA_MODEL}:latest" in [m.model for m in client.list().models]  # Ollama's apps pick models from /api/tags


def test_a_remote_models_failure_keeps_its_status_in_another_dialect(local, llama_server):
    claude = anthropic_client(local)
    with pytest.raises(anthropic.AuthenticationError) as err:
        claude.messages.create(model=f"badkey/{ALIAS}", messages=QUESTION, max_tokens=4)
    assert err.value.status_code == 401 and "The remote provider 'badkey'" in err.value.message
    with pytest.raises(ollama.ResponseError) as missing:
        ollama_client(local).chat(model="hearth2/no-such-model", messages=QUESTION)
    assert missing.value.status_code == 404  # the provider's own answer to a model it lacks
    assert "The remote provider 'hearth2'" in missing.value.error and "no-such-model" in missing.value.error


def test_a_chat_with_collections_grounds_a_remote_models_prompt(local, llama_server, tmp_path):
    """Chat completions with ``hearth.collections`` run through Hearth's own generation rather than being passed
    through: the provider is sent the system prompt the app built from /api/docs/context, and the answer names
    the sources."""
    from tests.engine.server.test_docs_chat import QUEEN, _wait

    (tmp_path / "bees.md").write_text("# Bees\n\nThe queen of the hive is called Marigold.\n")
    with admin(local) as c:
        assert c.post("/api/docs/collections", json={"name": "remote-bees", "paths": [str(tmp_path)]}).status_code == 202
        try:
            _wait(c, "remote-bees")
            ctx = c.post("/api/docs/context", json={"collections": ["remote-bees"], "question": QUEEN}).json()
            question = [{"role": "user", "content": QUEEN}]
            by_hand = [{"role": "system", "content": ctx["system"]}, *question]
            direct = llama_server.repeated_chat(model=ALIAS, messages=by_hand, temperature=0, max_tokens=12)
            grounded = openai_client(local.base_url, LOCAL_KEY).chat.completions.create(
                model=LLAMA_MODEL, messages=question, temperature=0, max_tokens=12,
                extra_body={"hearth": {"collections": ["remote-bees"]}},
            )  # fmt: skip
        finally:
            c.delete("/api/docs/collections/remote-bees")
    assert grounded.model == LLAMA_MODEL
    assert [s["label"] for s in grounded.model_extra["hearth"]["sources"]] == ["[1] bees.md, Bees"]
    # (the remote path's usage has no prompt count to compare: the same greedy answer to the same prompt)
    assert grounded.choices[0].message.content == direct.choices[0].message.content
    assert "Marigold" in direct.choices[0].message.content

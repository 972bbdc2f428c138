"""A streamed answer's events follow the server's stream interval (``hearth serve --stream-interval``): each
carries the tokens made since the last, while its first token and its end go at once."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from engine.server import ServerSettings, create_app

MODEL = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def paced(tmp_path_factory):
    from engine.backends import LoadOptions
    from engine.catalog.registry import ModelRegistry
    from engine.pool import ModelManager

    registry = ModelRegistry(tmp_path_factory.mktemp("home"))
    manager = ModelManager(registry, options=LoadOptions(n_ctx=1024, n_seq_max=2))
    settings = ServerSettings(stream_interval_ms=1000)
    with TestClient(create_app(settings, manager), base_url="http://127.0.0.1") as client:
        yield client
    manager.close()
    registry.close()


def test_a_stream_at_an_interval_sends_the_same_answer_in_fewer_events(paced):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Count from one to thirty in words."}],
            "max_tokens": 32, "temperature": 0, "logprobs": True, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    per_event: list[int] = []  # tokens in each event that carries any
    text = ""
    usage = None
    with paced.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            usage = event.get("usage") or usage
            for choice in event["choices"]:
                content = (choice.get("logprobs") or {}).get("content") or []
                if content:
                    per_event.append(len(content))
                text += choice["delta"].get("content") or ""
    assert usage is not None and sum(per_event) == usage["completion_tokens"] > 8
    # the tokens after the first waited for the interval (or for the end, which goes at once): far fewer events
    # than tokens (which chunks go at once: tests/engine/backends/test_delivery.py)
    assert len(per_event) < usage["completion_tokens"] / 2
    plain = paced.post("/v1/chat/completions", json={**body, "stream": False}).json()
    assert plain["choices"][0]["message"]["content"] == text  # the same answer, only in fewer pieces


def test_the_stream_interval_flag_reaches_the_settings(capsys):
    from engine.cli import build_parser
    from engine.commands.serve import server_settings

    parse = build_parser().parse_args
    assert server_settings(parse(["serve", "--stream-interval", "40"]), {}).stream_interval_ms == 40
    assert server_settings(parse(["serve"]), {}).stream_interval_ms == 0  # every token as it comes
    with pytest.raises(SystemExit) as exit_:
        parse(["serve", "--stream-interval", "fast"])
    assert exit_.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--stream-interval" in last and "milliseconds from 0 to 1000" in last

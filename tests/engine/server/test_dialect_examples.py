"""The Local API page's copyable examples for the other dialects work against a real server."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.engine.server.conftest import MODEL


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_each_dialect_example_is_answered(server):
    from app.pages.api_page import dialect_examples

    for d in dialect_examples(server.port, server.api_key, MODEL):
        out = subprocess.run(["bash", "-c", d.example + " --silent --show-error --fail"], capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, (d.name, out.stderr)
        last = json.loads(out.stdout.strip().splitlines()[-1])  # Ollama's example streams NDJSON
        assert last.get("type") == "message" or last.get("object") == "response" or last.get("done") is True, d.name
        # each example bounds its answer, as Anthropic's API requires (a sampled "Hello!" can run on for minutes)
        usage = last.get("usage") or {}
        assert 1 <= usage.get("output_tokens", last.get("eval_count", 0)) <= 256, (d.name, last)

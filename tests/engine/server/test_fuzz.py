"""A bounded fuzz run of the OpenAI endpoints against a real `hearth serve` (fuzzing.py says what is
checked); benchmarks/fuzz.py runs the same for as long as asked."""

from __future__ import annotations

import httpx
import pytest

from tests.engine.server import fuzzing
from tests.engine.server.conftest import MODEL

# Per operation; the same cases every run (hypothesis derandomized): about 50 per document. On a busy
# machine an operation stops starting cases after SECONDS, once it has run AT_LEAST (an idle machine
# runs them all well within that). The long run is benchmarks/fuzz.py.
EXAMPLES = {"POST": 15, "GET": 3}
SECONDS = 30
AT_LEAST = 5


def fuzz(server, doc: dict, openai_spec: dict, *, conformance: bool, base_url: str) -> fuzzing.Findings:
    return fuzzing.fuzz(
        doc,
        base_url,
        headers=server.headers,
        openai=fuzzing.OpenAISchemas(openai_spec),
        max_examples=EXAMPLES,
        conformance=conformance,
        seconds_per_operation=SECONDS,
        min_examples=AT_LEAST,
    )


def assert_clean(server, findings: fuzzing.Findings, *, at_least: int) -> None:
    assert not findings.failures, findings.summary()
    assert findings.cases >= at_least, findings.summary()
    assert 200 in findings.statuses, findings.summary()
    assert server.proc.poll() is None, "the worker died"
    assert httpx.get(f"{server.root}/health", timeout=10).json()["status"] == "ok"


@pytest.mark.slow
def test_requests_from_openais_spec_are_accepted_and_answered_in_shape(server, openai_spec):
    doc = fuzzing.openai_spec_for_hearth(openai_spec, MODEL)
    findings = fuzz(server, doc, openai_spec, conformance=False, base_url=server.base_url)
    assert_clean(server, findings, at_least=3 * AT_LEAST)


@pytest.mark.slow
def test_requests_from_the_servers_own_document_conform_to_it(server, openai_spec):
    served = httpx.get(f"{server.root}/openapi.json", headers=server.headers, timeout=30).json()
    doc = fuzzing.app_spec_for_hearth(served, MODEL)
    findings = fuzz(server, doc, openai_spec, conformance=True, base_url=server.root)
    assert_clean(server, findings, at_least=3 * AT_LEAST)

"""A bounded fuzz run of the OpenAI endpoints against a real `hearth serve` (fuzzing.py says what is
checked), and of every operation of its /openapi.json for server errors, with the Hub stand-in behind
it; benchmarks/fuzz.py runs the same for as long as asked."""

from __future__ import annotations

import httpx
import pytest

from tests.engine.server import fuzzing, schema_fuzzing
from tests.engine.server.conftest import API_KEY, MODEL, Server

# Per operation; the same cases every run (hypothesis derandomized): about 35 per document. On a busy
# machine an operation stops starting cases after SECONDS, once it has run AT_LEAST (an idle machine
# runs them all well within that). The long run is benchmarks/fuzz.py.
EXAMPLES = {"POST": 10, "GET": 3}
SECONDS = 30
AT_LEAST = 5
# Every operation of the server's own document, for server errors only: about 130 cases (the long run is
# benchmarks/fuzz.py).
EVERY_EXAMPLES = 3
EVERY_SECONDS = 10


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


ADMIN_KEY = "fuzz-admin-key"


@pytest.fixture(scope="module")
def hub_backed_server(tmp_path_factory):
    """A `hearth serve` of its own: its own data folder, the Hub stand-in as its hub, started in an
    empty folder (a fuzzed relative path finds nothing of the repository)."""
    tmp = tmp_path_factory.mktemp("fuzz-every")
    docs = tmp / "docs"
    docs.mkdir()
    (docs / "otters.txt").write_text("Sea otters hold hands while they sleep.\n")
    with fuzzing.hub_stand_in(tmp / "hub") as hub:
        work = tmp / "cwd"
        work.mkdir()
        server = Server(
            "--ctx", "2048", "--admin-key", ADMIN_KEY, env=fuzzing.every_operation_env(tmp / "home", hub.url), cwd=work,
            log=tmp / "serve.log",
        )  # fmt: skip
        server.api_key = ADMIN_KEY  # the module's tests ask as the admin; the fuzz run asks with each key
        server.docs = docs
        try:
            yield server
        finally:
            server.stop()


def test_an_empty_model_in_fit_is_a_400_naming_the_field(hub_backed_server):
    r = httpx.get(f"{hub_backed_server.root}/api/fit", params={"model": ""}, headers=hub_backed_server.headers, timeout=30)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "model" and "'model'" in error["message"]
    assert "/" not in error["message"].split(";")[0]  # no path of the server's folder in it


@pytest.mark.parametrize("name", ["owner/re po", "owner/name--x", "owner/" + "n" * 100, "owner/.name"])
def test_a_pull_the_hub_client_would_reject_is_a_400_naming_the_field(hub_backed_server, name):
    r = httpx.post(f"{hub_backed_server.root}/api/pull", json={"model": name}, headers=hub_backed_server.headers, timeout=30)
    assert r.status_code == 400, r.text
    assert "'model'" in r.json()["error"]


@pytest.mark.parametrize(("route", "field"), [("/api/hub/variants", "repo"), ("/api/downloads", "repo")])
def test_a_repo_name_the_hub_client_would_reject_is_a_400_naming_the_field(hub_backed_server, route, field):
    url = f"{hub_backed_server.root}{route}"
    h = hub_backed_server.headers
    r = httpx.get(url, params={"repo": "owner/re po"}, headers=h, timeout=30) if route.endswith("variants") else (
        httpx.post(url, json={"repo": "owner/re po"}, headers=h, timeout=30)
    )
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == field


@pytest.mark.parametrize(("route", "body", "field"), [
    ("/api/models/import", {"path": "~no-such-user-here/model.gguf"}, "path"),  # benchmarks/fuzz.py found it (a 500)
    ("/api/models/import", {"path": "model\u0000.gguf"}, "path"),
    ("/api/docs/collections", {"name": "c", "paths": ["~no-such-user-here/notes"]}, "paths"),
    ("/api/docs/collections", {"name": "c", "paths": ["notes\u0000"]}, "paths"),
    ("/api/models/import", {"path": "m" * 300}, "path"),  # ENAMETOOLONG, a 500 before
    ("/api/models/import", {"path": "model.gguf", "mmproj": "/x" + "/p" * 2100}, "mmproj"),
    ("/api/folders", {"path": "f" * 300}, "path"),
    ("/api/docs/collections", {"name": "c", "paths": ["n" * 300]}, "paths"),
])  # fmt: skip
def test_a_path_no_file_can_have_is_a_400_naming_the_field(hub_backed_server, route, body, field):
    r = httpx.post(f"{hub_backed_server.root}{route}", json=body, headers=hub_backed_server.headers, timeout=30)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == field


@pytest.mark.slow
@pytest.mark.parametrize("key", [API_KEY, ADMIN_KEY], ids=["inference-key", "admin-key"])
def test_every_operation_of_the_servers_document_answers_without_a_server_error(hub_backed_server, key):
    """With the inference key the admin's operations are refused (403) and the rest must hold as well."""
    server = hub_backed_server
    served = httpx.get(f"{server.root}/openapi.json", headers=server.headers, timeout=30).json()
    doc = fuzzing.every_operation_spec(served, docs_folder=str(server.docs), remote_url=fuzzing.REMOTE_URL, hub_repo=fuzzing.HUB_REPO)
    operations = {f"{m.upper()} {p}" for p, item in doc["paths"].items() for m in item if m != "parameters"}
    assert {"POST /api/pull", "GET /api/fit", "POST /api/downloads", "GET /api/hub/variants", "GET /api/hub/search"} <= operations
    findings = fuzzing.fuzz(
        doc, server.root, headers={"Authorization": f"Bearer {key}"}, openai=None, max_examples=EVERY_EXAMPLES,
        conformance=False,
        server_errors_only=True, seconds_per_operation=EVERY_SECONDS, min_examples=3,
    )  # fmt: skip
    assert not findings.failures, findings.summary()
    assert set(findings.by_operation) == operations, findings.summary()  # every operation was fuzzed
    assert findings.statuses.get(200) and not any(s >= 500 for s in findings.statuses), findings.summary()
    assert server.proc.poll() is None, "the worker died"
    assert httpx.get(f"{server.root}/health", timeout=10).json()["status"] == "ok"


# Seeded, so the same schemas every run: 60 took 27 s on two cores at a load of 14 (most are refused before a
# grammar is built; the code before the schema bounds died on the fifth, maxLength 20,000 in Ollama's format).
SCHEMA_CASES = 60


def test_fuzzed_json_schemas_never_kill_the_worker_and_each_is_answered_or_refused_in_a_sentence(server):
    findings = schema_fuzzing.fuzz_schemas(server.root, server.headers, MODEL, seed=45, cases=SCHEMA_CASES)
    assert server.proc.poll() is None, f"the worker died ({server.proc.returncode}); {findings.summary()}"
    assert not findings.failures, findings.summary()
    assert findings.statuses.get(200) and findings.statuses.get(400), findings.summary()  # both sides were reached
    assert httpx.get(f"{server.root}/health", timeout=10).json()["status"] == "ok"


def test_the_stream_check_takes_an_echoed_prompts_null_first_logprob_and_nothing_else(server, openai_spec):
    """An echoed prompt's first token has no log-probability (null, as OpenAI's legacy API gives it), where OpenAI's
    schema types each a number: the check reads it as OpenAI answers, for each choice, and still catches a null
    further on."""
    from types import SimpleNamespace

    check = fuzzing.response_checks(fuzzing.OpenAISchemas(openai_spec))[1]
    body = {"model": MODEL, "prompt": "Once upon", "echo": True, "logprobs": 2, "max_tokens": 2, "n": 2,
            "temperature": 0, "stream": True}  # fmt: skip
    r = httpx.post(f"{server.base_url}/completions", json=body, headers=server.headers, timeout=60)
    assert r.status_code == 200 and '"token_logprobs":[null,' in r.text
    case = SimpleNamespace(path="/v1/completions", body=body)
    headers = {"content-type": [r.headers["content-type"]]}  # as schemathesis gives them
    assert check(None, SimpleNamespace(status_code=200, headers=headers, text=r.text), case)
    broken = SimpleNamespace(status_code=200, headers=headers,
                             text=r.text.replace('"token_logprobs":[null,', '"token_logprobs":[0.0,null,', 1))  # fmt: skip
    with pytest.raises(AssertionError, match="off OpenAI's schema"):
        check(None, broken, case)

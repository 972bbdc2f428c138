"""The app reads the worker's /api answers with the worker's own response models (engine.server.api_models):
each call against the session's real worker yields the shared model with the machine's and the model's facts,
and every /api route the app calls declares its model in the worker's OpenAPI document."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import httpx
import psutil
import pytest

from engine.server import api_models as am
from engine.starter import STARTER_NAME
from tests.app.conftest import WORKER_ARGS

APP = Path(__file__).resolve().parents[2] / "app"
CTX = int(WORKER_ARGS[WORKER_ARGS.index("--ctx") + 1])


@pytest.fixture(scope="module")
def api(qapp, engine):
    from app.net.api import HearthApi

    client = HearthApi(engine)
    yield client
    client.deleteLater()


def answer(qtbot, call):
    failed = []
    call.failed.connect(failed.append)
    with qtbot.waitSignal(call.succeeded, timeout=60_000, raising=False) as blocker:
        pass
    assert not failed, failed[0].message
    assert blocker.signal_triggered, "the worker did not answer"
    return blocker.args[0]


def test_the_model_list_and_a_load_parse_into_the_shared_models(qtbot, api, starter_path):
    models = answer(qtbot, api.models())
    assert all(isinstance(m, am.ModelInfo) for m in models)
    starter = next(m for m in models if m.name == STARTER_NAME)
    assert (starter.format, starter.quantization, starter.has_chat_template) == ("gguf", "Q4_1", True)
    assert starter.size_bytes == starter_path.stat().st_size
    loaded = answer(qtbot, api.load_model(STARTER_NAME))
    assert isinstance(loaded, am.LoadAnswer) and loaded.state == "loaded" and loaded.backend == "llamacpp"
    assert loaded.n_ctx_train >= loaded.n_ctx > 0
    stats = answer(qtbot, api.stats())
    # --ctx is each request's context: the app learns the chat's limit from here
    assert stats.model(STARTER_NAME).n_ctx == CTX and stats.model(STARTER_NAME).backend == "llamacpp"


def test_hardware_and_fit_parse_into_the_shared_models(qtbot, api):
    report = answer(qtbot, api.hardware())
    assert isinstance(report, am.HardwareReport)
    hw = report.hardware
    assert hw.ram_total == psutil.virtual_memory().total
    assert hw.cpu.cores_logical == os.cpu_count()
    gguf = report.backend_for("gguf")
    assert isinstance(gguf, am.BackendChoice) and gguf.backend == "llamacpp" and gguf.reason
    fit = answer(qtbot, api.fit(STARTER_NAME, ctx=2048))
    assert fit.model == STARTER_NAME and fit.n_ctx == 2048 and fit.fits
    cpu = next(d for d in fit.devices if d.device == "cpu")
    assert cpu.weights == fit.weights > 0 and cpu.usable > cpu.total


def test_catalog_lists_parse_into_the_shared_models(qtbot, api):
    picks = answer(qtbot, api.hub_recommended(live=False))
    assert isinstance(picks, am.RecommendedList) and not picks.asked_hub and picks.models
    assert {m.category for m in picks.models} <= {c.id for c in picks.categories}
    assert all(m.variants and m.label for m in picks.models)
    downloads = answer(qtbot, api.downloads())
    assert isinstance(downloads, list) and all(isinstance(d, am.Download) for d in downloads)
    found = answer(qtbot, api.other_apps())
    assert isinstance(found, am.OtherAppsFound) and found.total_bytes == sum(m.size_bytes for m in found.models)
    providers = answer(qtbot, api.remotes())
    assert isinstance(providers, list) and all(isinstance(p, am.ProviderInfo) for p in providers)


def test_an_answer_of_another_shape_fails_the_call_with_a_sentence(qtbot, api):
    call = api.get("/api/stats", am.HardwareReport.model_validate)  # the stats are no hardware report
    with qtbot.waitSignal(call.failed, timeout=10_000) as blocker:
        pass
    assert blocker.args[0].message == "The engine sent an answer to GET /api/stats the app cannot read."


def app_routes() -> set[tuple[str, str]]:
    """(method, path template) of each /api call in the app's code, ``{}`` where the path has a value."""
    calls = set()
    verbs = {"get": "GET", "post": "POST", "delete": "DELETE"}
    nodes = [node for path in APP.rglob("*.py") for node in ast.walk(ast.parse(path.read_text()))]
    for node in nodes:
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args):
            continue
        name, args = node.func.attr, node.args
        if name == "call" and len(args) > 1 and isinstance(args[0], ast.Constant):
            method, target = args[0].value, args[1]
        elif name in verbs:
            method, target = verbs[name], args[0]
        else:
            continue
        path = ast.unparse(target).strip("f'\"")
        path = re.sub(r"\{[^}]*\}", "{}", path.split("?", 1)[0])
        if path.startswith("/api/"):
            calls.add((method, path))
    return calls


def test_every_api_route_the_app_calls_declares_its_response_model(engine):
    doc = httpx.get(f"{engine.root_url}/openapi.json", headers={"Authorization": f"Bearer {engine.token}"}).json()
    served = {
        (method.upper(), re.sub(r"\{[^}]*\}", "{}", path)): op
        for path, ops in doc["paths"].items()
        for method, op in ops.items()
    }
    calls = app_routes()
    assert len(calls) >= 15  # the parse above still finds the app's calls
    for route in sorted(calls):
        assert route in served, f"the worker does not serve {route}"
        ok = next(answer for status, answer in served[route]["responses"].items() if status.startswith("2"))
        schema = ok["content"]["application/json"]["schema"]
        ref = schema.get("$ref", "")
        assert ref.startswith("#/components/schemas/"), f"{route} declares no response model"
        assert hasattr(am, ref.rsplit("/", 1)[1]), f"{route} answers with {ref}, not a shared model"


def test_a_remote_provider_and_its_models_parse_into_the_shared_models(qtbot, api, engine):
    # The worker itself as the provider: its OpenAI endpoint lists the starter model.
    added = answer(qtbot, api.add_remote("loopback", f"{engine.root_url}/v1", engine.token))
    try:
        assert isinstance(added, am.ProviderInfo) and added.state == "ok", added.message
        served = {m.remote_id: m for m in added.models}
        starter = served[STARTER_NAME]
        assert isinstance(starter, am.RemoteModelInfo)
        assert (starter.id, starter.provider) == (f"loopback/{STARTER_NAME}", "loopback")
        listed = answer(qtbot, api.remotes())
        assert "loopback" in [p.name for p in listed if p.models]
    finally:
        assert answer(qtbot, api.remove_remote("loopback")) == "loopback"
    assert "loopback" not in {p.name for p in answer(qtbot, api.remotes())}

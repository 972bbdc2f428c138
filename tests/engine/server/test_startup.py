"""Start-up tells the truth: /health says "loading" (503) until the models the worker was started with have
loaded, a request that names no model waits for them, and /api/worker names each that failed with the reason."""

from __future__ import annotations

import threading

from fastapi.testclient import TestClient

from engine.backends import LoadOptions, create_backend
from engine.catalog.registry import ModelRegistry
from engine.pool import ModelManager
from engine.server import ServerSettings, create_app
from engine.worker.main import start_preload
from tests.engine.server.conftest import MODEL


def test_health_says_loading_until_the_start_models_load_and_a_request_without_a_model_waits(tmp_path):
    gate = threading.Event()  # the load goes on once the test has seen the worker loading

    def held_backend(name: str):
        gate.wait(60)
        return create_backend(name)

    registry = ModelRegistry(tmp_path)
    manager = ModelManager(registry, options=LoadOptions(n_ctx=512, n_seq_max=1, n_threads=1), backend_factory=held_backend)
    try:
        with TestClient(create_app(ServerSettings(), manager), base_url="http://127.0.0.1") as api:
            loading = start_preload(manager, ("nosuch", MODEL))
            r = api.get("/health")
            assert (r.status_code, r.json()) == (503, {"status": "loading"})
            assert api.get("/api/worker").json()["loading"] is True
            answers: list = []
            asker = threading.Thread(target=lambda: answers.append(api.post("/tokenize", json={"content": "Hi"})))
            asker.start()
            gate.set()
            asker.join(120)
            loading.join(120)
            (r,) = answers
            assert r.status_code == 200, r.text  # the start model answered, not "No model is loaded"
            assert len(r.json()["tokens"]) >= 1
            r = api.get("/health")
            assert r.status_code == 200 and r.json()["status"] == "ok"
            worker = api.get("/api/worker").json()
            assert worker["loading"] is False
            assert list(worker["load_errors"]) == ["nosuch"]
            assert "hearth models" in worker["load_errors"]["nosuch"]
    finally:
        gate.set()
        manager.close()
        registry.close()

"""HearthApi builds each request body from the worker's own request model (engine.server.api_models): the JSON
is what the app always sent, field for field, and each body is one the worker's route accepts as it is."""

from __future__ import annotations

import json

from app.net.api import HearthApi
from app.net.engine import EngineController
from engine.server import api_models as am


class RecordingApi(HearthApi):
    """Keeps what each call would send instead of sending it."""

    def __init__(self, engine: EngineController) -> None:
        super().__init__(engine)
        self.sent: list[tuple[str, str, object]] = []

    def call(self, method, path, parse=lambda d: d, body=None, **_kw):  # type: ignore[override]
        self.sent.append((method, path.split("?", 1)[0], body))


def test_each_body_is_the_json_it_always_was_and_the_route_takes_it(qapp):
    engine = EngineController()
    api = RecordingApi(engine)
    try:
        api.load_model("tiny")
        api.unload_model("tiny")
        api.import_model("/models/tiny.gguf")
        api.accept_other_apps()
        api.add_folder("/models", first=True)
        api.add_remote("lab", "http://lab:8000/v1")
        api.start_download("owner/repo", "Q4_K_M")
        api.add_collection("notes", ["/home/notes"])
        api.collection_action("my notes", "pause")
        api.save_model_settings("tiny", am.LoadSettings(n_ctx=8192))
    finally:
        api.deleteLater()
        engine.deleteLater()
    assert [(m, p, json.dumps(b)) for m, p, b in api.sent] == [
        ("POST", "/api/models/load", '{"model": "tiny"}'),
        ("POST", "/api/models/unload", '{"model": "tiny"}'),
        ("POST", "/api/models/import", '{"path": "/models/tiny.gguf"}'),
        ("POST", "/api/other-apps/accept", "{}"),
        ("POST", "/api/folders", '{"path": "/models", "first": true}'),
        ("POST", "/api/remotes", '{"name": "lab", "url": "http://lab:8000/v1", "api_key": null}'),
        ("POST", "/api/downloads", '{"repo": "owner/repo", "variant": "Q4_K_M"}'),
        ("POST", "/api/docs/collections", '{"name": "notes", "paths": ["/home/notes"]}'),
        ("POST", "/api/docs/collections/my%20notes/pause", "{}"),
        ("PUT", "/api/models/tiny/settings", json.dumps({**dict.fromkeys(am.LoadSettings.model_fields), "n_ctx": 8192})),
    ]  # fmt: skip
    routes = [am.ModelLoadBody, am.LoadBody, am.ImportBody, am.AcceptBody, am.FolderBody, am.RemoteBody,
              am.DownloadBody, am.AddBody, None, am.ModelSettingsBody]  # fmt: skip
    for model, (_m, _p, body) in zip(routes, api.sent, strict=True):
        if model is not None:
            assert model.model_validate(body).model_extra in (None, {})  # no field the route does not declare

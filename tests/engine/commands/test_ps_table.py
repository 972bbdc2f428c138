"""`hearth ps` counts the memory of weights several loaded names answer from (a model made from another with its own
defaults, or a copy) once: on the first of those names, the others saying whose it is."""

from __future__ import annotations

import argparse

import pytest

from engine.commands import ps
from engine.commands.worker_client import WorkerClient


def _entry(name: str, shares: list[str], size: int = 150 * 2**20) -> dict:
    return {"name": name, "backend": "llamacpp", "in_use": 0, "loaded_at": 0.0, "size_bytes": size, "idle_seconds": 3.0,
            "keep_alive": None, "expires_in": None, "shares_weights_with": shares}  # fmt: skip


class _Worker:
    """A worker's GET /api/stats answer (the route's shape: tests/engine/server/test_ollama_create.py reads it)."""

    url = "http://127.0.0.1:1"

    def __init__(self, loaded: list[dict]) -> None:
        self.stats = {"requests_in_flight": 0, "loaded": loaded,
                      "models": {e["name"]: {"n_ctx_per_sequence": 1024, "slots": 2} for e in loaded}}  # fmt: skip

    def request(self, method: str, path: str, body: dict | None = None, **_kw) -> dict:
        assert (method, path) == ("GET", "/api/stats")
        return self.stats


def _table(monkeypatch, capsys: pytest.CaptureFixture[str], worker: _Worker) -> list[list[str]]:
    monkeypatch.setattr(WorkerClient, "from_args", classmethod(lambda cls, args: worker))
    assert ps.run(argparse.Namespace(json=False)) == 0
    return [line.split("  ") for line in capsys.readouterr().out.splitlines()]


def test_weights_shared_by_names_are_counted_once(monkeypatch, capsys: pytest.CaptureFixture[str]):
    worker = _Worker([_entry("base", ["pirate"]), _entry("other", [], 300 * 2**20), _entry("pirate", ["base"])])
    rows = {cells[0]: " ".join(c.strip() for c in cells if c.strip()) for cells in _table(monkeypatch, capsys, worker)[1:]}
    assert "llamacpp 157.3 MB" in rows["base"] and "314.6 MB" in rows["other"]
    assert "shared with base" in rows["pirate"] and "MB" not in rows["pirate"]


def test_the_json_names_the_sharing():
    worker = _Worker([_entry("base", ["pirate"]), _entry("pirate", ["base"])])
    rows = ps.loaded_models(worker)  # type: ignore[arg-type]
    assert [(r["name"], r["shares_weights_with"], r["size_bytes"]) for r in rows] == [
        ("base", ["pirate"], 150 * 2**20), ("pirate", ["base"], 150 * 2**20)
    ]

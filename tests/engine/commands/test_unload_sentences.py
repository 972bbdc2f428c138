"""`hearth unload` says when a model's weights stay loaded for another name that answers from them (a model made
from it with its own defaults, or a copy): unloading that one name frees no memory."""

from __future__ import annotations

import argparse

import pytest

from engine.commands import load
from engine.commands.worker_client import WorkerClient


class _Worker:
    """The worker's /api/models/unload answers, by name (what the route answers, not a second implementation)."""

    def __init__(self, answers: dict[str, dict]) -> None:
        self.answers = answers
        self.asked: list[str] = []

    def request(self, method: str, path: str, body: dict | None = None, **_kw) -> dict:
        assert (method, path) == ("POST", "/api/models/unload") and body is not None
        self.asked.append(body["model"])
        return self.answers[body["model"]]


def _unload(monkeypatch, worker: _Worker, *argv: str) -> int:
    monkeypatch.setattr(WorkerClient, "from_args", classmethod(lambda cls, args: worker))
    args = argparse.Namespace(model=argv[0] if argv else None, all=False, json=False)
    return load.run_unload(args)


def test_unloading_a_name_whose_weights_another_uses_says_they_stay(monkeypatch, capsys: pytest.CaptureFixture[str]):
    worker = _Worker({"base": {"name": "base", "state": "not-loaded", "unloaded": True, "weights_kept_for": ["pirate"]}})
    assert _unload(monkeypatch, worker, "base") == 0
    out = capsys.readouterr().out.splitlines()
    assert out == ["Unloaded base.", "base's weights stay loaded for pirate, which answers from them too; "
                   "unload it as well to free their memory."]  # fmt: skip


def test_unloading_the_last_name_says_nothing_more(monkeypatch, capsys: pytest.CaptureFixture[str]):
    worker = _Worker({"pirate": {"name": "pirate", "state": "not-loaded", "unloaded": True, "weights_kept_for": []},
                      "gone": {"name": "gone", "state": "not-loaded", "unloaded": False}})  # fmt: skip
    assert _unload(monkeypatch, worker, "pirate") == 0
    assert capsys.readouterr().out.splitlines() == ["Unloaded pirate."]
    assert _unload(monkeypatch, worker, "gone") == 0  # (an older worker's answer has no weights_kept_for)
    assert capsys.readouterr().out.splitlines() == ["gone was not loaded."]


def test_weights_kept_for_several_names_are_said_in_the_plural(monkeypatch, capsys: pytest.CaptureFixture[str]):
    worker = _Worker({"base": {"name": "base", "state": "not-loaded", "unloaded": True, "weights_kept_for": ["a", "b"]}})
    assert _unload(monkeypatch, worker, "base") == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "base's weights stay loaded for a, b, which answer from them too; unload those as well to free their memory."
    )

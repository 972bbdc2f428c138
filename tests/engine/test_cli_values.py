"""Every number and name the CLI takes is checked where it enters, with one sentence, and the admin API refuses
the same value with the same sentence. All in-process: the parser, the commands and the app (no model loads)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from engine import validation as valid
from engine.cli import build_parser, main
from engine.errors import InvalidRequest

BAD_NUMBERS = ("-1", "-5", "abc", "", "nan", "99999999999999999999")
# Flags whose values are text the command reads itself (a path, a URL, a model name, a list of levels).
_TEXT_TYPES = (None, str, Path)


def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            named = {}
            for name, sub in action.choices.items():  # each command once, by its own name (not an alias: `ls`)
                named.setdefault(id(sub), (name, sub))
            for name, sub in named.values():
                yield from _parsers(sub, (*path, name))


def _value_flags():
    """(command path, its positionals filled in, flag) for every flag with a value of a checked type."""
    for path, parser in _parsers(build_parser()):
        positionals = ["x" for a in parser._actions if not a.option_strings and a.nargs in (None, "?")
                       and not isinstance(a, argparse._SubParsersAction)]  # fmt: skip
        for action in parser._actions:
            if action.option_strings and action.type not in _TEXT_TYPES and action.choices is None:
                yield path, positionals, action


FLAGS = list(_value_flags())


def test_no_flag_takes_a_bare_int_or_float():
    bare = [f"hearth {' '.join(path)} {a.option_strings[-1]}" for path, _, a in FLAGS if a.type in (int, float)]
    assert bare == []
    assert len(FLAGS) > 40  # serve, daemon, load, chat, fit, bench...


@pytest.mark.parametrize(
    ("path", "positionals", "action"),
    [pytest.param(*flag, id=f"{' '.join(flag[0])} {flag[2].option_strings[-1]}") for flag in FLAGS],
)
def test_every_numeric_flag_refuses_bad_values_in_one_sentence(path, positionals, action, capsys):
    parser = build_parser()
    name = "/".join(action.option_strings)  # how argparse names the flag in its refusal
    for bad in BAD_NUMBERS:
        with pytest.raises(SystemExit) as stop:
            parser.parse_args([*path, *positionals, f"{action.option_strings[-1]}={bad}"])
        assert stop.value.code == 2, (name, bad)
        err = capsys.readouterr().err
        assert err.strip().splitlines()[-1].startswith(f"hearth {' '.join(path)}: error: argument {name}: "), err
        assert "Traceback" not in err


def test_the_reported_values_are_refused_before_anything_starts(capsys):
    for argv, said in (
        (["serve", "--port", "99999"], "argument --port: 'port' must be a whole number from 0 to 65535."),
        (["serve", "--port", "-1"], "argument --port: 'port' must be a whole number from 0 to 65535."),
        (["daemon", "up", "--port", "99999"], "'port' must be a whole number from 0 to 65535."),
        (["daemon", "up", "--ctx", "-1"], "argument --ctx: 'ctx' must be a whole number from 16 to 268435456."),
        (["serve", "--idle-ttl", "-5"], "argument --idle-ttl: 'idle_ttl' must be seconds (0 or more)"),
        (["chat", "--ctx", "0", "hi"], "'ctx' must be a whole number from 16"),
        (["load", "m", "--ttl", "soon"], "'ttl' must be seconds (0 or more), a duration such as '10m'"),
    ):
        with pytest.raises(SystemExit):
            build_parser().parse_args(argv)
        assert said in capsys.readouterr().err, argv
    args = build_parser().parse_args(["serve", "--idle-ttl", "never"])
    assert args.idle_ttl is None
    assert build_parser().parse_args(["serve", "--idle-ttl", "10m"]).idle_ttl == 600.0
    assert build_parser().parse_args(["load", "m", "--ttl", "1h30m"]).ttl == "1h30m"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["folders", "add", ""], "hearth: 'path' is empty; give the path of a file or folder."),
        (["folders", "rm", " "], "hearth: 'path' is empty; give the path of a file or folder."),
        (["import", ""], "hearth: 'path' is empty; give the path of a file or folder."),
        (["import", "model.gguf", "--name", "bad name/with:colon"], "hearth: 'bad name/with:colon' cannot name a model"),
        (["import", "model.gguf", "--name", "a:b:c"], "hearth: 'a:b:c' cannot name a model"),
        (["import", "model.gguf", "--name", ":tag"], "hearth: ':tag' cannot name a model"),
    ],
)
def test_names_and_paths_are_refused_by_the_command_in_one_sentence(argv, said, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HEARTH_HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith(said), err
    assert not (tmp_path / "model-folders.json").exists() or str(tmp_path) not in (tmp_path / "model-folders.json").read_text()


def test_model_names_of_ones_own():
    for good in ("my-model", "my-model:q4", "Qwen2.5-7B:Q4_K_M", "a.b_c"):
        assert valid.model_name(good) == good
    for bad in ("", "a b", "a/b", "-x", "a:", "x" * 129, "a\nb"):
        with pytest.raises(InvalidRequest):
            valid.model_name(bad)


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    from engine.catalog.registry import ModelRegistry
    from engine.pool import ModelManager
    from engine.server import ServerSettings, create_app

    registry = ModelRegistry(tmp_path_factory.mktemp("home"))
    manager = ModelManager(registry)
    with TestClient(create_app(ServerSettings(), manager), base_url="http://127.0.0.1") as client:
        yield client
    manager.close()
    registry.close()


@pytest.mark.parametrize(
    ("field", "value", "flag"),
    [("ctx", -1, "--ctx"), ("parallel", 0, "--parallel"), ("batch", 0, "--batch"), ("gpu_layers", -2, "--gpu-layers"),
     ("keep_alive", "-5", "--ttl"), ("keep_alive", "soon", "--ttl"), ("rope_scale", 0.5, "--rope-scale")],
)  # fmt: skip
def test_the_admin_api_and_the_cli_give_the_same_refusal(api, field, value, flag, capsys):
    r = api.post("/api/models/load", json={"model": "smollm2-135m-instruct", field: value})
    assert r.status_code == 400, r.text
    said = r.json()["error"]["message"]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["load", "smollm2-135m-instruct", flag, str(value)])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.endswith(said.replace("'keep_alive'", "'ttl'")), (err, said)


def test_the_admin_api_refuses_an_empty_folder_and_a_bad_import_name(api, tmp_path):
    r = api.post("/api/folders", json={"path": "   "})
    assert r.status_code == 400 and r.json()["error"]["message"] == "'path' is empty; give the path of a file or folder."
    r = api.post("/api/models/import", json={"path": str(tmp_path / "m.gguf"), "name": "bad name/with:colon"})
    assert r.status_code == 400 and "cannot name a model" in r.json()["error"]["message"]

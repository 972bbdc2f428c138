"""What the CLI says reads as a sentence a person wrote: counts agree with their nouns, a machine without a GPU
hears nothing of GPU contexts, and a context past the trained one is pointed out. In-process, no model loads."""

from __future__ import annotations

import json

from engine.cli import main

MODEL = "smollm2-135m-instruct"


def test_fit_says_one_slot_no_gpu_and_warns_past_the_trained_context(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HEARTH_HOME", str(tmp_path))
    # --no-speed: this data folder has no speed figures, and measuring the machine takes seconds
    assert main(["fit", MODEL, "--ctx", "20000", "--parallel", "1", "--no-speed"]) == 0
    out = capsys.readouterr().out
    assert "x 20,000 tokens x 1 slot)" in out and "1 slots" not in out
    assert "note       20,000 tokens is past the 8,192 the model was trained on" in out
    assert main(["fit", MODEL, "--ctx", "4096", "--parallel", "1", "--no-speed"]) == 0
    out = capsys.readouterr().out
    assert "note " not in out
    from engine.hardware import detect_hardware

    if not detect_hardware().gpus:
        assert "CUDA" not in out and "GPU" not in out and "(worker, llama.cpp's bookkeeping)" in out


def test_folders_count_one_model_and_rm_says_where_a_folders_file_stays(tmp_path, monkeypatch, capsys):
    import shutil

    from engine.catalog.registry import ModelRegistry

    monkeypatch.setenv("HEARTH_HOME", str(tmp_path / "home"))
    starter = ModelRegistry(tmp_path / "home").get(MODEL)
    drive = tmp_path / "drive"
    drive.mkdir()
    shutil.copy(starter.path, drive / "tiny-model.Q4_1.gguf")
    assert main(["folders", "add", str(drive)]) == 0
    assert "1 model found in it" in capsys.readouterr().out
    assert main(["folders", "list"]) == 0
    listing = capsys.readouterr().out
    assert f"{drive}  1 model" in listing and "1 models" not in listing
    assert main(["rm", "tiny-model:Q4_1", "--yes"]) == 0  # a loose file is named from its own name
    said = capsys.readouterr().out.strip()
    assert said == (f"Removed tiny-model:Q4_1 from Hearth; its file {drive / 'tiny-model.Q4_1.gguf'} is in one of "
                    "your model folders and was left in place.")  # fmt: skip
    assert (drive / "tiny-model.Q4_1.gguf").exists()


def test_chat_with_a_reranker_says_what_it_is_for_and_llama_cpps_warnings_stay_in_the_log(tmp_path, monkeypatch, capfd):
    from pathlib import Path

    monkeypatch.setenv("HEARTH_HOME", str(tmp_path))
    reranker = Path(__file__).resolve().parents[1] / "data" / "tiny-reranker" / "tiny-reranker-f32.gguf"
    assert main(["import", str(reranker), "--name", "tiny-reranker"]) == 0
    capfd.readouterr()
    # the tiny reranker makes llama.cpp warn (its tokenizer config, a context past its trained 513 tokens)
    assert main(["chat", "--local", "-m", "tiny-reranker", "--ctx", "768", "hi"]) == 1
    out, err = capfd.readouterr()
    assert out == ""
    assert err.splitlines() == [
        "hearth: Model 'tiny-reranker' is a reranker: it scores documents against a query (POST /v1/rerank) and "
        "cannot write answers; name a chat model."
    ]
    assert main(["show", "tiny-reranker", "--json"]) == 0
    shown = json.loads(capfd.readouterr().out)
    assert shown["capabilities"] == ["embedding"] and shown["architecture"] == "bert"
    assert main(["models", "--json"]) == 0  # the listing says what `show` says
    listed = {m["name"]: m for m in json.loads(capfd.readouterr().out) if "path" in m}
    assert listed["tiny-reranker"]["capabilities"] == ["embedding"]


def test_a_mistyped_option_is_refused_by_its_command_with_the_option_meant(capsys):
    import pytest

    for argv, said in [
        (["chat", "--temprature", "0", "hi"], "hearth chat: error: unrecognized arguments: --temprature (did you mean --temperature?)"),
        (["daemon", "status", "--jsn"], "hearth daemon status: error: unrecognized arguments: --jsn (did you mean --json?)"),
        (["models", "extra"], "hearth models: error: unrecognized arguments: extra"),
    ]:
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2
        err = capsys.readouterr().err.splitlines()
        assert err[0].startswith(f"usage: hearth {argv[0]}")  # the command's own usage, not `hearth`'s
        assert err[-1] == said


def test_pull_of_a_model_already_here_says_so_and_succeeds(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HEARTH_HOME", str(tmp_path))
    assert main(["pull", MODEL]) == 0  # as `ollama pull` of a model it has; no hub is asked
    out = capsys.readouterr().out
    assert out.startswith(f"{MODEL} is already on this machine (") and f"`hearth chat {MODEL}`" in out


def test_fit_of_an_unknown_name_says_so_before_this_machine_is_measured(tmp_path, monkeypatch, capsys):
    from engine.fit.probe import CACHE_NAME

    monkeypatch.setenv("HEARTH_HOME", str(tmp_path))  # a fresh data folder: no speed figures yet
    assert main(["fit", "no-such-model"]) == 1
    err = capsys.readouterr().err
    assert "no-such-model" in err and "Measuring" not in err
    assert not list(tmp_path.rglob(CACHE_NAME))  # nothing was measured (it takes seconds) for a name that is not here

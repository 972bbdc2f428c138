"""`hearth models --scan`, `hearth models` and `hearth rm` on other apps' models: the CLI's own entry point
in this process (fast), and `hearth rm` as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.cli import main
from tests.engine.catalog.other_apps_fixtures import link, lmstudio_folder, ollama_store
from tests.engine.fit.speed_figures import keep_figures

LMS_NAME = "lmstudio-community/SmolLM2-135M-Instruct-GGUF:Q4_1"


@pytest.fixture
def env(tmp_path: Path, starter_path: Path, monkeypatch) -> dict[str, str]:
    ollama, lmstudio = tmp_path / "ollama", tmp_path / "lmstudio"
    ollama_store(ollama, starter_path)
    lmstudio_folder(lmstudio, starter_path, link(starter_path, tmp_path / "proj" / "mmproj.gguf"))
    home = tmp_path / "user"  # never the real home: every root is named or lies under this one
    values = {
        "HOME": str(home), "XDG_DATA_HOME": str(home / "data"), "HEARTH_HOME": str(tmp_path / "hearth"),
        "OLLAMA_MODELS": str(ollama), "HEARTH_LMSTUDIO_MODELS": str(lmstudio), "HF_HUB_CACHE": str(home / "hf"),
    }  # fmt: skip
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    keep_figures(tmp_path / "hearth")
    for name in ("HF_HOME", "HEARTH_JAN_MODELS", "HEARTH_GPT4ALL_MODELS"):
        monkeypatch.delenv(name, raising=False)
    return dict(os.environ)


def hearth(capsys, *args: str) -> tuple[int, str]:
    code = main(list(args))
    return code, capsys.readouterr().out


def test_scan_register_list_and_remove(env, capsys, starter_path: Path):
    code, out = hearth(capsys, "models", "--scan", "--json")
    assert code == 0
    found = {f["name"]: f for f in json.loads(out)}
    assert set(found) == {"smollm2:135m", LMS_NAME}
    assert found["smollm2:135m"]["origin"] == "ollama" and not found["smollm2:135m"]["registered"]

    code, out = hearth(capsys, "models", "--scan")  # no terminal, no --yes: says what it found and how to add it
    size = sum(f["size_bytes"] for f in found.values()) / 1e9
    assert code == 1
    assert out.splitlines()[0] == f"Found 2 models from Ollama and LM Studio ({size:.1f} GB)."
    assert "--yes" in out
    _, out = hearth(capsys, "models", "--json")
    assert not [m for m in json.loads(out) if m["origin"]]  # nothing registered without a yes

    code, out = hearth(capsys, "models", "--scan", "--yes")
    assert code == 0 and "Added 2 models" in out
    _, out = hearth(capsys, "models", "--json")
    models = {m["name"]: m for m in json.loads(out)}
    ollama_model = models["smollm2:135m"]
    assert (ollama_model["origin"], ollama_model["origin_label"], ollama_model["template_source"]) == ("ollama", "Ollama", "ollama")
    assert models[LMS_NAME]["mmproj"].endswith("mmproj-SmolLM2-135M-F16.gguf")
    assert models[LMS_NAME]["origin_label"] == "LM Studio"
    assert os.stat(ollama_model["path"]).st_ino == os.stat(starter_path).st_ino
    _, out = hearth(capsys, "models")
    assert next(line for line in out.splitlines() if line.startswith("smollm2:135m ")).rstrip().endswith("Ollama")

    removed = subprocess.run(
        [sys.executable, "-m", "engine.cli", "rm", "smollm2:135m", "--yes"], capture_output=True, text=True, timeout=120, env=env
    )
    assert removed.returncode == 0, removed.stderr
    assert removed.stdout.strip().endswith("belong to Ollama and were left in place.")
    assert Path(ollama_model["path"]).is_file()
    _, out = hearth(capsys, "models")
    assert "smollm2:135m" not in out and LMS_NAME in out


def test_scan_says_which_ollama_models_it_left_out_and_why(env, capsys):
    broken = Path(env["OLLAMA_MODELS"]) / "manifests" / "registry.ollama.ai" / "library" / "broken" / "1"
    broken.parent.mkdir(parents=True)
    broken.write_text("{not json")
    assert main(["models", "--scan", "--yes"]) == 0
    out, err = capsys.readouterr()
    assert "Added 2 models" in out
    assert err.splitlines() == [
        f"note: broken:1 was skipped: Its manifest {broken} is not valid JSON; `ollama pull broken:1` repairs it."
    ]


def test_show_tells_an_ollama_models_template_parameters_system_and_owner(env, capsys):
    assert main(["models", "--scan", "--yes"]) == 0
    capsys.readouterr()
    code, out = hearth(capsys, "show", "smollm2:135m", "--json")
    assert code == 0
    shown = json.loads(out)
    assert (shown["origin"], shown["origin_label"], shown["template_source"]) == ("ollama", "Ollama", "ollama")
    assert shown["system"] == "You are a pirate." and shown["parameters_default"]["num_ctx"] == 2048
    assert shown["parameters_default"]["temperature"] == 0.2 and shown["quantization"] == "Q4_1"
    assert shown["context_length"] == 8192 and "tools" in shown["capabilities"]
    assert "<|im_start|>" in shown["template"] and Path(shown["path"]).is_file()
    code, out = hearth(capsys, "show", "smollm2:135m")
    assert code == 0
    assert "  belongs to    Ollama" in out and "\nSystem\n  You are a pirate.\n" in out
    assert "  num_ctx       2048" in out and "Template (Ollama's, translated)" in out
    code, out = hearth(capsys, "models")
    assert out.splitlines()[0].split() == ["NAME", "FORMAT", "QUANT", "SIZE", "BACKEND", "FROM"]


def test_fit_plans_with_the_settings_a_load_takes_and_says_where_they_came_from(env, capsys):
    assert main(["models", "--scan", "--yes"]) == 0
    capsys.readouterr()
    code, out = hearth(capsys, "fit", "smollm2:135m", "--parallel", "2", "--json")
    assert code == 0
    report = json.loads(out)
    assert (report["plan"]["n_ctx"], report["plan"]["parallel"]) == (2048, 2)  # the Modelfile's num_ctx, as a load
    assert report["settings_from"] == ["--ctx 2048 (Ollama's Modelfile)"]
    saved = Path(env["HEARTH_HOME"]) / "load-settings.json"
    saved.write_text(json.dumps({"smollm2:135m": {"n_ctx": 1024, "n_seq_max": 3, "kv_type": "q8_0"}}))
    code, out = hearth(capsys, "fit", "smollm2:135m")
    assert code == 0
    assert "plan       3 slots of 1,024 tokens, 8-bit KV cache" in out
    assert "settings   --ctx 1024 (saved with hearth load --save); --parallel 3 (saved with hearth load --save)" in out
    code, out = hearth(capsys, "fit", "smollm2:135m", "--ctx", "512", "--json")  # asked here: over both
    assert json.loads(out)["plan"]["n_ctx"] == 512

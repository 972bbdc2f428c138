"""Ollama's Modelfile read (engine.catalog.modelfile), and `hearth create` / `hearth cp` made with it."""

from __future__ import annotations

import pytest

from engine.catalog.modelfile import Modelfile, layered, parse
from engine.cli import main
from engine.errors import InvalidRequest
from tests.engine.catalog.conftest import make_gguf

STARTER = "smollm2-135m-instruct"


def test_every_instruction_is_read_as_ollama_reads_it():
    mf = parse('''# comment
FROM llama3.2:3b
parameter temperature 0.7
PARAMETER num_ctx 4096
PARAMETER stop "<|eot_id|>"
PARAMETER stop <|end|>
PARAMETER use_mmap false
TEMPLATE """{{ .System }}
{{ .Prompt }}"""
SYSTEM You are "helpful".
MESSAGE user Is Toronto in Canada?
MESSAGE Assistant """yes"""
LICENSE """MIT
text"""
''')
    assert mf == Modelfile(
        base="llama3.2:3b", parameters={"temperature": 0.7, "num_ctx": 4096, "stop": ["<|eot_id|>", "<|end|>"], "use_mmap": False},
        system='You are "helpful".', template="{{ .System }}\n{{ .Prompt }}",
        messages=[{"role": "user", "content": "Is Toronto in Canada?"}, {"role": "assistant", "content": "yes"}],
        license=["MIT\ntext"],
    )  # fmt: skip


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("SYSTEM hi", "The Modelfile has no FROM line"),
        ("FROM a\nRUN rm -rf /", "Modelfile line 2: 'RUN' is not an instruction"),
        ("FROM a\nPARAMETER temprature 1", "Modelfile line 2: 'temprature' is not a Modelfile parameter"),
        ("FROM a\nPARAMETER top_k many", "Modelfile line 2: PARAMETER top_k must be a whole number, got 'many'."),
        ("FROM a\nPARAMETER use_mlock maybe", "Modelfile line 2: PARAMETER use_mlock must be true or false"),
        ("FROM a\nMESSAGE tool hi", "Modelfile line 2: a MESSAGE's role must be system, user or assistant, got 'tool'."),
        ('FROM a\nSYSTEM """never closed', 'Modelfile line 2: a value opened with """ is never closed'),
        ('FROM a\nSYSTEM """x""" y', 'Modelfile line 2: text after the closing """'),
    ],
)
def test_a_line_it_cannot_read_is_named(text, says):
    with pytest.raises(InvalidRequest) as refused:
        parse(text)
    assert str(refused.value).startswith(says)


def test_settings_are_layered_over_the_models_own():
    base = {"mmproj": "/p", "defaults": {"temperature": 0.2, "top_k": 5, "system": "old"}, "license": ["A"]}
    info = layered(base, Modelfile(base="x", parameters={"temperature": 0.9}, system="", messages=[]))
    assert info["defaults"] == {"temperature": 0.9, "top_k": 5, "system": "old", "messages": []} and info["mmproj"] == "/p"
    assert layered(base, Modelfile(base="x", license=["B"], system="new"))["license"] == ["B"]
    with pytest.raises(InvalidRequest, match="'parameters.top_p' must be between"):
        layered(base, Modelfile(base="x", parameters={"top_p": 7}))


def test_hearth_create_and_cp_make_models_from_a_model_or_a_file(tmp_path, capsys, monkeypatch):
    from engine.catalog.registry import ModelRegistry

    monkeypatch.setenv("HEARTH_HOME", str(tmp_path / "home"))
    (tmp_path / "Modelfile").write_text(f"FROM {STARTER}\nSYSTEM You are Mario.\nPARAMETER temperature 0.1\n")
    assert main(["create", "mario", "-f", str(tmp_path / "Modelfile")]) == 0
    assert capsys.readouterr().out == f"Created mario from {STARTER}\n"
    assert main(["models"]) == 0 and f"llamacpp   {STARTER}" in capsys.readouterr().out  # FROM: what it was made from
    assert main(["cp", "mario", "luigi:latest"]) == 0
    registry = ModelRegistry()
    luigi = registry.get("luigi")
    assert luigi is not None and luigi.derived_from == "mario" and luigi.origin_info["defaults"]["system"] == "You are Mario."
    # FROM a file, relative to the Modelfile's folder: read where it is, as `hearth import` reads it
    make_gguf(tmp_path / "tiny.gguf", label="Q8_0", n_floats=1000)
    (tmp_path / "Modelfile").write_text("FROM ./tiny.gguf\nPARAMETER num_ctx 1024\n")
    assert main(["create", "tiny", "-f", str(tmp_path / "Modelfile")]) == 0
    tiny = registry.get("tiny")
    assert tiny.path == (tmp_path / "tiny.gguf").resolve() and tiny.source == "import" and tiny.created
    assert main(["create", "tiny", "-f", str(tmp_path / "Modelfile")]) == 0  # made again: replaced
    assert main(["rm", "tiny", "--yes"]) == 0 and (tmp_path / "tiny.gguf").exists()  # an imported file stays
    (tmp_path / "Modelfile").write_text(f"FROM {STARTER}\n")
    assert main(["create", STARTER, "-f", str(tmp_path / "Modelfile")]) == 0  # its own name: its own settings
    assert main(["create", "luigi", "-f", str(tmp_path / "nothing")]) == 1
    assert "Could not read the Modelfile" in capsys.readouterr().err
    (tmp_path / "Modelfile").write_text("FROM ./missing.gguf\n")
    assert main(["create", "x", "-f", str(tmp_path / "Modelfile")]) == 1
    assert "FROM ./missing.gguf: there is no file at" in capsys.readouterr().err
    registry.close()

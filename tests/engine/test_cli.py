"""`hearth` as a user runs it: a subprocess, real model, real exit codes."""

from __future__ import annotations

import subprocess
import sys


def hearth(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", *args], capture_output=True, text=True, timeout=timeout
    )


def test_chat_one_shot_prints_an_answer_and_exits_zero():
    out = hearth("chat", "--local", "--temperature", "0", "--max-tokens", "24", "Name three colours.")
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.strip()) > 5
    assert "Traceback" not in out.stderr


def test_chat_on_the_terminal_answers_each_typed_line_and_leaves_at_the_end_of_input():
    out = subprocess.run(
        [sys.executable, "-m", "engine.cli", "chat", "--local", "--temperature", "0", "--max-tokens", "8"],
        input="Name a colour.\n\n   \nName a fruit.\n", capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "Chatting with" in out.stderr and "Ctrl-D leaves." in out.stderr
    assert out.stdout.count("> ") >= 5  # a prompt for each line, blank ones too, and the last at the end of input
    answers = [part for part in out.stdout.split("> ") if part.strip()]
    assert len(answers) == 2, out.stdout  # the two questions answered, the blank lines not
    assert "Traceback" not in out.stderr


def test_typed_lines_skip_blank_ones_start_a_new_line_on_ctrl_c_and_end_on_ctrl_d(monkeypatch, capsys):
    from engine.typed_lines import typed_lines

    typed = iter(["hello", "", KeyboardInterrupt(), "  ", "again", EOFError()])

    def fake_input(prompt: str) -> str:
        item = next(typed)
        if isinstance(item, BaseException):
            raise item
        return item

    monkeypatch.setattr("builtins.input", fake_input)
    assert list(typed_lines("Chatting with m.")) == ["hello", "again"]
    assert capsys.readouterr().err.startswith("Chatting with m. Ctrl-C stops an answer, Ctrl-D leaves.\n")


def test_missing_model_is_one_line_naming_it_and_non_zero():
    out = hearth("chat", "--model", "no-such-model", "hi")
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "no-such-model" in lines[0]


def test_version_and_models():
    out = hearth("--version")
    assert out.returncode == 0 and out.stdout.startswith("hearth ")
    out = hearth("models")
    assert out.returncode == 0
    assert "smollm2-135m-instruct" in out.stdout


def test_a_broken_model_file_is_one_line_not_a_traceback(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 100)
    out = hearth("chat", "--model", str(bad), "hi")
    assert out.returncode != 0
    assert "Traceback" not in out.stderr
    assert str(bad) in out.stderr

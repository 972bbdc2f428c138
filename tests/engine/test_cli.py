"""`hearth` as a user runs it: a subprocess, real model, real exit codes."""

from __future__ import annotations

import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest


def hearth(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", *args], capture_output=True, text=True, timeout=timeout
    )


def test_chat_one_shot_prints_an_answer_and_exits_zero():
    out = hearth("chat", "--local", "--temperature", "0", "--max-tokens", "24", "Name three colours.")
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.strip()) > 5
    assert "Traceback" not in out.stderr


def _read_until(fd: int, marker: bytes, seen: bytearray, timeout: float = 120) -> None:
    """Read the terminal ``fd`` into ``seen`` until ``marker`` has come after what was there."""
    start, deadline = len(seen), time.monotonic() + timeout
    while marker not in seen[start:]:
        assert time.monotonic() < deadline, bytes(seen)
        if select.select([fd], [], [], 0.5)[0]:
            seen += os.read(fd, 4096)


def _as_shown(seen: bytearray) -> str:
    """What a terminal was sent, with Unix line ends and without readline's bracketed paste switches (around each
    line read)."""
    return re.sub(r"\x1b\[\?2004[hl]\r?", "", bytes(seen).replace(b"\r\n", b"\n").decode())


def test_chat_on_the_terminal_answers_each_typed_line_and_leaves_at_the_end_of_input():
    main_fd, term = pty.openpty()  # a real terminal: what is typed there is a conversation
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "chat", "--local", "--temperature", "0", "--max-tokens", "8"],
        stdin=term, stdout=term, stderr=term,
    )  # fmt: skip
    os.close(term)
    seen = bytearray()
    try:
        _read_until(main_fd, b"> ", seen)
        for line in (b"Name a colour.\n", b"\n", b"   \n", b"Name a fruit.\n", b"/clear\n", b"/colour\n", b"Name a fruit.\n"):
            os.write(main_fd, line)
            _read_until(main_fd, b"> ", seen)
        os.write(main_fd, b"\x04")  # Ctrl-D
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(main_fd)
    said = _as_shown(seen).encode()
    assert proc.returncode == 0, said
    greeting, *turns = said.split(b"> ")
    assert greeting.startswith(b"Chatting with") and b"Ctrl-D leaves." in greeting
    assert len(turns) == 8  # a prompt for each line, blank ones too, and the last before Ctrl-D
    answered = [t for t in turns if t.strip() and t.split(b"\n", 1)[1].strip()]
    assert [t.split(b"\n", 1)[0] for t in answered] == [  # the blank lines not; /clear and /colour said what they did
        b"Name a colour.", b"Name a fruit.", b"/clear", b"/colour", b"Name a fruit."]  # fmt: skip
    assert answered[2].split(b"\n")[1] == b"The conversation starts over."
    assert answered[3].split(b"\n")[1].startswith(b"Unknown command /colour;")
    # after /clear the question is asked of no history: the answer it gets alone, not the one after the colour
    alone = hearth("chat", "--local", "--temperature", "0", "--max-tokens", "8", "Name a fruit.").stdout.strip()
    assert answered[4].split(b"\n", 1)[1].strip().decode() == alone != answered[1].split(b"\n", 1)[1].strip().decode()
    assert b"Traceback" not in said


#: A conversation that outgrows 512 tokens of context: three messages of about 170 tokens, one of 750 alone, one short.
OVERFLOWING = [*(f"{n}. " + " ".join(["The quick brown fox jumps over the lazy dog."] * 17) for n in range(3)),
               " ".join(f"{i:04d}" for i in range(150)), "Name a colour."]  # fmt: skip


def converse_at_a_terminal(
    argv: list[str], lines: list[str], *, first_timeout: float = 120, before_end: Callable[[], None] = lambda: None,
    raw: bytearray | None = None,
) -> tuple[int, list[str]]:
    """`hearth ARGV` on a terminal, each of ``lines`` typed at its prompt, ``before_end`` called, then Ctrl-D: its
    exit status and what followed each ``> `` prompt (``raw``: what the terminal was sent, as it was)."""
    main_fd, term = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "engine.cli", *argv], stdin=term, stdout=term, stderr=term)
    os.close(term)
    seen = bytearray()
    try:
        _read_until(main_fd, b"> ", seen, timeout=first_timeout)
        for line in lines:
            os.write(main_fd, line.encode() + b"\n")
            _read_until(main_fd, b"> ", seen)
        before_end()
        os.write(main_fd, b"\x04")
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(main_fd)
    if raw is not None:
        raw += seen
    said = _as_shown(seen)
    assert "Traceback" not in said, said
    return proc.returncode, said.split("> ")[1:]


def assert_the_overflow_was_handled(turns: list[str]) -> None:
    """What :data:`OVERFLOWING` gets: the third message leaves the first exchange out (said once), the long one is
    refused and taken back, and the conversation goes on."""
    assert len(turns) == 6, turns
    assert "earlier messages left out to fit the model's context" in turns[2]  # the third no longer fits with both before
    for turn in turns[:3]:
        assert turn.strip().splitlines()[-1].strip() and "hearth:" not in turn  # each answered
    assert "hearth: " in turns[3] and "context" in turns[3]  # 750 tokens alone: said, and taken back
    assert "hearth:" not in turns[4] and turns[4].strip().splitlines()[-1].strip() != "Name a colour."


def test_a_conversation_longer_than_the_context_leaves_out_its_oldest_turns_and_goes_on():
    """As `ollama run`'s: past the context the oldest exchanges are left out, said once, instead of the chat ending;
    a message too long on its own is refused in a sentence and taken back; the next is answered."""
    code, turns = converse_at_a_terminal(["chat", "--local", "--ctx", "512", "-t", "0", "--max-tokens", "4"], OVERFLOWING)
    assert code == 0, turns
    assert_the_overflow_was_handled(turns)


def test_set_and_show_change_the_conversations_sampling_and_system_prompt_as_in_ollama_run():
    """`/set parameter` and `/set system` take effect for the answers after them: the last answer is the one a chat
    started with those settings gives; a parameter this chat does not set, or a value out of range, is a sentence."""
    lines = ["/set parameter temperature 0", "/set parameter num_predict 6", "/set parameter num_ctx 8192",
             "/set parameter temperature 9", "/set parameter seed 7", "/set parameter seed -1",
             "/set system Answer in French.", "/show parameters", "/show system", "Name a fruit."]  # fmt: skip
    code, turns = converse_at_a_terminal(["chat", "--local", "-t", "1.5", "--max-tokens", "40"], lines)
    assert code == 0, turns
    said = dict(zip(lines, (t.split("\n", 1)[1].strip() for t in turns), strict=False))  # (after the line's echo)
    assert said["/set parameter temperature 0"].startswith("Set 'temperature' to 0.")
    assert "'num_ctx' is not a parameter this chat sets" in said["/set parameter num_ctx 8192"]
    assert "'temperature' must be a number from 0 to 2." in said["/set parameter temperature 9"]
    assert said["/set parameter seed -1"].startswith("Set 'seed' to -1: a new seed for each answer.")  # as Ollama's -1
    assert said["/show parameters"].startswith("smollm2-135m-instruct: temperature 0.0, top_p 0.95, seed -, num_predict 6")
    assert said["/show system"].startswith("Answer in French.")
    alone = hearth("chat", "--local", "-t", "0", "--max-tokens", "6", "--system", "Answer in French.", "Name a fruit.")
    assert said["Name a fruit."].splitlines()[-1].strip() == alone.stdout.strip() != ""


def test_the_workers_refusal_keeps_its_code_for_the_terminal_chat():
    """`hearth chat` through the worker reads a refusal's ``code`` as the worker said it (a conversation past the
    context is told apart from other refusals so), and its sentence as it is."""
    import httpx

    from engine.commands.worker_client import WorkerClient

    client = WorkerClient("http://127.0.0.1:1", None)
    body = {"error": {"message": "The conversation is too long.", "code": "context_length_exceeded"}}
    refused = client.fail(httpx.Response(400, json=body))
    assert (str(refused), refused.code, refused.status) == ("The conversation is too long.", "context_length_exceeded", 400)
    other = client.fail(httpx.Response(400, json={"error": {"message": "No.", "code": None}}))
    assert (str(other), other.code) == ("No.", None)
    broken = client.fail(httpx.Response(502, text="<html>bad gateway</html>"))
    assert broken.code is None and "answered 502" in str(broken)


def test_piped_input_is_one_message_answered_with_no_prompts_in_the_output():
    out = subprocess.run(
        [sys.executable, "-m", "engine.cli", "chat", "--local", "--temperature", "0", "--max-tokens", "8"],
        input="Name a colour.\nName a fruit.\n", capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() and "> " not in out.stdout  # the answer alone, as `echo hi | ollama run` prints it
    assert out.stdout.count("\n") == 1  # one answer to both lines
    assert "Chatting with" not in out.stderr and "Traceback" not in out.stderr


def test_empty_piped_input_is_one_sentence_and_exit_2():
    out = subprocess.run([sys.executable, "-m", "engine.cli", "chat", "--local"], input="\n  \n",
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        'hearth: Nothing came on standard input to answer; pipe a message in, give one (`hearth chat "Hello"`), '
        "or run `hearth chat` at a terminal to type."
    ]


def test_ctrl_c_in_a_one_shot_answer_stops_it_and_exits_130():
    # As from a terminal: Ctrl-C is Python's to handle even where this test runs with SIGINT ignored
    foreground = "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); from engine.cli import main; sys.exit(main())"
    proc = subprocess.Popen(
        [sys.executable, "-c", foreground, "chat", "--local", "-t", "0", "--max-tokens", "4000",
         "Write a very long story about a dragon."],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        first = os.read(proc.stdout.fileno(), 64)  # the answer has begun
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert first.strip()
    assert proc.returncode == 130, err  # a cut answer is not a success for a script
    assert rest.endswith(b" [stopped]\n") and b"Traceback" not in err


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
    assert capsys.readouterr().err.startswith("Chatting with m. Ctrl-C stops an answer, /bye or Ctrl-D leaves.\n")


def test_typed_bye_leaves_the_conversation_and_help_says_how(monkeypatch, capsys):
    from engine.typed_lines import typed_lines

    typed = iter(["hello", "/help", "/bye", "never read"])
    monkeypatch.setattr("builtins.input", lambda prompt: next(typed))
    assert list(typed_lines("Chatting with m.")) == ["hello"]  # as `ollama run` leaves on /bye
    assert "/bye leaves" in capsys.readouterr().err


def test_a_message_of_several_lines_goes_between_triple_quotes_as_in_ollama_run(monkeypatch, capsys):
    from engine.typed_lines import typed_lines

    def typing(*lines: str):
        said = iter(lines)

        def typed(prompt: str) -> str:
            try:
                line = next(said)
            except StopIteration:
                raise EOFError from None
            if isinstance(line, BaseException):
                raise line
            prompts.append(prompt)
            return line

        prompts: list[str] = []
        monkeypatch.setattr("builtins.input", typed)
        return prompts

    prompts = typing('"""Here is a poem:', "", "  roses are red,", 'violets are blue."""', "What rhymes?")
    assert list(typed_lines("Chatting with m.")) == ["Here is a poem:\n\n  roses are red,\nviolets are blue.", "What rhymes?"]
    assert prompts == ["> ", "... ", "... ", "... ", "> "]
    typing('"""one line"""', '"""', "left with Ctrl-C", KeyboardInterrupt(), "next")  # Ctrl-C drops what was typed
    assert list(typed_lines("Chatting with m.")) == ["one line", "next"]
    typing('"""', "cut short by Ctrl-D")
    assert list(typed_lines("Chatting with m.")) == ["cut short by Ctrl-D"]
    typing("/help")
    assert list(typed_lines("Chatting with m.")) == []
    assert '""" begins a message of several lines and """ ends it' in capsys.readouterr().err
    typing("/set x", " /set x")  # a command, then the same begun with a space: sent as text
    assert list(typed_lines("Chatting with m.", commands={"/set": lambda rest: f"set {rest}"})) == [" /set x"]
    assert "set x" in capsys.readouterr().err


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
    assert hearth("ls").stdout == hearth("list").stdout == out.stdout  # Ollama's words for it


def test_ollamas_command_words_run_hearths_commands():
    from engine.cli import build_parser

    parser = build_parser()
    for said, meant in (("run", "chat"), ("list", "models"), ("ls", "models"), ("stop", "unload")):
        assert parser.parse_args([said, *(["x"] if said == "stop" else [])]).run is parser.parse_args(
            [meant, *(["x"] if meant == "unload" else [])]).run, said  # fmt: skip


def test_a_broken_model_file_is_one_line_not_a_traceback(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 100)
    out = hearth("chat", "--model", str(bad), "hi")
    assert out.returncode != 0
    assert "Traceback" not in out.stderr
    assert str(bad) in out.stderr


def test_output_into_a_closed_pipe_ends_quietly_with_141():
    read_end, write_end = os.pipe()
    os.close(read_end)  # `hearth show ... | head -1`, where head has already gone
    proc = subprocess.run([sys.executable, "-m", "engine.cli", "show", "smollm2-135m-instruct"], stdout=write_end,
                          stderr=subprocess.PIPE, text=True, timeout=120)  # fmt: skip
    os.close(write_end)
    assert (proc.returncode, proc.stderr) == (141, "")  # no traceback, no "Exception ignored"


def test_text_piped_in_beside_a_message_comes_before_it_and_a_pipe_never_written_is_not_waited_on():
    """``cat notes.txt | hearth chat "Summarize"`` sends the text, then the message, as ``ollama run`` does; a
    standard input held open and never written (a job runner's) is left after a moment, not waited on."""
    ask = [sys.executable, "-m", "engine.cli", "chat", "--local", "--temperature", "0", "--max-tokens", "8"]
    piped = subprocess.run([*ask, "Name the fruit."], input="Bananas are yellow.", capture_output=True, text=True,
                           timeout=120)  # fmt: skip
    together = hearth("chat", "--local", "--temperature", "0", "--max-tokens", "8", "Bananas are yellow.\n\nName the fruit.")
    assert piped.returncode == 0 and piped.stdout == together.stdout, piped.stderr
    held = subprocess.Popen([*ask, "Name the fruit."], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)  # fmt: skip
    stuck = threading.Timer(120, held.kill)  # a chat that waits on its input is killed, and fails below
    stuck.start()
    try:
        out = held.stdout.read()  # to the chat's end, its standard input still open: never an end of input
    finally:
        stuck.cancel()
        held.stdin.close()
        held.wait(timeout=60)
    alone = hearth("chat", "--local", "--temperature", "0", "--max-tokens", "8", "Name the fruit.")
    assert held.returncode == 0 and out == alone.stdout


def test_chat_takes_the_model_as_its_first_word_as_ollama_run_does():
    """`hearth chat MODEL "message"`, as `ollama run MODEL "message"` (`:latest` as Ollama's clients write it),
    answers as --model does; one word is the model where it names one, else the message, as before."""
    import argparse

    from engine.commands.chat import _model_and_message
    from engine.starter import STARTER_NAME

    ask = ("chat", "--local", "--temperature", "0", "--max-tokens", "8")
    named = hearth(*ask, f"{STARTER_NAME}:latest", "Name a fruit.")
    assert named.returncode == 0, named.stderr
    assert named.stdout.strip() == hearth(*ask, "--model", STARTER_NAME, "Name a fruit.").stdout.strip() != ""

    def read(*words: str, model: str | None = None) -> tuple[str | None, str | None]:
        args = argparse.Namespace(first=words[0] if words else None, prompt=words[1] if len(words) > 1 else None, model=model)
        assert _model_and_message(args) is None
        return args.model, args.prompt

    assert read(STARTER_NAME) == (STARTER_NAME, None)  # a conversation with it
    assert read(f"hf.co/{STARTER_NAME}:latest") == (STARTER_NAME, None)
    assert read("hello") == (None, "hello")  # the message, to the default model
    assert read("2/3") == (None, "2/3") and read("What is 2/3?") == (None, "What is 2/3?")
    assert read("llama3.2:3b") == ("llama3.2:3b", None)  # shaped as a model: refused as one that is not here
    assert read(STARTER_NAME, model=STARTER_NAME) == (STARTER_NAME, STARTER_NAME)  # --model given: the word is the message
    # not here: one line naming it, before anything starts; the model given twice: one line saying so
    missing = hearth("chat", "llama3.2:3b", "hi")
    assert missing.returncode != 0 and len(missing.stderr.strip().splitlines()) == 1 and "'llama3.2:3b'" in missing.stderr
    twice = hearth("chat", "-m", STARTER_NAME, STARTER_NAME, "hi")
    assert twice.returncode == 2 and "Give the model once" in twice.stderr and "Traceback" not in twice.stderr


def test_save_from_a_file_hearth_does_not_list_says_to_import_it(tmp_path, monkeypatch, starter_path):
    """`hearth chat ./model.gguf` then `/save NAME`: a model is made from one Hearth lists; the sentence says how."""
    from engine.catalog.registry import resolve_model
    from engine.commands.chat import save_conversation
    from engine.errors import InvalidRequest

    monkeypatch.setenv("HEARTH_HOME", str(tmp_path / "home"))
    shutil.copyfile(starter_path, tmp_path / "loose.gguf")  # (a link would be read as the starter's own file)
    with pytest.raises(InvalidRequest, match=r"add it with `hearth import .*loose.gguf`, then chat with it by name"):
        save_conversation(resolve_model(str(tmp_path / "loose.gguf")), "mine", {}, None, [])


def test_a_models_own_settings_hold_in_the_chat_and_load_and_save_work_as_in_ollama_run(tmp_path, monkeypatch):
    """A model made with `hearth create` answers `hearth chat` with its own PARAMETER and SYSTEM lines, in this
    process as through the worker (the chat's 0.7 and 0.95 only where the model has none); `/save NAME` makes a
    model of the conversation so far and the settings asked; `/load MODEL` goes on with another, starting over."""
    from engine.catalog.registry import ModelRegistry
    from engine.cli import main

    monkeypatch.setenv("HEARTH_HOME", str(tmp_path / "home"))
    modelfile = tmp_path / "Modelfile"
    modelfile.write_text("FROM smollm2-135m-instruct\nPARAMETER temperature 0\nSYSTEM Answer in French.\n")
    assert main(["create", "french", "-f", str(modelfile)]) == 0
    made = hearth("chat", "french", "--local", "--max-tokens", "8", "Name a fruit.").stdout.strip()
    plain = hearth("chat", "--local", "-t", "0", "--max-tokens", "8", "--system", "Answer in French.", "Name a fruit.")
    assert made == plain.stdout.strip() != ""
    lines = ["/set parameter num_predict 8", "/set parameter seed 5", "Name a fruit.", "/save fruity", "/load french",
             "/show parameters", "/show info", "Name a fruit.", "/load no-such-model", "/save", "/save smollm2 but", "/set nothink",
             "/set format yaml"]  # fmt: skip
    (tmp_path / "smollm2-135m-instruct").mkdir()  # a folder named as the model, where the chat runs: not read
    monkeypatch.chdir(tmp_path)
    code, turns = converse_at_a_terminal(["chat", "--local"], lines)
    assert code == 0, turns
    said = dict(zip(lines, (t.split("\n", 1)[1].strip() for t in turns), strict=False))
    assert said["/save fruity"].startswith("Created fruity:")
    assert said["/load french"] == "Chatting with french; the conversation starts over."
    assert said["/show parameters"].startswith("french: temperature 0.0, top_p 0.95, seed 5, num_predict 8")
    assert "made from     smollm2-135m-instruct" in said["/show info"] and "Answer in French." in said["/show info"]
    assert said["Name a fruit."].splitlines()[-1].strip() == made  # the model's own temperature and system prompt
    assert "no-such-model" in said["/load no-such-model"] and "hearth pull" in said["/load no-such-model"]
    assert said["/save"] == said["/save smollm2 but"] == "Use /save NAME (the new model's name)."
    assert said["/set nothink"] == "Set 'nothink' mode." and said["/set format yaml"].startswith("Use /set system TEXT")
    registry = ModelRegistry()
    try:
        fruity = registry.get("fruity")
        assert fruity is not None and fruity.derived_from == "smollm2-135m-instruct"
        defaults = fruity.origin_info["defaults"]
        first_answer = turns[2].split("\n", 1)[1].strip()
        assert defaults["num_predict"] == 8 and defaults["seed"] == 5 and "temperature" not in defaults
        assert defaults["messages"] == [{"role": "user", "content": "Name a fruit."},
                                        {"role": "assistant", "content": first_answer}]  # fmt: skip
    finally:
        registry.close()


def test_format_think_and_keepalive_as_ollama_run_takes_them(capsys):
    """`--format json` or a schema holds the answer to JSON; `--think`, `--hidethinking` and `--keepalive` reach the
    request as the worker's API and the in-process engine read them; a value neither takes is a usage error."""
    import json

    from engine.cli import _parse, build_parser, main
    from engine.commands.chat_shape import Shape

    schema = {"type": "object", "properties": {"fruit": {"type": "string", "maxLength": 12}}, "required": ["fruit"],
              "additionalProperties": False}  # fmt: skip
    out = hearth("chat", "--local", "-t", "0", "--max-tokens", "40", "--format", json.dumps(schema), "Name a fruit.")
    assert out.returncode == 0 and set(json.loads(out.stdout)) == {"fruit"}, out
    for flags, said in ((["--format", "yaml"], "'format' must be json or a JSON schema object"),
                        (["--think=maybe", "Hello"], "'think' must be true, false, low, medium or high"),
                        (["--keepalive", "soon"], "'keepalive' must be seconds")):  # fmt: skip
        with pytest.raises(SystemExit) as exited:
            main(["chat", "--local", *flags])
        assert exited.value.code == 2 and said in capsys.readouterr().err
    args = _parse(build_parser(), ["chat", "qwen3", "--think", "Why?"])  # as Ollama's CLI reads it
    assert (args.first, args.prompt, args.think) == ("qwen3", "Why?", True)
    from engine.commands.chat import _model_and_message

    args = _parse(build_parser(), ["chat", "qwen3:8b", "why", "is", "--hidethinking", "the", "sky", "blue?"])
    assert _model_and_message(args) is None and (args.model, args.prompt) == ("qwen3:8b", "why is the sky blue?")
    assert _parse(build_parser(), ["chat", "--think", "low", "Hi"]).think == "low"
    shape = Shape("json", "high", 300.0)
    assert shape.body() == {"response_format": {"type": "json_object"}, "reasoning_effort": "high", "keep_alive": 300.0}
    assert shape.request()["thinking"] is True and shape.request()["template_kwargs"] == (("reasoning_effort", "high"),)
    off = Shape(schema, False, None)
    assert off.body()["chat_template_kwargs"] == {"enable_thinking": False} and off.request()["thinking"] is False
    assert off.request()["response_format"].schema == schema and "keep_alive" not in off.body()


def test_a_pasted_text_and_a_quoted_system_prompt_of_several_lines_are_one_each(tmp_path, monkeypatch):
    """As `ollama run` reads them: a text of several lines pasted at the prompt is one message (readline's bracketed
    paste), and `/set system \"\"\"` takes the lines up to the closing quotes as one system prompt."""
    monkeypatch.setenv("HEARTH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TERM", "xterm")  # a terminal that has bracketed paste
    lines = ['/set system """You are', 'a pirate."""', "/show system", "\x1b[200~/set system One\nTwo\x1b[201~",
             "/show system", '/set system Quote docstrings in """.', "/show system"]  # fmt: skip
    raw = bytearray()
    code, turns = converse_at_a_terminal(["chat", "--local", "--max-tokens", "2"], [lines[0] + "\n" + lines[1], *lines[2:]],
                                         raw=raw)  # fmt: skip
    assert code == 0, turns
    assert b"\x1b[?2004h" in raw  # the terminal is asked to mark what is pasted, so it comes as one
    assert turns[1].strip().endswith("You are\na pirate."), turns
    assert turns[3].strip().endswith("One\nTwo"), turns  # not "One", then "Two" answered as a message
    assert turns[5].strip().endswith('Quote docstrings in """.'), turns  # quotes inside a line are its text
    monkeypatch.setenv("TERM", "dumb")  # (Emacs' shell): no switches it would show
    raw.clear()
    assert converse_at_a_terminal(["chat", "--local"], ["/show system"], raw=raw)[0] == 0 and b"\x1b[?2004" not in raw


def test_the_prompt_edits_lines_and_keeps_what_was_typed_as_ollama_run_does(tmp_path, monkeypatch):
    """At a terminal the up arrow brings the last line back (readline: arrow keys, not their escape codes), and what
    was typed is kept for the next conversation in a file only its owner reads; HEARTH_NOHISTORY keeps none."""
    monkeypatch.setenv("HEARTH_HOME", str(tmp_path / "home"))
    lines = ["/set system Be brief.", "/show system", "\x1b[A"]  # the arrow and Enter: /show system again
    history = tmp_path / "home" / "history"
    typed = []  # each line is kept as it is typed, as ollama run's: a terminal closed mid-chat loses none
    code, turns = converse_at_a_terminal(["chat", "--local"], lines, before_end=lambda: typed.append(history.read_text()))
    assert code == 0, turns
    assert turns[2].strip().endswith("Be brief.") and "[A" not in turns[2], turns
    assert typed == ["/set system Be brief.\n/show system\n"]
    assert history.read_text().splitlines() == ["/set system Be brief.", "/show system"]  # (a line again once)
    assert history.stat().st_mode & 0o077 == 0
    monkeypatch.setenv("HEARTH_NOHISTORY", "1")
    code, turns = converse_at_a_terminal(["chat", "--local"], ["\x1b[A", "/show parameters"])
    assert code == 0 and "Be brief." not in turns[0] and history.read_text().splitlines()[-1] == "/show system"

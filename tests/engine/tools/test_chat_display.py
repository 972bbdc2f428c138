"""`hearth chat` shows thinking apart from the answer, and tool calls on lines of their own."""

from __future__ import annotations

from argparse import Namespace

from engine.commands.chat import _answer
from engine.commands.chat_shape import Shape
from engine.tools import ToolCall
from engine.types import GenerationChunk

SHOWN = Namespace(stats=False, hidethinking=False)  # `hearth chat`'s flags as these answers read them


class ScriptedModel:
    """Replays chunks as a thinking model's stream arrives (no thinking model runs on this machine)."""

    def __init__(self, chunks: list[GenerationChunk]) -> None:
        self.chunks = chunks

    def stream(self, request):
        return iter(self.chunks)


def test_thinking_comes_before_the_answer_and_is_not_part_of_it(capsys, monkeypatch):
    model = ScriptedModel([
        GenerationChunk(reasoning="The user wants "), GenerationChunk(reasoning="a sum."),
        GenerationChunk(text="It is "), GenerationChunk(text="4.", finish_reason="stop"),
    ])  # fmt: skip
    reply = _answer(model, "m", [{"role": "user", "content": "2+2?"}], {}, None, Shape(), SHOWN)
    assert reply.text == "It is 4." and reply.exit_code == 0
    said = capsys.readouterr()  # (not a terminal: the thinking on stderr, the answer alone on stdout)
    assert (said.out, said.err) == ("It is 4.\n", "The user wants a sum.\n")
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)  # at a terminal: before the answer, on stdout
    _answer(model, "m", [{"role": "user", "content": "2+2?"}], {}, None, Shape(), SHOWN)
    assert capsys.readouterr().out == "\x1b[2mThe user wants \x1b[0m\x1b[2ma sum.\x1b[0m\nIt is 4.\n"
    monkeypatch.undo()
    hidden = _answer(model, "m", [{"role": "user", "content": "2+2?"}], {}, None, Shape(), Namespace(stats=False, hidethinking=True))
    assert hidden.text == "It is 4." and capsys.readouterr().out == "It is 4.\n"  # --hidethinking: thought, not shown


def test_tool_calls_are_shown_apart_from_the_text(capsys):
    call = ToolCall(name="get_weather", arguments='{"city": "Paris"}')
    model = ScriptedModel([GenerationChunk(text="Checking."), GenerationChunk(finish_reason="tool_calls",
                                                                            tool_calls=(call,))])  # fmt: skip
    _answer(model, "m", [{"role": "user", "content": "Weather?"}], {}, None, Shape(), SHOWN)
    assert capsys.readouterr().out == 'Checking.\n\u2192 get_weather({"city": "Paris"})\n'


class InterruptedModel:
    """Streams one piece, then Ctrl-C arrives (as it does in the middle of an answer)."""

    def __init__(self) -> None:
        self.closed = False

    def stream(self, request):
        model = self

        class Stream:
            def __iter__(self):
                yield GenerationChunk(text="Once upon")
                raise KeyboardInterrupt

            def close(self):
                model.closed = True

        return Stream()


def test_ctrl_c_stops_the_answer_and_a_one_shot_chat_exits_130(capsys):
    model = InterruptedModel()
    reply = _answer(model, "m", [{"role": "user", "content": "A story."}], {}, None, Shape(), SHOWN)
    assert model.closed  # the generation was cancelled
    assert (reply.text, reply.stopped, reply.exit_code) == ("Once upon", True, 130)
    assert capsys.readouterr().out == "Once upon [stopped]\n"


def test_an_answer_that_ends_in_an_error_says_so_and_a_one_shot_chat_exits_1(capsys):
    model = ScriptedModel([GenerationChunk(text="Part"), GenerationChunk(finish_reason="error", error="the model broke")])
    reply = _answer(model, "m", [{"role": "user", "content": "Hi"}], {}, None, Shape(), SHOWN)
    assert (reply.text, reply.failed, reply.exit_code) == ("Part", True, 1)
    assert capsys.readouterr().err == "hearth: the model broke\n"


def test_the_mcp_chat_prints_thinking_as_the_plain_chat_does(capsys):
    """`hearth chat --mcp`: thinking on stderr when the answer is not on a terminal, none with --hidethinking."""
    from engine.agent.loop import AgentEvent
    from engine.agent.terminal import _Printer

    for shown in (True, False):
        printer = _Printer(show_thinking=shown)
        for event in (AgentEvent("thinking", "Sum it."), AgentEvent("content", "It is 4."), AgentEvent("turn_end")):
            printer(event)
        said = capsys.readouterr()
        assert (said.out, said.err) == ("It is 4.\n", "[thinking] Sum it.\n" if shown else "")

"""`hearth chat --mcp FILE`: the agent loop in the terminal, each tool call printed as a card.

The model runs behind Hearth's own API, served for the run on a free loopback port with a one-time
key, so the loop is an OpenAI client of ``/v1/chat/completions`` as it is in the app.
"""

from __future__ import annotations

import asyncio
import secrets
import sys
import threading
from typing import Any

from engine.agent.approval import ApprovalPolicy, Decision
from engine.agent.chat_client import ChatClient
from engine.agent.config import load_mcp_file
from engine.agent.loop import AgentEvent, AgentLoop, ToolCallRecord, truncate
from engine.agent.runtime import AgentRuntime
from engine.agent.sessions import McpHub
from engine.commands.chat_reply import thinking_out
from engine.commands.chat_shape import Shape
from engine.model_defaults import chat_sampling
from engine.typed_lines import LEFT_OUT, leave_out_oldest, typed_lines

CARD_RESULT_CHARS = 400


def _plain(text: str) -> str:
    """Untrusted text made safe for a terminal: control characters (escape sequences) shown, not sent."""
    return "".join(c if c.isprintable() or c in "\n\t" else f"\\x{ord(c):02x}" for c in text)


def format_card(call: ToolCallRecord) -> str:
    """A call as the terminal shows it: tool, arguments, result (cut), duration, error."""
    took = f"{call.duration * 1000:.0f} ms" if call.duration is not None else "-"
    where = f" on {call.server}" if call.server else ""
    lines = [f"┌ tool {call.name}{where} · {call.status} · {took}", f"│ arguments: {_plain(call.arguments)}"]
    label = "error" if call.is_error else "result"
    body = _plain(truncate(call.result, CARD_RESULT_CHARS)).splitlines() or [""]
    lines.append(f"│ {label}: {body[0]}")
    lines += [f"│   {line}" for line in body[1:]]
    lines.append("└")
    return "\n".join(lines)


class _Printer:
    def __init__(self, show_thinking: bool = True) -> None:
        self.dim = sys.stdout.isatty()
        self.aside = thinking_out()  # the thinking: beside the answer at a terminal, else on stderr
        self.show_thinking = show_thinking
        self.thinking = False
        self.mid_line = False

    def __call__(self, event: AgentEvent) -> None:
        out = sys.stdout
        if event.kind == "thinking":
            if not self.show_thinking:
                return
            if not self.thinking:
                self.aside.write("\x1b[2m" if self.dim else "[thinking] ")
                self.thinking = True
            self.aside.write(event.text)
            self.aside.flush()
        elif event.kind == "content":
            self._end_thinking()
            out.write(event.text)
            self.mid_line = not event.text.endswith("\n")
        elif event.kind == "turn_end":
            self._end_thinking()
            self._newline()
        elif event.kind == "call_finished" and event.call is not None:
            self._newline()
            out.write(format_card(event.call) + "\n")
        elif event.kind == "server_failed":
            self._newline()
            print(f"hearth: MCP server {event.server} is not running; going on without it.", file=sys.stderr)
            if event.text:
                print("\n".join(f"  {line}" for line in _plain(event.text).splitlines()[-10:]), file=sys.stderr)
        elif event.kind == "round_limit":
            self._newline()
            print(f"hearth: {event.text}", file=sys.stderr)
        elif event.kind == "error":
            self._newline()
            print(f"hearth: {event.text}", file=sys.stderr)
        out.flush()

    def _end_thinking(self) -> None:
        if self.thinking:
            self.aside.write("\x1b[0m\n" if self.dim else "\n")
            self.aside.flush()
            self.thinking = False

    def _newline(self) -> None:
        if self.mid_line:
            sys.stdout.write("\n")
            self.mid_line = False


_ask_lock = threading.Lock()


def _ask_terminal(call: ToolCallRecord, tool) -> Decision:
    with _ask_lock:
        print(f"Allow {tool.key} with {_plain(call.arguments)}?", file=sys.stderr)
        while True:
            try:
                sys.stderr.write("[o]nce, [a]lways this run, [d]eny: ")
                sys.stderr.flush()
                answer = input().strip().lower()
            except (EOFError, KeyboardInterrupt):
                return Decision.DENY
            if answer in ("o", "once", "y", "yes"):
                return Decision.ONCE
            if answer in ("a", "always"):
                return Decision.ALWAYS
            if answer in ("d", "deny", "n", "no"):
                return Decision.DENY


class _LocalApi:
    """Hearth's API on a free loopback port for this run, with a one-time key."""

    def __init__(self, backend: str | None, options) -> None:
        import uvicorn

        from engine.catalog.registry import ModelRegistry
        from engine.pool import ModelManager
        from engine.server import create_app
        from engine.settings import ServerSettings
        from engine.worker.connections import server_config
        from engine.worker.net import base_url, bind_socket

        self.key = secrets.token_urlsafe(24)
        self.manager = ModelManager(ModelRegistry(), backend=backend, options=options)
        app = create_app(ServerSettings(host="127.0.0.1", port=0, api_keys=(self.key,)), self.manager)
        self.sock = bind_socket("127.0.0.1", 0)
        self.base_url = base_url("127.0.0.1", self.sock.getsockname()[1])
        self.server = uvicorn.Server(server_config(app))  # off the main thread uvicorn leaves signals (Ctrl-C) to the chat
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(15)
        self.manager.close()
        self.sock.close()


def run_agent_chat(args: Any, options) -> int:
    """The body of ``hearth chat --mcp``: one answer (``prompt``) or a conversation."""
    from engine.loading import resolve_model

    try:
        configs = load_mcp_file(args.mcp)
    except Exception as exc:  # McpConfigError says what to fix
        print(f"hearth: {exc}", file=sys.stderr)
        return 2
    model = resolve_model(args.model)
    model_name = model.name
    api = _LocalApi(args.backend, options)
    base_url, key = api.base_url, api.key
    runtime = AgentRuntime()
    hub = McpHub(configs)
    client = None
    try:
        runtime.call(hub.start())
        printer = _Printer(show_thinking=not getattr(args, "hidethinking", False))
        for failure in hub.new_failures():
            printer(AgentEvent("server_failed", server=failure.server, text=failure.stderr or failure.reason))
        names = ", ".join(t.name for t in hub.tools()) or "none"
        print(f"MCP tools: {names}", file=sys.stderr)

        async def ask(call, tool) -> Decision:
            return await asyncio.to_thread(_ask_terminal, call, tool)

        approval = ApprovalPolicy(None if args.allow_tools else ask, allow_all=args.allow_tools)
        client = ChatClient(base_url, api_key=key)
        params = chat_sampling({"temperature": args.temperature, "top_p": args.top_p, "seed": args.seed,
                                "max_tokens": args.max_tokens}, model.origin_info)  # fmt: skip
        params.update(Shape(getattr(args, "format", None), getattr(args, "think", None),
                             getattr(args, "keepalive", None)).body())  # fmt: skip
        history: list[dict] = [{"role": "system", "content": args.system}] if args.system else []

        def attempt(asked: list[dict], held: list[AgentEvent]):
            """One run of the loop on ``asked``; its error is held in ``held``, not yet printed."""

            def show(event: AgentEvent) -> None:
                if event.kind == "error":
                    held.append(event)
                else:
                    printer(event)

            loop = AgentLoop(
                client, hub, approval, model=model_name, tool_choice=args.tool_choice,
                max_rounds=args.max_rounds, params=params, on_event=show,
            )  # fmt: skip
            run = runtime.start(loop.run(list(asked)))
            while True:
                try:
                    return run.result(timeout=0.2)
                except TimeoutError:
                    continue
                except KeyboardInterrupt:
                    run.stop()

        def answer(line: str) -> None:
            """The answer to ``line``: a conversation grown past the context leaves out its oldest exchanges and
            goes on (as `hearth chat`'s); a turn refused before any tool ran is taken back."""
            nonlocal history
            asked = [*history, {"role": "user", "content": line}]
            told = False
            while True:
                held: list[AgentEvent] = []
                result = attempt(asked, held)
                if (result is None or result.error_code != "context_length_exceeded" or result.calls
                        or not leave_out_oldest(asked)):  # fmt: skip
                    break
                if not told:
                    print(f"\x1b[2m{LEFT_OUT}\x1b[0m" if printer.dim else LEFT_OUT, file=sys.stderr)
                    told = True
            for event in held:
                printer(event)
            printer._newline()
            if result is None or result.stopped:
                print("[stopped]", file=sys.stderr)
            if result is not None:
                history = asked[:-1] if result.error is not None and not result.calls else result.messages

        if args.prompt is not None:
            answer(args.prompt)
            return 0
        def clear() -> None:
            nonlocal history
            history = [{"role": "system", "content": args.system}] if args.system else []

        for line in typed_lines(f"Chatting with {model_name} and MCP tools.", clear):
            answer(line)
        return 0
    finally:
        if client is not None:
            runtime.call(client.close())
        runtime.call(hub.close())
        runtime.close()
        api.close()


__all__ = ["format_card", "run_agent_chat"]

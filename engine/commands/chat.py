"""`hearth chat`: talk to a model in the terminal, one-shot or as a REPL."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine import validation as valid
from engine.commands.chat_shape import Shape, parse_format, parse_keepalive, parse_think
from engine.commands.load_flags import add_flag

if TYPE_CHECKING:
    from engine.catalog.registry import LocalModel
    from engine.commands.chat_reply import Reply


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "chat", aliases=["run"], help="chat with a model in the terminal",
        description="Chat with a local model, through the worker of this data folder (the daemon's; one is started "
        "when none runs, as `ollama run` does), so the chat shares the loaded model and shows in `hearth ps` and "
        "`hearth log stream`. --local, --backend, --quantization, --docs and --mcp run it in this process.",
    )  # fmt: skip
    p.add_argument("first", nargs="?", metavar="MODEL",
                   help="the model to chat with, as `ollama run MODEL` takes it (a word that names no model here and "
                        "has no ':' or '/' is the message)")  # fmt: skip
    p.add_argument("prompt", nargs="?", help="answer this one message and exit (omit for a conversation; what is "
                   "piped to standard input is one message too; its words may come unquoted, as `ollama run` takes them)")
    p.add_argument("more", nargs="*", help=argparse.SUPPRESS)  # the message's other words, unquoted
    p.add_argument("--model", "-m", help="model name (default: the starter model)")
    p.add_argument("--local", action="store_true",
                   help="run the model in this process, not in the worker of this data folder (the daemon's, "
                        "started when none runs)")  # fmt: skip
    p.add_argument("--backend", "-b", help="llamacpp, paged or mlx (default: chosen for the model and machine); "
                   "runs the model in this process")  # fmt: skip
    p.add_argument("--max-tokens", type=valid.whole(valid.MAX_TOKENS), default=None, help="most tokens per answer")
    p.add_argument("--temperature", "-t", type=valid.number(valid.TEMPERATURE), default=None,
                   help="sampling temperature, 0 for the likeliest tokens (default: the model's own setting, else 0.7)")
    p.add_argument("--top-p", type=valid.number(valid.TOP_P), default=None,
                   help="nucleus sampling's share of probability (default: the model's own setting, else 0.95)")
    p.add_argument("--seed", type=valid.whole(valid.SEED), default=None)
    p.add_argument("--system", help="system prompt")
    p.add_argument(
        "--image",
        action="append",
        metavar="PATH",
        help="send this picture with the (first) message; repeat for several (the model must see: `hearth models` marks it)",
    )
    add_flag(p, "n_ctx", default=None, help="context length in tokens")  # a load setting (load_flags)
    p.add_argument(
        "--quantization",
        choices=("int4", "int8", "fp8"),
        help="paged backend: weight quantization (int4: the CPU's fast path; int8, fp8: GPUs)",
    )
    p.add_argument("--stats", "--verbose", dest="stats", action="store_true",
                   help="print tokens/s and time to first token after each answer")  # fmt: skip
    p.add_argument("--format", type=valid.cli_type(parse_format, "format"), default=None,
                   help="json, or a JSON schema: the answer is JSON (that fits the schema), as `ollama run --format json`")  # fmt: skip
    p.add_argument("--think", nargs="?", const="true", type=valid.cli_type(parse_think, "think"), default=None,
                   metavar="true|false|low|medium|high",
                   help="a thinking model thinks first (--think, or an effort: --think=high) or not (--think=false); "
                        "default: the model's way")  # fmt: skip
    p.add_argument("--hidethinking", action="store_true", help="the model thinks, but its thinking is not printed")
    p.add_argument("--keepalive", type=valid.cli_type(parse_keepalive, "keepalive"), default=None, metavar="DURATION",
                   help="how long the worker keeps the model loaded once the chat is idle (5m, 1h, 0, never)")  # fmt: skip
    p.add_argument(
        "--docs", action="append", metavar="NAME", help="answer from this document collection (`hearth docs`), with sources"
    )
    p.add_argument("--mcp", metavar="FILE", help="use the tools of the MCP servers in this mcp.json file (docs/agent.md)")
    p.add_argument(
        "--tool-choice", choices=("auto", "required"), default="auto", help="with --mcp: must the first turn call a tool"
    )
    p.add_argument("--allow-tools", action="store_true", help="with --mcp: run every tool call without asking")
    p.add_argument("--max-rounds", type=valid.whole(valid.COUNT, "max_rounds"), default=8, help="with --mcp: most model turns that call tools")
    p.set_defaults(run=run)


@dataclass(frozen=True, slots=True)
class _Talk:
    """The model a terminal conversation talks to, and how an answer is asked of it.

    Attributes:
        name: The model's name.
        ask: Streams the answer to a conversation to the terminal.
        model: The local model (None: a remote provider's).
        backend: The backend it runs on in this process (None: the worker's).
        close: Lets go of what this process holds for it.
        sees: The model reads pictures (a message's paths to them are sent as pictures, as `ollama run` sends them).
    """

    name: str
    ask: Callable[[list[dict]], Reply]
    model: LocalModel | None = None
    backend: Any = None
    close: Callable[[], None] = lambda: None
    sees: bool = False


def _open_talk(name: str | None, args: argparse.Namespace, options, sampling: dict[str, Any], *, sees: bool = False) -> _Talk:
    """The conversation's model ``name``: a remote provider's, a local one through the worker, or in this process
    where the chat asks for that (:func:`_runs_here`). Each answer is sampled as ``sampling`` says when it is asked
    (`/set parameter` changes it), the model's own settings holding for the rest.

    Raises:
        HearthError: no such model, or it cannot load (the sentence says why).
    """
    from engine.model_defaults import ModelDefaults, chat_sampling

    def shape() -> Shape:  # as the flags and `/set` say when the answer is asked
        return Shape(args.format, args.think, args.keepalive)

    remote = _open_remote(name)
    if remote is not None:
        chat = remote[0]
        return _Talk(chat.name, lambda history: _answer(chat, chat.name, history, chat_sampling(sampling, None), None,
                                                         shape(), args), backend=chat, close=chat.close)  # fmt: skip
    from engine.catalog.registry import resolve_model
    from engine.commands.chat_images import can_see, check_sees

    local = resolve_model(name)  # an unknown name is refused before anything starts
    if sees:
        check_sees(local)
    if not _runs_here(args, local):
        from engine.commands.chat_worker import WorkerChat, daemon_client

        worker = WorkerChat(daemon_client(), local.name)
        worker.load(args.ctx, args.keepalive)
        return _Talk(local.name, lambda history: worker.answer(
            history, {**chat_sampling(sampling, local.origin_info), **shape().body()}, show_stats=args.stats,
            show_thinking=not args.hidethinking), model=local, sees=can_see(local))  # fmt: skip
    from engine.loading import open_model

    backend, model = open_model(name, backend=args.backend, options=options)
    defaults = ModelDefaults.from_info(model.origin_info)  # applied here as the worker applies them
    return _Talk(model.name, lambda history: _answer(backend, model.name, history, chat_sampling(sampling, model.origin_info),
                                                     defaults, shape(), args), model=model, backend=backend,
                 close=backend.close, sees=can_see(model))  # fmt: skip


def _answer(backend, model_name: str, history: list, sent: dict[str, Any], defaults, shape: Shape, args) -> Reply:
    """Stream the answer to ``history`` from ``backend`` in this process, sampled with the fields ``sent`` and, for
    the rest, the model's ``defaults`` (its system prompt and messages too) where it has them; ``shape`` as the
    flags ask, the thinking printed unless ``--hidethinking`` and the figures after it with ``--stats``."""
    from engine.commands.chat_images import chat_messages
    from engine.commands.chat_reply import Reply, thinking_out
    from engine.model_defaults import SAMPLING_FIELDS
    from engine.types import GenerationRequest, SamplingParams

    request = GenerationRequest(model=model_name, messages=chat_messages(history), params=SamplingParams(**sent),
                                unset=SAMPLING_FIELDS - sent.keys(), **shape.request())  # fmt: skip
    if defaults is not None:
        request = defaults.apply(request)
    show_stats, show_thinking = args.stats, not args.hidethinking
    stream = backend.stream(request)
    parts: list[str] = []
    last = None
    thinking = False
    stopped = False
    aside = thinking_out()
    try:
        for chunk in stream:
            if chunk.reasoning and show_thinking:  # thinking, dimmed, before the answer (docs/tools.md)
                aside.write(_dim(chunk.reasoning))
                thinking = True
            if chunk.text:
                if thinking:
                    aside.write("\n")
                    thinking = False
                parts.append(chunk.text)
                sys.stdout.write(chunk.text)
            for call in chunk.tool_calls:  # calls apart from the answer text, one line each
                if thinking:
                    aside.write("\n")
                elif parts:
                    sys.stdout.write("\n")
                sys.stdout.write(f"\u2192 {call.name}({call.arguments})")
                parts.append("")
                thinking = False
            aside.flush()
            sys.stdout.flush()
            last = chunk
    except KeyboardInterrupt:
        stream.close()  # cancels the generation; the conversation goes on
        sys.stdout.write(" [stopped]")
        stopped = True
    sys.stdout.write("\n")
    failed = last is not None and last.finish_reason == "error"
    if last is not None and failed:
        print(f"hearth: {last.error}", file=sys.stderr)
    if show_stats and last is not None and last.finish_reason:
        ttft = f"{last.time_to_first_token * 1000:.0f} ms" if last.time_to_first_token is not None else "-"
        tps = f"{last.tokens_per_second:.1f}" if last.tokens_per_second else "-"
        print(f"[{last.completion_tokens} tokens, {tps} tokens/s, first token {ttft}]", file=sys.stderr)
    return Reply("".join(parts), stopped=stopped, failed=failed)


def _dim(text: str) -> str:
    """``text`` dimmed on a terminal (SGR 2), as is when piped."""
    return f"\x1b[2m{text}\x1b[0m" if sys.stdout.isatty() else text


def _open_remote(name: str | None):
    """A chat with a remote provider's ``PROVIDER/MODEL`` (as `hearth models` lists it), twice (it is
    the backend and names the model), or None for a local model."""
    if not name or "/" not in name:
        return None
    from engine.catalog.registry import ModelRegistry
    from engine.errors import ModelNotFound
    from engine.remote.chat import RemoteChat, find_remote

    try:  # a local model's name is never a provider's (local names resolve first)
        ModelRegistry().resolve(name)
        return None
    except ModelNotFound:
        pass

    found = find_remote(name)
    if found is None:
        return None
    chat = RemoteChat(*found, name=name)
    return chat, chat


def _model_and_message(args: argparse.Namespace) -> str | None:
    """Read the positional words as `ollama run MODEL [PROMPT]` reads them: two are a model and a message; one is
    the model when it names one here (or has the ':' or '/' of a model's name and no space), else the message, as
    ``hearth chat "Hello"`` always was. A local name may be written as Ollama's clients write it (``:latest``,
    ``hf.co/``). None, or why the words cannot be read (one sentence)."""
    if getattr(args, "more", None):  # `hearth chat llama3.2 why is the sky blue`: one message
        args.prompt = " ".join([args.prompt, *args.more])
        args.more = []
    first, second = getattr(args, "first", None), args.prompt
    if second is not None:
        if args.model is not None:
            return f"Give the model once: as the first word or with --model, not both ('{first}' and '{args.model}')."
        args.model = _model_named(first) or first
    elif first is not None:
        named = _model_named(first) if args.model is None else None
        if named is not None:
            args.model = named
        elif args.model is None and _shaped_as_model(first):
            args.model = first  # refused as no model here, before anything starts
        else:
            args.prompt = first
    return None


def _model_named(word: str | None) -> str | None:
    """The name ``word`` means, as `hearth models` would find it (a name, a file's path, a remote provider's
    ``PROVIDER/MODEL``; ``:latest`` and ``hf.co/`` tolerated), or None where it names none."""
    from engine.catalog.registry import resolve_model
    from engine.errors import ModelNotFound
    from engine.remote.routing import local_spelling

    if not word or not word.strip() or any(c.isspace() for c in word):
        return None
    for spelling in dict.fromkeys((word, local_spelling(word))):
        try:
            resolve_model(spelling)
        except (ModelNotFound, OSError, ValueError):
            continue
        return spelling
    if "/" in word:
        from engine.remote.chat import find_remote

        if find_remote(word) is not None:
            return word
    return None


def _shaped_as_model(word: str) -> bool:
    """Whether ``word`` is written as a model's name (``llama3.2:3b``, ``owner/repo``): a ':' or '/', a letter, no
    space, nothing a message would hold."""
    import re

    return bool(re.fullmatch(r"[\w.\-]+(/[\w.\-]+)*(:[\w.\-]+)?", word)) and ("/" in word or ":" in word) \
        and re.search(r"[A-Za-z]", word) is not None


def _pull_missing(name: str | None, ctx: int | None) -> int | None:
    """`ollama run NAME` pulls a model it lacks: here a model of Ollama's library that Hearth lists (``llama3.2``), or
    a Hub repo (``owner/repo[:VARIANT]``), not on this machine is offered for download at a terminal first (asked:
    it can be gigabytes), and pulled as `hearth pull` pulls it. None: nothing to pull (the name is here, or names
    nothing a pull could fetch: refused as before); else `hearth pull`'s exit status.

    Raises:
        ModelNotFound: it could be pulled, but is not (no terminal to ask at, or the answer was no); the sentence
            names the command that pulls it.
    """
    from engine.catalog.recommended import ollama_library_repo
    from engine.errors import ModelNotFound

    if name is None or _model_named(name) is not None:
        return None
    library = ollama_library_repo(name)
    if library is None and ("/" not in name or any(c.isspace() for c in name)):
        return None
    missing = ModelNotFound(name, f"Model '{name}' is not on this machine; get it with `hearth pull {name}`.")
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        raise missing
    what = f"{name} (Ollama's name for {library[0]})" if library is not None else name
    try:
        said = input(f"{what} is not on this machine; pull it now? [y/N] ")
    except (EOFError, KeyboardInterrupt):
        said = ""
    if said.strip().lower() not in ("y", "yes"):
        raise missing
    from engine.commands import pull

    return pull.run(argparse.Namespace(model=name, ctx=ctx, revision=None, mmproj_variant=None))


def _runs_here(args: argparse.Namespace, model) -> bool:
    """Whether this chat runs the model in this process: asked for (--local), or it needs what only an
    in-process run has (a backend or quantization of its own, document collections, a model file by path)."""
    return bool(args.local or args.backend or args.quantization or args.docs or model.source == "path")


def run(args: argparse.Namespace) -> int:
    from engine.backends import LoadOptions, PagedOptions
    from engine.load_settings import ModelLoadSettings
    from engine.types import SamplingParams

    if (refused := _model_and_message(args)) is not None:
        print(f"hearth: {refused}", file=sys.stderr)
        return 2
    # what each answer is sampled with; `/set parameter` changes it for the rest of a conversation (None: not asked)
    sampling: dict[str, Any] = {"temperature": args.temperature, "top_p": args.top_p, "seed": args.seed,
                                "max_tokens": args.max_tokens}  # fmt: skip
    SamplingParams(**{k: v for k, v in sampling.items() if v is not None})  # (checked before anything starts)
    if args.prompt is None:  # piped in, it is one message to answer, as a prompt given here is
        from engine.typed_lines import piped_message

        args.prompt = piped_message()
        if args.prompt == "":
            print('hearth: Nothing came on standard input to answer; pipe a message in, give one '
                  '(`hearth chat "Hello"`), or run `hearth chat` at a terminal to type.', file=sys.stderr)  # fmt: skip
            return 2
    else:  # a message given and text piped in: the text, then the message, as `cat f | ollama run m "..."` sends
        from engine.typed_lines import piped_text

        if (text := piped_text()) is not None:
            args.prompt = f"{text}\n\n{args.prompt}"
    if args.quantization and args.backend != "paged":
        print("hearth: --quantization applies to the paged engine; add --backend paged.", file=sys.stderr)
        return 2
    if (pulled := _pull_missing(args.model, args.ctx)) is not None and pulled != 0:
        return pulled
    options = ModelLoadSettings(n_ctx=args.ctx, n_seq_max=1).apply(LoadOptions(paged=PagedOptions(quantization=args.quantization)))
    if args.mcp:  # the agent loop is a client of Hearth's API, served for the run
        if args.image:
            print("hearth: --image does not go with --mcp yet; leave one out.", file=sys.stderr)
            return 2
        from engine.agent.terminal import run_agent_chat

        return run_agent_chat(args, options)
    from engine.commands.chat_images import image_part

    images = [image_part(path) for path in args.image or ()]  # an unreadable file is refused before any load
    talk = _open_talk(args.model, args, options, sampling, sees=bool(images))

    def reopen(name: str) -> _Talk:
        """`/load NAME`: the conversation goes on with that model, the one before let go of once it is open."""
        nonlocal talk
        opened = _open_talk(name, args, options, sampling)
        talk.close()
        talk = opened
        return opened

    docs = None
    try:
        if args.docs:
            from engine.commands.docs import ChatDocs

            docs = ChatDocs(args.docs, talk.backend, args.max_tokens)
        return _converse(args, talk, images, docs, sampling=sampling, reopen=None if docs is not None else reopen)
    finally:
        if docs is not None:
            docs.close()
        talk.close()


def _converse(
    args: argparse.Namespace, talk: _Talk, images: list, docs=None, *, sampling: dict[str, Any],
    reopen: Callable[[str], _Talk] | None = None,
) -> int:  # fmt: skip
    """One answer to ``args.prompt`` (exiting 130 when Ctrl-C stopped it, 1 when it failed), or a conversation on
    the terminal with ``talk``'s model; each answer is sampled as ``sampling`` says (which `/set parameter` changes),
    and ``reopen`` opens another model for `/load` (None: it cannot change here)."""
    from engine.commands.chat_images import pictures_in, user_message

    history: list[dict] = [{"role": "system", "content": args.system}] if args.system else []
    if args.prompt is not None:
        if docs is not None:
            history = [{"role": "system", "content": docs.system(args.prompt, args.system)}]
        text, named = pictures_in(args.prompt) if talk.sees else (args.prompt, [])
        history.append(user_message(text, [*images, *named]))
        reply = talk.ask(history)
        if docs is not None:
            docs.print_sources(reply.text)
        return reply.exit_code
    from engine.typed_lines import typed_lines

    def clear() -> None:
        history[:] = [m for m in history[:1] if m["role"] == "system"]

    def set_system(text: str) -> None:
        args.system = text or None
        kept = [m for m in history if m["role"] != "system"]
        history[:] = ([{"role": "system", "content": text}] if text else []) + kept

    def load(name: str) -> str:
        nonlocal talk
        if reopen is None:
            return "/load does not go with --docs; start `hearth chat MODEL --docs NAME` with the other model."
        from engine.errors import HearthError

        try:
            talk = reopen(_model_named(name) or name)
        except HearthError as exc:
            return str(exc)
        except KeyboardInterrupt:
            return f"Stopped loading {name}; still chatting with {talk.name}."
        clear()
        if not talk.sees:
            pending.clear()  # the pictures given for the first message: this model cannot read them
        return f"Chatting with {talk.name}; the conversation starts over."

    def save(name: str) -> str:
        if talk.model is None:
            return f"{talk.name} is a remote provider's model; /save makes models from local ones."
        from engine.errors import HearthError

        try:
            made = save_conversation(talk.model, name, sampling, args.system, history)
        except HearthError as exc:
            return str(exc)
        return f"Created {made.name}: `hearth chat {made.name}` starts from this conversation and its settings."

    pending = list(images)  # pictures for the next message: --image's for the first, or those a message names
    commands = _commands(lambda: talk, args, sampling, set_system, load, save)
    for line in typed_lines(f"Chatting with {talk.name}.", clear, commands):
        if docs is not None:  # each question brings its own sources
            system = {"role": "system", "content": docs.system(line, args.system)}
            history = [system, *(m for m in history if m["role"] != "system")]
        if talk.sees:
            from engine.errors import InvalidRequest

            try:
                line, named = pictures_in(line)
            except InvalidRequest as exc:  # a file named that is not a picture: said, and the message not sent
                print(f"hearth: {exc}", file=sys.stderr)
                continue
            pending.extend(named)
        history.append(user_message(line, pending))
        reply = _answer_within_context(talk.ask, history)
        pending.clear()  # the pictures went with this message (and stay in the conversation), or it was refused
        if reply is None:  # refused: said on stderr, and the message taken back (its pictures too); it goes on
            history.pop()
            continue
        history.append({"role": "assistant", "content": reply.text})
        if docs is not None:
            docs.print_sources(reply.text)
    return 0


#: `/set parameter NAME`: Ollama's names of what `hearth chat` samples with, and each one's rule.
_PARAMETERS = {"temperature": ("temperature", valid.TEMPERATURE), "top_p": ("top_p", valid.TOP_P),
               "seed": ("seed", valid.SEED), "num_predict": ("max_tokens", valid.MAX_TOKENS)}  # fmt: skip


def save_conversation(base: LocalModel, name: str, sampling: dict[str, Any], system: str | None,
                      history: list[dict]) -> LocalModel:  # fmt: skip
    """`/save NAME`, as `ollama run`'s: the model ``name`` made from ``base`` (its files shared, as `hearth create`
    makes one from a model) with the settings asked in this chat (flags, `/set`), its system prompt, and for messages ``base``'s
    own followed by the conversation so far, which every chat with ``name`` then starts from.

    Raises:
        InvalidRequest: ``name`` is not a name a model can have, or another model's; ``base`` is a file Hearth does
            not list.
    """
    from engine.catalog.modelfile import Modelfile, layered
    from engine.catalog.registry import ModelRegistry
    from engine.errors import InvalidRequest, ModelNotFound
    from engine.model_defaults import ModelDefaults
    from engine.remote.routing import local_spelling
    from engine.validation import model_name

    checked = model_name(local_spelling(name.strip()), name="NAME")
    messages = [{"role": m.role, "content": m.content} for m in ModelDefaults.from_info(base.origin_info).messages]
    for m in history:
        if m["role"] in ("user", "assistant"):
            content = m["content"]
            text = content if isinstance(content, str) else "".join(p.get("text", "") for p in content if isinstance(p, dict))
            messages.append({"role": m["role"], "content": text})
    parameters = {key: sampling[field] for key, (field, _) in _PARAMETERS.items() if sampling.get(field) is not None}
    asked = Modelfile(base=base.name, parameters=parameters, system=system, messages=messages)
    registry = ModelRegistry()
    try:
        base = registry.resolve(base.name)  # as it is now (its settings may have changed since the chat began)
    except ModelNotFound:
        raise InvalidRequest(f"/save makes a model from one Hearth lists, and {base.path} is not among them; add it "
                             f"with `hearth import {base.path}`, then chat with it by name.") from None  # fmt: skip
    return registry.derive(base, checked, layered(base.origin_info or {}, asked))


def _commands(
    current: Callable[[], _Talk], args: argparse.Namespace, sampling: dict[str, Any], set_system: Callable[[str], None],
    load: Callable[[str], str], save: Callable[[str], str],
):  # fmt: skip
    """`ollama run`'s `/set`, `/show`, `/load` and `/save` for a terminal conversation with ``current()``'s model: each
    a function of the rest of its line, returning the sentence to say."""

    def set_(rest: str) -> str:
        what, _, value = rest.partition(" ")
        if what == "system":
            set_system(value.strip().strip('"'))
            return "The system prompt is set." if value.strip() else "The system prompt is cleared."
        if what == "parameter":
            key, _, text = value.strip().partition(" ")
            if key not in _PARAMETERS:
                return (f"'{key}' is not a parameter this chat sets; set one of {', '.join(_PARAMETERS)} (the context: "
                        "start `hearth chat --ctx N`).")  # fmt: skip
            from engine.errors import InvalidRequest

            field, rule = _PARAMETERS[key]
            if key in ("num_predict", "seed") and text.strip() in ("-1", "-2"):  # as Ollama reads them
                sampling.pop(field, None)
                return f"Set '{key}' to {text.strip()}: " + ("no limit of the chat's own." if key == "num_predict"
                                                            else "a new seed for each answer.")  # fmt: skip
            try:
                sampling[field] = rule.parse(text)
            except InvalidRequest as exc:
                return str(exc).replace(f"'{rule.name}'", f"'{key}'")
            return f"Set '{key}' to {text.strip()}."
        switches = {"think": ("think", True), "nothink": ("think", False), "noformat": ("format", None),
                    "verbose": ("stats", True), "quiet": ("stats", False)}  # fmt: skip
        if what in switches and not value.strip():
            setattr(args, *switches[what])
            return f"Set '{what}' mode."
        if what == "format" and value.strip() == "json":
            args.format = "json"
            return "Set format to 'json' mode."
        return ("Use /set system TEXT, /set parameter NAME VALUE, /set format json, /set noformat, /set think, "
                "/set nothink, /set verbose or /set quiet.")  # fmt: skip

    def show(rest: str) -> str:
        talk = current()
        if rest == "system":
            return args.system or "There is no system prompt; /set system TEXT sets one."
        if rest == "info" and talk.model is not None:  # as `hearth show` says it, up to its template
            from engine.catalog.registry import ModelRegistry
            from engine.commands.show import describe, shown_lines

            registry = ModelRegistry()
            lines = shown_lines(describe(talk.model, registry))
            return "\n".join(lines[: next((i for i, line in enumerate(lines) if line.startswith("Template")), len(lines))]).strip()
        if rest in ("parameters", "info", ""):
            from engine.model_defaults import ModelDefaults, chat_sampling

            info = talk.model.origin_info if talk.model is not None else None
            used = {**dict(ModelDefaults.from_info(info).sampling), **chat_sampling(sampling, info)}
            shown = ", ".join(f"{key} {'-' if used.get(field) is None else used[field]}"
                              for key, (field, _) in _PARAMETERS.items())  # fmt: skip
            return f"{talk.name}: {shown}" + (f"; system prompt: {args.system}" if args.system else "")
        return "Use /show system, /show parameters or /show info."

    def one_name(command: str, then: Callable[[str], str], what: str) -> Callable[[str], str]:
        return lambda rest: then(rest) if rest and not any(c.isspace() for c in rest) else f"Use {command} {what}."

    return {"/set": set_, "/show": show, "/load": one_name("/load", load, "MODEL (a model `hearth models` lists)"),
            "/save": one_name("/save", save, "NAME (the new model's name)")}  # fmt: skip


def _answer_within_context(ask: Callable[[list[dict]], Reply], history: list[dict]) -> Reply | None:
    """``ask(history)``; a conversation grown past the model's context loses its oldest exchanges (in ``history``
    too; the system prompt and the message asked stay) until it fits, as `ollama run`'s does, rather than ending the
    chat. None: the request was refused (a message too long alone, a picture the model cannot read, a worker
    gone), said on stderr."""
    from engine.errors import HearthError
    from engine.typed_lines import LEFT_OUT, leave_out_oldest

    told = False
    while True:
        try:
            return ask(history)
        except HearthError as exc:
            if exc.code != "context_length_exceeded" or not leave_out_oldest(history):
                print(f"hearth: {exc}", file=sys.stderr)
                return None
            if not told:
                print(_dim(LEFT_OUT), file=sys.stderr)
                told = True

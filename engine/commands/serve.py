"""`hearth serve`: the worker, headless, in the foreground."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from engine import validation as valid
from engine.commands.load_flags import add_flag, given

if TYPE_CHECKING:
    from engine.backends import LoadOptions
    from engine.settings import ServerSettings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="serve the OpenAI-compatible API",
        description="Serve local models through an OpenAI-compatible API until Ctrl-C.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    p.add_argument("--port", type=valid.whole(valid.PORT), default=8765, help="port (0: any free port)")
    p.add_argument(
        "--api-key",
        action="append",
        default=[],
        help="require 'Authorization: Bearer KEY' (repeatable; also HEARTH_API_KEY, or HEARTH_API_KEYS comma-separated);"
        " with --admin-key these keys only run models",
    )
    p.add_argument(
        "--admin-key",
        action="append",
        default=[],
        help="the key for the admin routes (documents, downloads, import, load, delete, remotes; repeatable; also "
        "HEARTH_ADMIN_KEY); it runs models too",
    )
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="also answer requests addressed to this host name (besides loopback and --host; repeatable)",
    )
    p.add_argument(
        "--insecure-no-key",
        action="store_true",
        help="allow a --host other than loopback without any key (anyone who reaches it can use it)",
    )
    p.add_argument("--model", "-m", action="append", default=[],
                   help="load this model at start, before /health says ok (repeatable; others load on first request)")  # fmt: skip
    p.add_argument("--backend", "-b", help="backend for every model: llamacpp, paged or mlx")
    p.add_argument("--cors-origin", action="append", default=[], help="allow this browser origin (repeatable)")
    p.add_argument("--idle-ttl", type=valid.cli_type(idle_ttl), default=None, metavar="TIME",
                   help="unload a model after it sat idle this long: seconds, or 10m, 1h (default: never)")
    # The load settings a whole server takes (engine.commands.load_flags), for every model it loads.
    add_flag(p, "n_ctx", help="context length per sequence")
    add_flag(p, "n_seq_max", help="sequences decoded at once per model")
    add_flag(p, "n_threads", help="CPU threads per model, kept fixed (default: the physical cores; llama.cpp then uses fewer while other processes keep some busy)")
    add_flag(p, "kv_type", help="KV cache type (llama.cpp: f16, q8_0, q4_0; paged: f16, fp8); default: 16-bit, or what fits")
    p.add_argument(
        "--max-waiting",
        type=valid.whole(valid.QUEUE),
        default=None,
        help="requests queued per model beyond those decoded at once before new ones get 429 "
        "(default: 64 or --parallel, whichever is more; the paged engine: 256 or --parallel)",
    )
    p.add_argument(
        "--quantization",
        choices=("int4", "int8", "fp8"),
        help="paged backend: weight quantization (int4: the CPU's fast path; int8, fp8: GPUs)",
    )
    add_flag(
        p,
        "speculative",
        default="auto",
        help="speculative decoding: auto (the default: prompt lookup above temperature 0, backing off where it "
        "does not pay; at temperature 0 no drafts unless a request asks, so greedy answers are those of off), "
        "ngram (prompt lookup whatever it costs), draft:MODEL (a smaller model of the same vocabulary, a registered "
        "name or a .gguf path, drafts for every llama.cpp model whose vocabulary it has) or off. Drafted answers "
        "follow the model's distribution; verifying a draft in one batch rounds unlike one-token steps, so with "
        "ngram or draft:MODEL a greedy answer can part from off's where its two best tokens nearly tie",
    )
    p.add_argument(
        "--allow-image-urls",
        action="store_true",
        help="fetch images that requests give by http(s) URL (off: only images sent in the request are read)",
    )
    p.add_argument(
        "--mmproj",
        metavar="PATH",
        help="with --model FILE.gguf (the last one given): the multimodal projector GGUF that lets that model see "
        "(and hear)",
    )
    p.add_argument(
        "--stream-interval",
        type=valid.cli_type(stream_interval),
        default=0.0,
        metavar="MS",
        help="least milliseconds between a streamed answer's events, each with the tokens made since the last "
        "(default 0: every token as it comes); with many streams at once, fewer events leave more of the CPU to "
        "the model. An answer's first text and its end go at once",
    )
    p.add_argument(
        "--reasoning-budget",
        type=valid.whole(valid.REASONING_BUDGET),
        default=None,
        metavar="N",
        help="tokens a model may think before its thinking is closed for it, for requests that give no budget of "
        "their own (thinking_token_budget, thinking.budget_tokens; -1 there: no cap); 0 closes it at once "
        "(default: no cap)",
    )
    p.add_argument("--max-body", type=valid.whole(valid.BODY_BYTES), default=8 * 1024 * 1024, help="largest request body in bytes")
    p.add_argument(
        "--ollama-port",
        type=valid.whole(valid.PORT, "ollama_port"),
        default=None,
        metavar="PORT",
        help="also listen on PORT (Ollama's is 11434) for clients that assume Ollama's address",
    )
    p.set_defaults(run=run)


def idle_ttl(text: str) -> float | None:
    """``--idle-ttl``: seconds or a duration (``10m``), or ``never`` (None)."""
    return valid.keep_alive(text, name="idle_ttl")


def stream_interval(text: str) -> float:
    """``--stream-interval``: milliseconds."""
    from engine.backends.delivery import parse_interval

    return parse_interval(text)


def load_options(args: argparse.Namespace) -> LoadOptions:
    """The load options ``hearth serve``'s flags ask for, for every model it loads: its load settings (speculative
    decoding ``auto`` unless another is given) over the server's own options.

    Raises:
        InvalidRequest: a speculative mode Hearth does not have.
    """
    from dataclasses import replace

    from engine.backends import LoadOptions, PagedOptions

    settings = replace(given(args), speculative=getattr(args, "speculative", None) or "auto")
    return settings.apply(LoadOptions(max_waiting=args.max_waiting, paged=PagedOptions(quantization=args.quantization)))


def draft_model_path(options: LoadOptions) -> LoadOptions:
    """``options`` with the draft model of ``--speculative draft:MODEL`` named by its file: a registered name
    is looked up, a path taken as it is.

    Raises:
        ModelNotFound: no registered model has that name and no file is there.
        InvalidRequest: the model is not a GGUF file.
    """
    from dataclasses import replace

    from engine.backends.speculative import DRAFT
    from engine.catalog.registry import resolve_model
    from engine.errors import InvalidRequest

    spec = options.speculative
    if spec.mode != DRAFT or spec.draft_model is None:
        return options
    model = resolve_model(spec.draft_model)
    if model.format != "gguf":
        raise InvalidRequest(
            f"The draft model '{spec.draft_model}' is not a GGUF file; name a GGUF model of the same family.",
            param="speculative",
        )
    return replace(options, speculative=replace(spec, draft_model=str(model.path)))


def server_settings(args: argparse.Namespace, environ: Mapping[str, str]) -> ServerSettings:
    """The server settings ``hearth serve``'s flags and environment (the keys, where `ps` does not show them) ask for."""
    from engine.settings import ServerSettings

    keys = list(args.api_key)
    if environ.get("HEARTH_API_KEY"):
        keys.append(environ["HEARTH_API_KEY"])
    # Several keys without putting any on the command line, where `ps` shows them
    # (the keys the user gave other apps; the desktop app's own token comes as HEARTH_ADMIN_KEY).
    keys += [k.strip() for k in environ.get("HEARTH_API_KEYS", "").split(",") if k.strip()]
    admin_keys = list(args.admin_key)
    if environ.get("HEARTH_ADMIN_KEY"):
        admin_keys.append(environ["HEARTH_ADMIN_KEY"])
    return ServerSettings(
        host=args.host,
        port=args.port,
        api_keys=tuple(keys),
        admin_keys=tuple(admin_keys),
        allowed_hosts=tuple(args.allowed_host),
        cors_origins=tuple(args.cors_origin),
        max_body_bytes=args.max_body,
        ollama_port=args.ollama_port,
        allow_image_urls=bool(getattr(args, "allow_image_urls", False)),
        stream_interval_ms=getattr(args, "stream_interval", 0.0),
        reasoning_budget=getattr(args, "reasoning_budget", None),
    )


def _blank_key(settings) -> str | None:
    """The flag of a key that is empty or has spaces around it: clients' keys arrive trimmed, so no
    request could ever match it (and every request would get a 401)."""
    for flag, keys in (("--api-key", settings.api_keys), ("--admin-key", settings.admin_keys)):
        if any(not k.strip() or k != k.strip() for k in keys):
            return flag
    return None


def run(args: argparse.Namespace) -> int:
    if args.quantization and args.backend != "paged":
        print("hearth: --quantization applies to the paged engine; add --backend paged.", file=sys.stderr)
        return 2

    from engine.errors import InvalidRequest, ModelNotFound

    try:
        options = draft_model_path(load_options(args))
    except (InvalidRequest, ModelNotFound) as exc:
        print(f"hearth: {exc}", file=sys.stderr)
        return 2
    settings = server_settings(args, os.environ)
    blank = _blank_key(settings)
    if blank is not None:
        env = "HEARTH_API_KEY" if blank == "--api-key" else "HEARTH_ADMIN_KEY"
        print(
            f"hearth: a key given with {blank} (or {env}) is empty or has spaces around it, so no client could "
            "send it; give a key of at least one character without spaces around it.",
            file=sys.stderr,
        )
        return 2
    if args.mmproj and not args.model:
        print("hearth: --mmproj pairs a projector with --model FILE.gguf; add --model.", file=sys.stderr)
        return 2
    if not settings.is_loopback and not settings.has_key and not args.insecure_no_key:
        print(
            f"hearth: listening on {args.host} with no key would let anyone who reaches this machine use it; "
            "set HEARTH_API_KEY (or --api-key), or add --insecure-no-key if that is what you want.",
            file=sys.stderr,
        )
        return 2
    from pathlib import Path

    from engine.server import create_app
    from engine.worker.main import WorkerConfig, run_worker

    config = WorkerConfig(
        settings=settings,
        models=tuple(args.model),
        backend=args.backend,
        idle_ttl=args.idle_ttl,
        load_options=options,
        mmproj=Path(args.mmproj).expanduser() if args.mmproj else None,
    )
    return run_worker(config, app_factory=create_app)

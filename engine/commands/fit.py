"""`hearth fit MODEL`: how a model would load here — context, slots, KV cache type, GPU layers —
and the memory it takes (weights, KV cache, buffers, runtime), from the one memory model."""

from __future__ import annotations

import argparse
import json
import sys

from engine import validation as valid


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "fit",
        help="show how a model fits this machine's memory",
        description="Show how MODEL (a local name or path, or a Hub OWNER/REPO[:VARIANT]) would load here: "
        "context, slots, KV cache type, GPU layers, and the memory each part takes.",
    )
    p.add_argument("model", help="a local model (name or path) or OWNER/REPO[:VARIANT] on the Hub")
    p.add_argument("--ctx", type=valid.whole(valid.CTX), default=None, help="context length per slot (default: 4096, or what fits)")
    p.add_argument("--parallel", type=valid.whole(valid.PARALLEL), default=None, help="sequence slots (default: as many as fit, up to 16)")
    p.add_argument("--kv-type", choices=("f16", "q8_0", "q4_0", "fp8"), help="KV cache type (default: 16-bit, or what fits)")
    p.add_argument("--speculative", metavar="MODE", default=None,
                   help="as `hearth serve` takes it; with draft:MODEL the draft model's memory is counted")  # fmt: skip
    p.add_argument("--measure", action="store_true",
                   help="measure this machine's speed again (it is measured once and kept until the hardware changes)")
    p.add_argument("--no-speed", action="store_true", help="leave out the speed model (no measuring)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=run)


def _mb(n: int) -> str:
    from engine.commands.models import human_size

    return human_size(n)


def render(report) -> list[str]:
    """The breakdown as lines of text."""
    plan, facts = report.plan, report.facts
    m = plan.memory
    name = f"{report.model}:{report.variant}" if report.source == "hub" and report.variant else report.model
    where = "Hub variant, judged on this machine at rest" if report.source == "hub" else "on this machine, now"
    lines = [f"{name}  ({where})"]
    if report.label:
        lines.append(f"  advisor    {report.label}")
    lines.append(f"  plan       {plan.describe()} [{plan.backend}]" + ("" if plan.fits else "  (does not fit)"))
    types = ", ".join(f"{t} {_mb(b)}" for t, b in facts.by_type[:4])
    lines.append(f"  weights    {_mb(m.weights):>10}" + (f"  ({types})" if types else ""))
    per_token = report.kv_bytes_per_token
    lines.append(
        f"  KV cache   {_mb(m.kv_cache):>10}  ({per_token:,} bytes per token x {plan.n_ctx:,} tokens x "
        f"{plural(plan.n_seq, 'slot')}"
        + (f", {plan.kv_blocks:,} blocks" if plan.kv_blocks is not None else "")
        + (", and the draft model's cache" if facts.draft is not None else "")
        + ")"
    )
    lines.append(f"  buffers    {_mb(m.buffers):>10}  (compute and output)")
    on_gpu = any(d.device != "cpu" for d in plan.devices)
    engine = "llama.cpp" if plan.backend == "llamacpp" else f"the {plan.backend} engine"
    lines.append(f"  runtime    {_mb(m.runtime):>10}  (worker, {engine}'s bookkeeping"
                 + (", GPU contexts)" if on_gpu else ")"))  # fmt: skip
    if facts.projector is not None:  # of the figures above: the projector that lets the model see
        p = facts.projector
        lines.append(
            f"  projector  {_mb(plan.projector_bytes):>10}  (of the above: {_mb(p.weights_bytes)} weights, "
            f"{_mb(p.compute_bytes)} encoder buffers, {_mb(p.context_bytes)} contexts; {p.source})"
        )
    if facts.draft is not None:  # of the figures above: the draft model for speculative decoding
        lines.append(f"  draft      {_mb(plan.draft_bytes):>10}  (of the above: its weights, KV cache, buffers and bookkeeping)")
    lines.append(f"  total      {_mb(m.total):>10}")
    for d in plan.devices:
        place = "RAM" if d.device == "cpu" else f"{d.name} ({d.device})"
        layers = f", {d.layers} layers" if d.layers else ""
        lines.append(f"  on {place}: {_mb(d.memory.total)} of {_mb(d.usable)} usable{layers}")
    lines.append(f"  why        {plan.reason}")
    if report.settings_from:  # what a load would take besides what was asked here
        lines.append(f"  settings   {'; '.join(report.settings_from)}")
    trained = facts.shape.context_length
    if trained and plan.n_ctx > trained:
        lines.append(f"  note       {plan.n_ctx:,} tokens is past the {trained:,} the model was trained on; its answers "
                     "degrade beyond that unless it loads with YaRN (`hearth load --rope-scale`).")  # fmt: skip
    lines += render_speed(report)
    return lines


def plural(n: int, word: str) -> str:
    """``1 slot``, ``2 slots``."""
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


def render_speed(report) -> list[str]:
    """The speed model's lines: decoding early in a chat and with the context full, prompts, batching."""
    chat, full = report.speed_chat, report.speed
    if chat is None or full is None:
        return []
    lines = [f"  speed      {chat.describe()} with {chat.depth:,} tokens in context"]
    if full.depth != chat.depth:
        lines.append(f"             {full.describe()} with all {full.depth:,}")
    lines.append(f"             {chat.describe_batching()}")
    return lines


def measured_speed(hardware, *, refresh: bool = False):
    """This machine's figures for the speed model: the kept ones, else measured now (saying so on stderr, since it
    takes seconds). None when they cannot be measured here (llama.cpp missing, a probe that breaks): speed is left
    out then, as it is for another machine's description."""
    from engine.fit.probe import load_cached, machine_speed

    if not refresh and (kept := load_cached(hardware.identity)) is not None:
        return kept
    print("Measuring this machine's speed once (memory, llama.cpp's kernels; under a minute)...", file=sys.stderr)
    try:
        return machine_speed(hardware, refresh=True)
    except Exception as exc:  # the figures are an addition: a command goes on without them
        print(f"warning: could not measure this machine's speed ({exc}); speeds are left out.", file=sys.stderr)
        return None


def run(args: argparse.Namespace) -> int:
    from engine.fit.report import fit_model
    from engine.hardware import detect_hardware

    if "/" not in args.model or args.model.startswith(("/", ".", "~")):  # not a hub repo: a model here, or none
        from engine.catalog.registry import resolve_model

        resolve_model(args.model)  # an unknown name is said at once, before this machine's speed is measured
    hardware = detect_hardware()
    machine = None if args.no_speed else measured_speed(hardware, refresh=args.measure)
    report = fit_model(args.model, hardware, n_ctx=args.ctx, n_seq=args.parallel, kv_type=args.kv_type,
                       speculative=args.speculative, machine=machine)  # fmt: skip
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print("\n".join(render(report)))
    return 0 if report.plan.fits else 1

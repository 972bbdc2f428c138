"""`hearth pull REPO[:VARIANT]`: download a model from the hub, with the advisor's labels and a progress bar."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from engine import validation as valid


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "pull",
        help="download a model from the hub",
        description="Download a model as REPO:VARIANT (e.g. TheOrg/Model-GGUF:Q4_K_M). Without a variant, the "
        "highest-quality one that fits this machine is taken. An interrupted pull resumes where it stopped. The models "
        "of Hearth's list are also pulled by the names of Ollama's library (`hearth pull llama3.2`).",
    )
    p.add_argument("model", help="REPO or REPO:VARIANT, or a name of Ollama's library that Hearth lists (llama3.2, qwen3:8b)")
    p.add_argument("--ctx", type=valid.whole(valid.CTX), default=None, help="context length to plan memory for (default 4096)")
    p.add_argument("--revision", help="a branch or commit of the repo (default: the latest)")
    p.add_argument(
        "--mmproj-variant",
        metavar="LABEL",
        help="for a repo with mmproj projectors (a model that sees): the one to pull with it, e.g. Q8_0 or a file "
        "name (default: the F16 one; none: no projector)",
    )
    p.set_defaults(run=run)


def split_spec(spec: str) -> tuple[str, str | None]:
    """``("owner/name", "Q4_K_M")`` from ``owner/name:Q4_K_M``; the variant is None when absent."""
    repo, sep, variant = spec.rpartition(":")
    if sep and "/" in repo and variant and "/" not in variant:
        return repo, variant
    return spec, None


def variant_lines(variants: Any, advice: Any, *, indent: str = "  ") -> list[str]:
    """One line per variant: name, size, parts, the advisor's label, and a mark on the recommended one."""
    from engine.commands.models import human_size

    width = max((len(v.name) for v in variants), default=4)
    lines = []
    for v in variants:
        est = advice.get(v.name) if advice is not None else None
        parts = f" ({v.parts} parts)" if v.parts > 1 else ""
        label = f"  {est.label}" if est is not None else ""
        label += f", {est.speed_label}" if est is not None and est.speed_label else ""
        mark = "  <- recommended" if advice is not None and advice.recommended == v.name else ""
        sees = "  [vision]" if v.vision else ""
        lines.append(f"{indent}{v.name:<{width}}  {human_size(v.size_bytes):>9}{parts}{sees}{label}{mark}")
    return lines


def _progress_loop(job: Any) -> Any:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    console = Console(stderr=True)
    status = job.status()
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    ) as bar:
        task = bar.add_task(job.name, total=status.bytes_total, completed=status.bytes_done)
        while True:
            status = job.wait(0.2)
            bar.update(task, completed=status.bytes_done)
            if not status.state.active:
                return status


def run(args: argparse.Namespace) -> int:
    from engine.catalog.advisor import Fit, advise
    from engine.catalog.download_job import DownloadState
    from engine.catalog.downloads import DownloadManager
    from engine.catalog.hub import HubClient
    from engine.catalog.registry import ModelRegistry
    from engine.commands.fit import measured_speed
    from engine.commands.models import human_size
    from engine.errors import DownloadError, InvalidRequest
    from engine.hardware import detect_hardware

    if "/" not in args.model:  # not a repo: a local name (`ollama pull NAME` of a model it has) is there already
        from engine.errors import ModelNotFound

        try:
            local = ModelRegistry().resolve(args.model)
        except ModelNotFound:
            local = None
        if local is not None:
            print(f"{local.name} is already on this machine ({local.path}); chat with it: `hearth chat {local.name}`.")
            return 0
    repo, wanted = split_spec(args.model)
    from engine.catalog.recommended import ollama_library_repo

    library = ollama_library_repo(args.model)  # Ollama's library name of a model Hearth lists (`llama3.2`): its repo
    if library is not None:
        repo, wanted = library
        print(f"{args.model} is Ollama's name for {repo}; pulling that (chat with it as {args.model} or by its own name).")
    elif "/" not in args.model:
        raise InvalidRequest(f"'{args.model}' is neither a model here nor one of Ollama's library that Hearth lists; "
                             "pull a hub repo as owner/name[:VARIANT] (`hearth search WORDS` finds them).")  # fmt: skip
    hub = HubClient()
    listing = hub.repo(repo, revision=args.revision)
    registry = ModelRegistry()
    hw = detect_hardware(registry.home / "models")
    advice = advise(listing.variants, hub.model_shape(listing), hw, context_length=args.ctx,
                    projector=hub.projector_facts(listing), machine=measured_speed(hw))  # fmt: skip
    print(f"{listing.repo} on this machine ({hw.describe_gpu() if hw.gpus else 'CPU only, no GPU'}):")
    print("\n".join(variant_lines(listing.variants, advice)))
    if wanted is None and len(listing.variants) > 1:
        if advice.recommended is None:
            raise InvalidRequest(
                f"None of {listing.repo}'s variants fits this machine; name one as {listing.repo}:VARIANT to download it anyway."
            )
        wanted = advice.recommended
        print(f"Taking {wanted}: {advice.reason}")
    variant = listing.pick(wanted, projector=args.mmproj_variant)
    existing = registry.get(f"{listing.repo}:{variant.name}")
    if existing is not None and existing.path.exists():
        print(f"{existing.name} is already downloaded ({existing.path}); remove it with `hearth rm` to download it again.")
        return 0
    est = advice.get(variant.name)
    if est is not None and est.fit is Fit.NONE:
        print(f"warning: {variant.name} will not fit in this machine's memory. {est.reason}", file=sys.stderr)
    manager = DownloadManager(registry, hub=hub)
    try:
        if variant.projector is not None:
            print(f"With the projector {variant.projector.path} ({human_size(variant.projector.size)}): the model sees.")
        job = manager.start(listing.repo, variant.name, listing=listing, projector=args.mmproj_variant)
        try:
            status = _progress_loop(job)
        except KeyboardInterrupt:
            job.pause()
            status = job.wait(10)
            print(
                f"Paused at {human_size(status.bytes_done)} of {human_size(status.bytes_total)}; "
                f"run `hearth pull {listing.repo}:{variant.name}` again to resume.",
                file=sys.stderr,
            )
            return 130
    finally:
        manager.close()
    if status.state is DownloadState.COMPLETED:
        model = registry.get(status.model or "")
        where = f" to {model.path}" if model is not None else ""
        print(f"Pulled {status.name} ({human_size(status.bytes_total)}){where}")
        return 0
    if status.state is DownloadState.FAILED:
        raise DownloadError(status.error or f"The download of {status.name} failed; run the same command to resume it.")
    print(f"The download of {status.name} was {status.state.value}.", file=sys.stderr)
    return 1

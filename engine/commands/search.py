"""`hearth search QUERY`: find models on the hub, with each variant's size and how it fits here."""

from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "search",
        help="search the hub for models",
        description="Search the model hub. Each result lists its variants with their size and how they fit this machine.",
    )
    p.add_argument("query", nargs="?", default="", help="words in the model's name")
    p.add_argument("--sort", choices=("downloads", "likes", "recent"), default="downloads")
    p.add_argument("--format", choices=("gguf", "mlx", "safetensors"), help="only models in this format")
    p.add_argument("--limit", type=int, default=10, help="most results (default 10)")
    p.add_argument("--ctx", type=int, default=None, help="context length to plan memory for (default 4096)")
    p.add_argument("--no-fit", action="store_true", help="list only names and variants (no file sizes or advice)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=run)


def _details(hub, summary, hw, ctx):
    """(listing, advice, error message) for one search result."""
    from engine.catalog.advisor import advise
    from engine.errors import HearthError

    try:
        listing = hub.repo(summary.repo)
        return listing, advise(listing.variants, hub.model_shape(listing), hw, context_length=ctx), None
    except HearthError as exc:
        return None, None, str(exc)


def run(args: argparse.Namespace) -> int:
    from concurrent.futures import ThreadPoolExecutor

    from engine.catalog.hub import HubClient
    from engine.commands.models import human_size
    from engine.commands.pull import variant_lines
    from engine.hardware import detect_hardware

    hub = HubClient()
    results = hub.search(args.query, sort=args.sort, format=args.format, limit=args.limit)
    details: list = [(None, None, None)] * len(results)
    if results and not args.no_fit:
        hw = detect_hardware()
        with ThreadPoolExecutor(max_workers=4) as pool:
            details = list(pool.map(lambda s: _details(hub, s, hw, args.ctx), results))
    if args.json:
        out = []
        for summary, (listing, advice, error) in zip(results, details, strict=True):
            item = summary.to_dict()
            if listing is not None:
                item["variants"] = [v.to_dict() for v in listing.variants]
                item["advice"] = advice.to_dict()
            if error:
                item["error"] = error
            out.append(item)
        print(json.dumps(out, indent=2))
        return 0
    if not results:
        print(f"No models on the hub match '{args.query}'.")
        return 0
    for summary, (listing, advice, error) in zip(results, details, strict=True):
        updated = summary.last_modified.date().isoformat() if summary.last_modified else "-"
        formats = ",".join(summary.formats) or "-"
        gated = "  (gated)" if summary.gated else ""
        print(f"{summary.repo}  [{formats}]  {summary.downloads:,} downloads  {summary.likes:,} likes  updated {updated}{gated}")
        if listing is not None:
            print("\n".join(variant_lines(listing.variants, advice, indent="    ")))
            if advice.recommended:
                print(f"    recommended: {advice.recommended} ({human_size(advice.get(advice.recommended).memory.total)} in memory)")
        elif error:
            print(f"    (files not listed: {error})")
        elif summary.variants:
            print(f"    variants: {', '.join(summary.variants)}")
    return 0

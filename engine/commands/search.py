"""`hearth search QUERY`: find models on the hub, with each variant's size and how it fits here.

`hearth search --recommended` prints Hearth's curated models instead (the list the app's Discover tab
opens on), each with the variant the fit plan suggests here and its label.
"""

from __future__ import annotations

import argparse
import json

from engine import validation as valid


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "search",
        help="search the hub for models",
        description="Search the model hub. Each result lists its variants with their size and how they fit this machine.",
    )
    p.add_argument("query", nargs="?", default="", help="words in the model's name")
    p.add_argument(
        "--recommended",
        action="store_true",
        help="list Hearth's recommended models, each labelled for this machine (no query)",
    )
    p.add_argument("--offline", action="store_true", help="with --recommended: do not ask the hub for live details")
    p.add_argument("--sort", choices=("downloads", "likes", "recent"), default="downloads")
    p.add_argument("--format", choices=("gguf", "mlx", "safetensors"), help="only models in this format")
    p.add_argument("--limit", type=valid.whole(valid.COUNT, "limit"), default=10, help="most results (default 10)")
    p.add_argument("--ctx", type=valid.whole(valid.CTX), default=None, help="context length to plan memory for (default 4096)")
    p.add_argument("--no-fit", action="store_true", help="list only names and variants (no file sizes or advice)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=run)


def _details(hub, summary, hw, ctx, machine):
    """(listing, advice, error message) for one search result (``machine``: this machine's speed figures)."""
    from engine.catalog.advisor import advise
    from engine.errors import HearthError

    try:
        listing = hub.repo(summary.repo)
        advice = advise(listing.variants, hub.model_shape(listing), hw, context_length=ctx,
                        projector=hub.projector_facts(listing), machine=machine)  # fmt: skip
        return listing, advice, None
    except HearthError as exc:
        return None, None, str(exc)


def run(args: argparse.Namespace) -> int:
    from engine.errors import InvalidRequest

    if args.recommended:
        if args.query:
            raise InvalidRequest("Give either words to search for or --recommended, not both.")
        return run_recommended(args)
    if args.offline:
        raise InvalidRequest("--offline goes with --recommended; leave it out to search the hub.")
    from concurrent.futures import ThreadPoolExecutor

    from engine.catalog.hub import HubClient
    from engine.commands.fit import measured_speed
    from engine.commands.models import human_size
    from engine.commands.pull import variant_lines
    from engine.hardware import detect_hardware

    hub = HubClient()
    results = hub.search(args.query, sort=args.sort, format=args.format, limit=args.limit)
    details: list = [(None, None, None)] * len(results)
    if results and not args.no_fit:
        hw = detect_hardware()
        machine = measured_speed(hw)
        with ThreadPoolExecutor(max_workers=4) as pool:
            details = list(pool.map(lambda s: _details(hub, s, hw, args.ctx, machine), results))
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
        formats += ",vision" if summary.vision else ""
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


def run_recommended(args: argparse.Namespace) -> int:
    """Print Hearth's recommended models, grouped by use, each with the variant suggested here."""
    from engine.catalog.hub import HubClient
    from engine.catalog.recommended import CATEGORIES, load_picks, recommend
    from engine.commands.fit import measured_speed
    from engine.commands.models import human_size
    from engine.hardware import detect_hardware

    hw = detect_hardware()
    listing = recommend(load_picks(), hw, hub=None if args.offline else HubClient(), context_length=args.ctx,
                        machine=measured_speed(hw))  # fmt: skip
    if args.json:
        print(json.dumps(listing.to_dict(), indent=2))
        return 0
    gpus = ", ".join(g.name for g in hw.gpus) or "no GPU"
    print(f"Recommended for this machine ({gpus}, {human_size(hw.ram_total)} RAM):")
    for category in CATEGORIES:
        entries = [e for e in listing.entries if e.pick.category == category]
        if not entries:
            continue
        print(f"\n{listing.categories.get(category, category.title())}")
        for e in entries:
            d = e.to_dict()
            hub = ""
            if e.hub is not None:
                updated = e.hub.last_modified.date().isoformat() if e.hub.last_modified else "-"
                hub = f"  {e.hub.downloads:,} downloads  {e.hub.likes:,} likes  updated {updated}"
            print(f"  {e.pick.repo}{hub}")
            print(f"      {e.pick.description}")
            memory = f" ({human_size(d['memory_bytes'])} in memory)" if d["memory_bytes"] and e.suggested else ""
            speed = f", {d['speed']}" if d.get("speed") else ""
            print(f"      {e.shown_variant.name}  {human_size(e.shown_variant.size_bytes)}  {e.label}{memory}{speed}")
    if listing.hub_error:
        print(f"\nSizes are from Hearth's list as of {listing.as_of}; the hub's details are missing. {listing.hub_error}")
    elif not listing.asked_hub:
        print(f"\nSizes are from Hearth's list as of {listing.as_of}.")
    first = next((e for e in listing.entries if e.suggested), None)
    if first is not None:
        print(f"\nDownload one with `hearth pull REPO:VARIANT`, e.g. `hearth pull {first.pick.repo}:{first.suggested}`.")
    return 0

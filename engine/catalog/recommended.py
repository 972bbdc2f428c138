"""The models the Discover tab opens on: a short curated list, each labelled for this machine.

The list lives in ``recommended.json`` beside this module: repos, their variants' files and sizes,
and each model's shape, so that the advisor (:func:`engine.catalog.advisor.advise`, the same fit plan
the variants view and ``hearth fit`` use) labels every entry with no network at all. When the hub
answers, each entry takes the hub's exact file sizes and its downloads, likes and last update; when it
does not, the list stands on the repo data alone and says why in one sentence. Python API::

    picks = load_picks()
    listing = recommend(picks, detect_hardware(), hub=HubClient())   # hub=None: offline only
    [(e.pick.repo, e.suggested, e.label) for e in listing.entries]
"""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.catalog.advisor import Advice, Fit, FitEstimate, advise
from engine.catalog.shape import ModelShape
from engine.catalog.variants import RemoteFile, Variant
from engine.errors import HearthError, HubAccessDenied, HubRateLimited, HubUnavailable

if TYPE_CHECKING:
    from engine.catalog.hub import HubClient, RepoListing
    from engine.fit.speed import MachineSpeed
    from engine.hardware import HardwareInfo

log = logging.getLogger(__name__)

PICKS_FILE = Path(__file__).with_name("recommended.json")
CATEGORIES = ("chat", "coding", "reasoning", "vision", "embedding")
_HUB_WORKERS = 8
# Errors that say the hub as a whole is out of reach (or refuses us): the other repos are not asked.
_HUB_DOWN = (HubUnavailable, HubRateLimited)


@dataclass(frozen=True, slots=True)
class Pick:
    """One curated model: its repo, what it is for, its shape and the variants offered."""

    repo: str
    name: str
    category: str
    description: str
    shape: ModelShape
    variants: tuple[Variant, ...]
    ollama: tuple[str, ...] = ()  # what Ollama's library calls the same model (``llama3.2``, ``llama3.2:3b``)


@dataclass(frozen=True, slots=True)
class PickList:
    """The curated list and the date its sizes were taken."""

    as_of: str
    picks: tuple[Pick, ...]
    categories: dict[str, str]


@dataclass(frozen=True, slots=True)
class HubDetails:
    """What the hub says of a repo right now."""

    downloads: int
    likes: int
    last_modified: datetime | None


@dataclass(frozen=True, slots=True)
class Recommendation:
    """One entry as shown: the pick, its variants' fit here, the variant to take, and the hub's details."""

    pick: Pick
    variants: tuple[Variant, ...]
    advice: Advice
    hub: HubDetails | None = None

    @property
    def suggested(self) -> str | None:
        """The variant the advisor recommends here (None when none fits)."""
        return self.advice.recommended

    @property
    def shown_variant(self) -> Variant:
        """The suggested variant, else the smallest (what a person would try first)."""
        name = self.advice.recommended
        chosen = next((v for v in self.variants if v.name == name), None)
        return chosen or min(self.variants, key=lambda v: v.size_bytes)

    @property
    def fit(self) -> Fit:
        est = self.advice.get(self.shown_variant.name)
        return est.fit if est else Fit.NONE

    @property
    def label(self) -> str:
        est = self.advice.get(self.shown_variant.name)
        return est.label if est else "will not fit"

    @property
    def slow(self) -> bool:
        """Whether what is shown would decode under the threshold here (then it is not recommended)."""
        est = self.advice.get(self.shown_variant.name)
        return est is not None and est.slow

    @property
    def usable(self) -> bool:
        """Whether the advisor suggests a variant here: it fits and is not slow."""
        return self.advice.recommended is not None

    def to_dict(self) -> dict[str, Any]:
        shown = self.shown_variant
        est = self.advice.get(shown.name)
        variants = []
        for v in self.variants:
            e = self.advice.get(v.name)
            variants.append(
                {
                    "name": v.name,
                    "quantization": v.name,
                    "file": v.primary.path,
                    "size_bytes": v.size_bytes,
                    "fit": e.fit.value if e else Fit.NONE.value,
                    "label": e.label if e else "will not fit",
                    "memory_bytes": _memory(e),
                    "recommended": v.name == self.advice.recommended,
                    "speed": e.speed_label if e else "",
                    "slow": e.slow if e else False,
                }
            )
        hub = self.hub
        return {
            "repo": self.pick.repo,
            "name": self.pick.name,
            "category": self.pick.category,
            "description": self.pick.description,
            "parameters": self.pick.shape.parameters,
            "experts": self.pick.shape.experts,  # a mixture of experts reads a few of them a token: faster than its size
            "suggested": self.advice.recommended,
            "variant": shown.name,
            "size_bytes": shown.size_bytes,
            "fit": self.fit.value,
            "label": self.label,
            "reason": self.advice.reason,
            "memory_bytes": _memory(est),
            "speed": est.speed_label if est else "",
            "speed_detail": est.speed.describe() if est and est.speed else "",
            "slow": self.slow,
            "context_length": self.advice.context_length,
            "live": hub is not None,
            "downloads": hub.downloads if hub else None,
            "likes": hub.likes if hub else None,
            "updated": hub.last_modified.isoformat() if hub and hub.last_modified else None,
            "variants": variants,
        }


@dataclass(frozen=True, slots=True)
class RecommendedList:
    """Every entry, in the curated order, with the sizes' date and why the hub's details are missing."""

    as_of: str
    entries: tuple[Recommendation, ...]
    categories: dict[str, str]
    hub_error: str | None = None
    asked_hub: bool = False

    @property
    def live(self) -> bool:
        return any(e.hub is not None for e in self.entries)

    def to_dict(self) -> dict[str, Any]:
        return {
            "as_of": self.as_of,
            "live": self.live,
            "asked_hub": self.asked_hub,
            "hub_error": self.hub_error,
            "categories": [{"id": c, "title": self.categories.get(c, c.title())} for c in CATEGORIES],
            "models": [e.to_dict() for e in self.entries],
        }


def _memory(est: FitEstimate | None) -> int | None:
    if est is None:
        return None
    return est.plan.memory.total if est.plan else est.memory.total


# -- the curated list --------------------------------------------------------------------------


def _pick(item: dict[str, Any]) -> Pick:
    s = item["shape"]
    shape = ModelShape(
        layers=int(s["layers"]),
        kv_heads=int(s["kv_heads"]),
        head_dim=int(s["head_dim"]),
        context_length=s.get("context_length"),
        parameters=item.get("parameters"),
        architecture=s.get("architecture"),
        source="Hearth's list of recommended models",
        embedding=s.get("embedding"),
        heads=s.get("heads"),
        vocab=s.get("vocab"),
        feed_forward=s.get("feed_forward"),
        experts=s.get("experts"),
        expert_feed_forward=s.get("expert_feed_forward"),
        experts_used=s.get("experts_used"),
    )
    variants = tuple(
        Variant(name=v["quantization"], format="gguf", files=(RemoteFile(v["file"], int(v["size_bytes"])),))
        for v in item["variants"]
    )
    if item["category"] not in CATEGORIES:
        raise ValueError(f"{item['repo']}: unknown category {item['category']!r}")
    return Pick(
        repo=item["repo"],
        name=item["name"],
        category=item["category"],
        description=item["description"],
        shape=shape,
        variants=variants,
        ollama=tuple(str(n) for n in item.get("ollama") or ()),
    )


def load_picks(path: Path | None = None) -> PickList:
    """The curated list in ``path`` (``recommended.json`` beside this module by default).

    Raises:
        ValueError: the file is not a list Hearth can read (a broken checkout or bundle).
    """
    data = json.loads((path or PICKS_FILE).read_text(encoding="utf-8"))
    try:
        picks = tuple(_pick(item) for item in data["models"])
        return PickList(as_of=str(data["as_of"]), picks=picks, categories=dict(data.get("categories") or {}))
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{path or PICKS_FILE} is not a list of recommended models ({exc!r})") from exc


# -- Ollama's library names ----------------------------------------------------------------------

# A tag's parts Ollama writes between a size and a quantization that name the same chat model.
_CHAT_TAG_WORDS = frozenset({"instruct", "it", "chat"})


def ollama_library_repo(name: str, picks: PickList | None = None) -> tuple[str, str | None] | None:
    """``(repo, variant)`` of the listed model that Ollama's library calls ``name``, as ``ollama pull`` takes it
    (``llama3.2``, ``qwen3:8b``, ``gemma3:4b-it-q8_0``, ``registry.ollama.ai/library/llama3.2:latest``): the variant
    is the tag's quantization (``q8_0`` is ``Q8_0``, ``fp16`` ``F16``), None where the tag names none. None where the
    list has no such model, or the tag names another kind of it (``llama3.2:3b-text``, a base model)."""
    import re

    spec = name.strip().lower()
    for prefix in ("registry.ollama.ai/", "library/"):
        spec = spec.removeprefix(prefix)
    base, _, tag = spec.partition(":")
    if not base or "/" in base or "/" in tag:
        return None
    parts = [] if tag in ("", "latest") else tag.split("-")
    quant = None
    if parts and re.fullmatch(r"i?q\d\w*|fp16|bf16|f16|f32", parts[-1]):
        word = parts.pop()
        quant = {"fp16": "F16", "f16": "F16", "bf16": "BF16", "f32": "F32"}.get(word, word.upper())
    size = parts.pop(0) if parts and re.fullmatch(r"\d+(\.\d+)?[bm]|e\d+b|v\d+(\.\d+)?", parts[0]) else None
    if not set(parts) <= _CHAT_TAG_WORDS:
        return None
    key = f"{base}:{size}" if size else base
    for pick in (picks or _picks()).picks:
        if key in pick.ollama:
            return pick.repo, quant
    return None


_cached_picks: PickList | None = None


def _picks() -> PickList:
    """The list beside this module, read once."""
    global _cached_picks
    if _cached_picks is None:
        _cached_picks = load_picks()
    return _cached_picks


# -- the hub's details -------------------------------------------------------------------------


def _live_variants(pick: Pick, listing: RepoListing) -> tuple[Variant, ...]:
    """The pick's variants with the hub's files and exact sizes where the repo still has them."""
    by_name = {v.name.upper(): v for v in listing.variants if v.format == "gguf"}
    return tuple(by_name.get(v.name.upper(), v) for v in pick.variants)


def _ask_hub(hub: HubClient, picks: tuple[Pick, ...]) -> tuple[dict[str, RepoListing], str | None]:
    """Each pick's listing, by repo, and the sentence saying why the hub could not be asked (or None)."""
    listings: dict[str, RepoListing] = {}
    down: list[HearthError] = []

    def one(pick: Pick) -> None:
        if down:
            return
        try:
            listings[pick.repo] = hub.repo(pick.repo)
        except _HUB_DOWN as exc:
            down.append(exc)
        except HubAccessDenied as exc:  # a token the hub refuses: every repo would say the same
            down.append(exc)
        except HearthError as exc:  # this one repo moved or vanished: the others still come
            log.info("no hub details for recommended model %s: %s", pick.repo, exc)

    with ThreadPoolExecutor(max_workers=_HUB_WORKERS, thread_name_prefix="recommended") as pool:
        list(pool.map(one, picks))
    return listings, (str(down[0]) if down else None)


def recommend(
    picks: PickList,
    hardware: HardwareInfo,
    *,
    hub: HubClient | None = None,
    context_length: int | None = None,
    gpu_offload_supported: bool | None = None,
    machine: MachineSpeed | None = None,
    min_speed: float | None = None,
) -> RecommendedList:
    """Label every pick for ``hardware`` with the advisor; with ``hub``, add what the hub says now.

    With ``machine`` (this machine's measured rates) each entry's variants are judged by speed too: the suggested
    variant is the best that fits and decodes at ``min_speed`` tokens per second or more, and within each category
    the entries with one come first (the others are shown after them as slow here).

    Args:
        picks: The curated list (:func:`load_picks`).
        hardware: The machine to plan for.
        hub: Asked for each repo's exact sizes, downloads, likes and date; None keeps to the list's data.
        context_length: Tokens of context to plan for (the backend's default when None).
        gpu_offload_supported: Whether llama.cpp can offload to the GPU (detected when None).
        machine: The measured rates of ``hardware`` (None: speed is left out).
        min_speed: Tokens per second under which a variant is slow here (None: the default, 10).
    """
    from engine.fit.speed import DEFAULT_MIN_TOKENS_PER_S

    listings: dict[str, RepoListing] = {}
    error = None
    if hub is not None:
        listings, error = _ask_hub(hub, picks.picks)
    entries = []
    for pick in picks.picks:
        listing = listings.get(pick.repo)
        variants = _live_variants(pick, listing) if listing is not None else pick.variants
        advice = advise(
            variants,
            pick.shape,
            hardware,
            context_length=context_length,
            gpu_offload_supported=gpu_offload_supported,
            machine=machine,
            min_speed=DEFAULT_MIN_TOKENS_PER_S if min_speed is None else min_speed,
        )
        details = HubDetails(listing.downloads, listing.likes, listing.last_modified) if listing is not None else None
        entries.append(Recommendation(pick=pick, variants=variants, advice=advice, hub=details))
    # within a category (the order is stable): what is usable here first, then what fits but is slow, then the rest
    entries.sort(key=lambda e: (CATEGORIES.index(e.pick.category), 0 if e.usable else 1 if e.slow else 2))
    return RecommendedList(
        as_of=picks.as_of, entries=tuple(entries), categories=picks.categories, hub_error=error, asked_hub=hub is not None
    )


__all__ = [
    "CATEGORIES",
    "PICKS_FILE",
    "HubDetails",
    "Pick",
    "PickList",
    "Recommendation",
    "RecommendedList",
    "load_picks",
    "ollama_library_repo",
    "recommend",
]

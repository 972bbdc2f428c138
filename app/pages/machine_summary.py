"""What this machine runs well, in one line, from the worker's labels of Hearth's recommended models.

The worker labels each recommended model's variants with the fit plan and the speed model for this machine
(``GET /api/hub/recommended``, what Discover shows); the largest dense model whose Q4 variant fits and is not
slow here is how big a model this machine runs well. A mixture of experts is left out: it decodes as fast as a
model a fraction of its size, so its size says nothing of the dense models one would pick by it.
"""

from __future__ import annotations

from app.net.catalog_types import RecommendedList, RecommendedModel

QUANT = "Q4"


def _billions(parameters: int) -> str:
    b = parameters / 1e9
    return f"{b:.0f}" if b >= 10 else f"{b:.1f}".removesuffix(".0")


def runs_well(listing: RecommendedList) -> tuple[RecommendedModel, str] | None:
    """The largest dense chat model whose Q4 variant fits here and decodes at a speed worth waiting for, with
    that variant's speed (``about 12 tok/s``, empty where the machine was not measured)."""
    best: tuple[RecommendedModel, str] | None = None
    for m in listing.models:
        if m.category == "embedding" or m.experts or not m.parameters:
            continue
        for v in m.variants:
            if v.quantization.upper().startswith(QUANT) and v.fit != "none" and not v.slow:
                if best is None or m.parameters > (best[0].parameters or 0):
                    best = (m, v.speed)
    return best


def machine_summary(listing: RecommendedList) -> str:
    """``This machine runs models up to about 8 B parameters well (Q4): Llama 3.1 8B, about 12 tok/s.``"""
    found = runs_well(listing)
    if found is None:
        return f"Even small models run slowly on this machine ({QUANT}); answers will take a while."
    model, speed = found
    example = f"{model.name}, {speed}" if speed else model.name
    return (
        f"This machine runs models up to about {_billions(model.parameters or 0)} B parameters well "
        f"({QUANT}): {example}."
    )


__all__ = ["machine_summary", "runs_well"]

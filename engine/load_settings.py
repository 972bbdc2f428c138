"""Load settings per model, remembered in the data folder and used by every load of that model.

A person sets them once (`hearth load MODEL --ctx 8192 --save`, ``PUT /api/models/NAME/settings``, the app's
model settings dialog); every later load takes them: `hearth load`, the app, and a load a request triggers
(just in time, through any dialect). They live in one JSON file, ``load-settings.json``, keyed by model name.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from engine.backends.options import LoadOptions
from engine.backends.speculative import SpeculativeOptions
from engine.errors import InvalidRequest
from engine.paths import private_file
from engine.validation import BATCH, CTX, GPU_LAYERS, PARALLEL, THREADS

log = logging.getLogger(__name__)

SETTINGS_FILE = "load-settings.json"
KV_TYPES = ("f16", "q8_0", "q4_0", "fp8")
CPU_MOE_ALL = -1  # every layer's experts on the CPU (llama.cpp's --cpu-moe)


@dataclass(frozen=True, slots=True)
class ModelLoadSettings:
    """How one model is loaded; None leaves a setting to Hearth (what fits this machine).

    Attributes:
        n_ctx: Context length of each request, in tokens.
        n_seq_max: Requests generated at once (slots).
        n_gpu_layers: Layers offloaded to the GPU.
        kv_type: KV cache type (``f16``, ``q8_0``, ``q4_0``; ``fp8`` on the paged engine).
        flash_attn: Flash attention (llama.cpp; a quantized KV cache needs it).
        n_threads: CPU threads.
        n_batch: Batch size: prompt tokens computed in one llama.cpp call (the paged engine: per step).
        rope_scale: YaRN RoPE scaling factor (context beyond the trained one), e.g. 4.0.
        rope_orig_ctx: The context the model was trained with, for YaRN (None: the file's).
        cpu_moe: MoE experts kept on the CPU: those of the first N layers, or :data:`CPU_MOE_ALL` for all.
        speculative: Speculative decoding for this model, as ``hearth serve --speculative`` takes it (``auto``,
            ``ngram``, ``draft:MODEL``, ``off``), over the server's own; a request's ``speculative: false`` still
            turns it off.
    """

    n_ctx: int | None = None
    n_seq_max: int | None = None
    n_gpu_layers: int | None = None
    kv_type: str | None = None
    flash_attn: bool | None = None
    n_threads: int | None = None
    n_batch: int | None = None
    rope_scale: float | None = None
    rope_orig_ctx: int | None = None
    cpu_moe: int | None = None
    speculative: str | None = None

    def validate(self) -> ModelLoadSettings:
        """This object, when every value is in range.

        Raises:
            InvalidRequest: a value out of range, naming the setting and what it may be.
        """
        for rule, name in ((CTX, "n_ctx"), (PARALLEL, "n_seq_max"), (GPU_LAYERS, "n_gpu_layers"), (THREADS, "n_threads"), (BATCH, "n_batch"),
                           (CTX, "rope_orig_ctx")):  # fmt: skip
            if getattr(self, name) is not None:
                rule.check(getattr(self, name), name=name)
        if self.cpu_moe is not None and (isinstance(self.cpu_moe, bool) or self.cpu_moe < CPU_MOE_ALL):
            raise InvalidRequest("'cpu_moe' must be a number of layers (0 or more) or -1 for every layer's experts.",
                                 param="cpu_moe")  # fmt: skip
        if self.kv_type is not None and self.kv_type not in KV_TYPES:
            raise InvalidRequest(f"'kv_type' must be one of {', '.join(KV_TYPES)}.", param="kv_type")
        if self.rope_scale is not None and not 1.0 <= float(self.rope_scale) <= 64.0:
            raise InvalidRequest("'rope_scale' (the YaRN factor) must be between 1 and 64.", param="rope_scale")
        if self.flash_attn is False and self.kv_type in ("q8_0", "q4_0"):
            raise InvalidRequest("A quantized KV cache needs flash attention; set 'flash_attn' on or use f16.", param="flash_attn")
        self.speculative_options()
        return self

    def speculative_options(self) -> SpeculativeOptions | None:
        """How this model drafts, read by the one parser of ``--speculative`` (None: the server's choice).

        Raises:
            InvalidRequest: not a mode Hearth has.
        """
        if self.speculative is None:
            return None
        text = self.speculative if isinstance(self.speculative, str) else repr(self.speculative)  # 3: refused as "3"
        return SpeculativeOptions.parse(text)

    @property
    def is_empty(self) -> bool:
        return all(getattr(self, f.name) is None for f in fields(self))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelLoadSettings:
        """Settings from JSON; unknown keys are refused, so a typo is not silently ignored.

        Raises:
            InvalidRequest: an unknown key, a value of the wrong type or out of range.
        """
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidRequest(f"Unknown load setting '{unknown[0]}'; the settings are {', '.join(sorted(known))}.")
        return cls(**data).validate()

    def overridden_by(self, other: ModelLoadSettings) -> ModelLoadSettings:
        """These settings with every value ``other`` sets (a load's own flags over the saved ones)."""
        return replace(self, **{k: v for k, v in other.to_dict().items() if v is not None})

    def apply(self, options: LoadOptions) -> LoadOptions:
        """``options`` with each setting given here put in its place."""
        top = {"n_ctx": self.n_ctx, "n_seq_max": self.n_seq_max, "n_gpu_layers": self.n_gpu_layers,
               "kv_type": self.kv_type, "n_threads": self.n_threads, "n_batch": self.n_batch}  # fmt: skip
        own = {"flash_attn": self.flash_attn, "rope_scale": self.rope_scale, "rope_orig_ctx": self.rope_orig_ctx,
               "cpu_moe": self.cpu_moe}  # fmt: skip
        llamacpp = replace(options.llamacpp, **{k: v for k, v in own.items() if v is not None})
        speculative = self.speculative_options() or options.speculative
        return replace(options, llamacpp=llamacpp, speculative=speculative, **{k: v for k, v in top.items() if v is not None})


class LoadSettingsStore:
    """Every model's saved load settings, in ``home/load-settings.json``. Thread-safe.

    Args:
        home: The worker's data folder.
    """

    def __init__(self, home: Path) -> None:
        self.path = home / SETTINGS_FILE
        self._lock = threading.Lock()

    def _read(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:  # a damaged file: the models load with Hearth's choices
            log.warning("cannot read %s (%s); models load with Hearth's own settings", self.path, exc)
            return {}
        return data if isinstance(data, dict) else {}

    def get(self, name: str) -> ModelLoadSettings:
        """``name``'s saved settings (empty when none are saved, or the saved ones no longer validate)."""
        with self._lock:
            saved = self._read().get(name)
        if not isinstance(saved, dict):
            return ModelLoadSettings()
        try:
            return ModelLoadSettings.from_dict(saved)
        except (InvalidRequest, TypeError) as exc:
            log.warning("the saved load settings of %s are not used: %s", name, exc)
            return ModelLoadSettings()

    def put(self, name: str, settings: ModelLoadSettings) -> ModelLoadSettings:
        """Save ``settings`` for ``name`` (empty settings forget them).

        Raises:
            InvalidRequest: a value out of range.
        """
        settings.validate()
        with self._lock:
            data = self._read()
            if settings.is_empty:
                data.pop(name, None)
            else:
                data[name] = {k: v for k, v in settings.to_dict().items() if v is not None}
            tmp = self.path.with_suffix(".tmp")
            private_file(tmp)
            tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
            os.replace(tmp, self.path)
        return settings


__all__ = ["ModelLoadSettings", "LoadSettingsStore", "CPU_MOE_ALL", "KV_TYPES"]

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
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from engine.backends.options import LoadOptions
from engine.backends.speculative import SpeculativeOptions
from engine.errors import InvalidRequest
from engine.paths import private_file
from engine.validation import BATCH, CTX, GPU_LAYERS, PARALLEL, ROPE_SCALE, THREADS, WholeNumber

log = logging.getLogger(__name__)

SETTINGS_FILE = "load-settings.json"
KV_TYPES = ("f16", "q8_0", "q4_0", "fp8")
CPU_MOE_ALL = -1  # every layer's experts on the CPU (llama.cpp's --cpu-moe)


def _setting(wire: str, doc: str, rule: WholeNumber | None = None) -> Any:
    """A load setting (None: Hearth chooses). ``wire``: its name in ``POST /api/models/load`` and, as
    ``--wire-name``, the CLI's flag; ``doc``: what that body's schema says of it; ``rule``: the range of a
    whole number, checked by :meth:`ModelLoadSettings.validate`."""
    return field(default=None, metadata={"wire": wire, "doc": doc, "rule": rule})


@dataclass(frozen=True, slots=True)
class ModelLoadSettings:
    """How one model is loaded; None leaves a setting to Hearth (what fits this machine).

    The one description of the load settings: the saved file holds these fields; the API's models are built
    from them (``LoadSettings`` and ``ModelSettingsBody`` by these names, ``ModelLoadBody`` by each field's wire
    name); the CLI's flags are ``--WIRE-NAME`` (engine.commands.load_flags); the backends get them through
    :meth:`apply`, the one place a :class:`LoadOptions` takes them. A new setting is a field here.

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

    n_ctx: int | None = _setting("ctx", "context length of each sequence", CTX)
    n_seq_max: int | None = _setting("parallel", "sequences generated at once", PARALLEL)
    n_gpu_layers: int | None = _setting("gpu_layers", "layers offloaded to the GPU", GPU_LAYERS)
    kv_type: str | None = _setting("kv_type", "KV cache type")
    flash_attn: bool | None = _setting("flash_attn", "flash attention (llama.cpp)")
    n_threads: int | None = _setting("threads", "CPU threads", THREADS)
    n_batch: int | None = _setting("batch", "prompt tokens computed in one call", BATCH)
    rope_scale: float | None = _setting("rope_scale", "YaRN RoPE scaling factor")
    rope_orig_ctx: int | None = _setting("rope_orig_ctx", "the trained context YaRN scales from", CTX)
    cpu_moe: int | None = _setting("cpu_moe", "MoE experts on the CPU: first N layers', -1 all")
    speculative: str | None = _setting("speculative", "speculative decoding: auto, ngram, draft:MODEL or off")

    def validate(self, *, wire: bool = False) -> ModelLoadSettings:
        """This object, when every value is in range.

        Args:
            wire: name the settings as ``POST /api/models/load`` and the CLI's flags do (``ctx``, not ``n_ctx``),
                in the sentences those use.

        Raises:
            InvalidRequest: a value out of range, naming the setting and what it may be.
        """
        for f in fields(self):
            rule, value = f.metadata.get("rule"), getattr(self, f.name)
            if rule is not None and value is not None:
                rule.check(value, name=f.metadata["wire"] if wire else f.name)
        if wire and self.rope_scale is not None:
            ROPE_SCALE.check(self.rope_scale)
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

    @classmethod
    def read(cls, source: object, *, wire: bool = False) -> ModelLoadSettings:
        """The settings ``source`` carries as attributes (a request body, the CLI's parsed flags), each by its
        field name or, with ``wire``, its wire name (``ctx``); one it lacks is None. Not validated."""
        return cls(**{f.name: getattr(source, f.metadata["wire"] if wire else f.name, None) for f in fields(cls)})

    def to_wire(self) -> dict[str, Any]:
        """The settings given, by their wire names (``POST /api/models/load``'s body)."""
        return {f.metadata["wire"]: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

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

"""The CLI's flags of the load settings: one per field of :class:`~engine.load_settings.ModelLoadSettings`,
``--WIRE-NAME`` (``n_ctx`` is ``--ctx``, read back as ``args.ctx``), in one table.

`hearth load` takes every one; `hearth serve` and `hearth daemon` the few a whole server takes, each with the
help that command gives it.
"""

from __future__ import annotations

import argparse
from dataclasses import fields
from typing import Any

from engine import validation as valid
from engine.load_settings import KV_TYPES, ModelLoadSettings

_WIRE = {f.name: f.metadata["wire"] for f in fields(ModelLoadSettings)}
_RULES = {f.name: f.metadata["rule"] for f in fields(ModelLoadSettings)}


def cpu_moe(text: str) -> int:
    """``--cpu-moe``: a number of layers, or ``all`` (-1)."""
    if text.strip().lower() == "all":
        return -1
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("give a number of layers or 'all'") from None
    if not 0 <= value <= 100_000:
        raise argparse.ArgumentTypeError("give a number of layers (0 or more) or 'all'")
    return value


# Each setting's flag: what argparse takes besides its name (a whole number's type is its range's, named as
# the flag), with the help `hearth load` gives. In the order `hearth load --help` lists them.
FLAGS: dict[str, dict[str, Any]] = {
    "n_ctx": {"help": "context length of each request, in tokens"},
    "n_seq_max": {"help": "requests generated at once (slots)"},
    "n_gpu_layers": {"help": "layers offloaded to the GPU (llama.cpp built with GPU support)"},
    "kv_type": {"choices": KV_TYPES, "help": "KV cache type"},
    "n_threads": {"help": "CPU threads"},
    "n_batch": {"help": "batch size: prompt tokens computed in one step"},
    "flash_attn": {"action": argparse.BooleanOptionalAction, "default": None, "help": "flash attention (llama.cpp)"},
    "rope_scale": {"type": valid.number(valid.ROPE_SCALE), "metavar": "F",
                   "help": "YaRN RoPE scaling factor, for a context past the trained one"},
    "rope_orig_ctx": {"metavar": "N", "help": "the trained context YaRN scales from (default: the file's)"},
    "cpu_moe": {"type": cpu_moe, "metavar": "N|all",
                "help": "keep MoE experts in CPU memory: those of the first N layers, or all"},
    "speculative": {"metavar": "MODE",
                    "help": "speculative decoding for this model: auto, ngram (prompt lookup), draft:MODEL (a "
                            "registered model of the same vocabulary) or off; over the server's"},
}  # fmt: skip


def flag(name: str) -> str:
    """The flag of the setting ``name`` (``n_ctx``: ``--ctx``)."""
    return "--" + _WIRE[name].replace("_", "-")


def add_flag(parser: argparse.ArgumentParser, name: str, **changes: Any) -> None:
    """Add the flag of the setting ``name`` to ``parser``; ``changes`` (another ``help``, a ``default``) over
    the table's."""
    kwargs = dict(FLAGS[name])
    if "type" not in kwargs and _RULES[name] is not None:
        kwargs["type"] = valid.whole(_RULES[name], _WIRE[name])
    parser.add_argument(flag(name), **{**kwargs, **changes})


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Add the flag of every setting, as `hearth load` takes them."""
    for name in FLAGS:
        add_flag(parser, name)


def given(args: argparse.Namespace) -> ModelLoadSettings:
    """The settings the flags of ``args`` give (those its command has not: None). Checked by the flags' types."""
    return ModelLoadSettings.read(args, wire=True)


def serve_args(args: argparse.Namespace, names: tuple[str, ...]) -> list[str]:
    """The flags and values of the settings ``names`` that ``args`` gives, as the command line takes them again."""
    out: list[str] = []
    for name in names:
        value = getattr(args, _WIRE[name])
        if value is not None:
            out += [flag(name), str(value)]
    return out


__all__ = ["FLAGS", "add_flag", "add_flags", "cpu_moe", "flag", "given", "serve_args"]

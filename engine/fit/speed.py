"""The speed model beside the memory model: how fast a load answers on this machine.

Decoding one token reads every weight it uses once (an MoE's shared weights and only its active experts), the
output head, and the KV cache of every token before it; on one stream that reading is the cost, so a token takes
the bytes on each device over the rate that device reads them at with the kernel of their type (CPU layers at the
CPU's rate, offloaded layers at the GPU's), plus a fixed cost per token and per layer (the graph, the threads'
barriers, Hearth's loop). Reading a prompt is compute: two operations per weight per token, at the rate the
kernel multiplies a block of rows, plus attention over the tokens before. Decoding N streams at once reads the
weights once per step and multiplies N rows: a step costs one token's reading plus N - 1 rows of compute and each
stream's own KV cache, so batching helps until the rows' compute is as large as the reading, and stops there.

The rates come from :class:`MachineSpeed`, measured here by :mod:`engine.fit.probe` (memory bandwidth, a matrix
product, and llama.cpp's own kernels per quantization type) or reported by the GPU's driver.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.fit.facts import ModelFacts
from engine.fit.memory import kv_bytes_per_token

if TYPE_CHECKING:
    from engine.fit.plan import LoadPlan

# A Hub variant's label names its main kernel: the K-quant mixes (_S, _M, _L, _XL) run on their base type's.
_MIX_SUFFIX = ("_XL", "_S", "_M", "_L")
# Bits per weight of each tensor type llama.cpp has (block bytes x 8 / block weights), to turn bytes into weights.
TYPE_BITS: dict[str, float] = {
    "F32": 32.0, "F16": 16.0, "BF16": 16.0, "Q8_0": 8.5, "Q6_K": 6.5625, "Q5_K": 5.5, "Q5_1": 6.0, "Q5_0": 5.5,
    "Q4_K": 4.5, "Q4_1": 5.0, "Q4_0": 4.5, "IQ4_NL": 4.5, "IQ4_XS": 4.25, "MXFP4": 4.25, "Q3_K": 3.4375,
    "IQ3_S": 3.4375, "IQ3_XXS": 3.0625, "Q2_K": 2.625, "IQ2_XXS": 2.0625, "IQ2_XS": 2.3125, "IQ2_S": 2.5,
    "IQ1_S": 1.5625, "IQ1_M": 1.75, "TQ1_0": 1.6875, "TQ2_0": 2.0625,
}  # fmt: skip
# Where a type was not measured: the measured one whose kernel is most alike.
_LIKE: dict[str, tuple[str, ...]] = {
    "BF16": ("F16",), "F32": ("F16",), "Q5_1": ("Q5_0", "Q4_1"), "Q5_0": ("Q5_K", "Q4_0"), "IQ4_XS": ("IQ4_NL", "Q4_K"),
    "MXFP4": ("IQ4_NL", "Q4_0"), "IQ3_S": ("Q3_K",), "IQ3_XXS": ("Q3_K",), "IQ2_XXS": ("Q2_K",), "IQ2_XS": ("Q2_K",),
    "IQ2_S": ("Q2_K",), "IQ1_S": ("Q2_K",), "IQ1_M": ("Q2_K",), "TQ1_0": ("Q2_K",), "TQ2_0": ("Q2_K",),
    "Q5_K": ("Q6_K", "Q4_K"), "Q3_K": ("Q2_K", "Q4_K"), "Q2_K": ("Q3_K", "Q4_K"),
}  # fmt: skip
SLOT_LEVELS = (1, 2, 4, 8, 16)
# Measured beside the tensor types: a decoded token reading its cache (bytes of 16-bit keys and values per second),
# and prompt rows attending to the tokens before them (operations per second).
KV_KERNEL = "KV"
# What Hearth's loop adds to each token besides llama.cpp's work (sampling, detokenizing, streaming it): measured as
# the worker's CPU time per token less llama.cpp's own on one thread (1.8 ms for the starter, 2.0 for a
# Qwen2.5-0.5B-shaped model with 152 K entries in its vocabulary).
LOOP_SECONDS = 0.0019
ATTENTION_KERNEL = "ATTENTION"
DEFAULT_MIN_TOKENS_PER_S = 10.0  # below this a model is "slow here" and the picker does not recommend it
# The tokens in the cache the picker judges decoding at: a chat's first exchanges (a full context is slower).
CHAT_DEPTH = 1024


def kernel_type(label: str) -> str:
    """The tensor type whose kernel runs most of a variant labelled ``label`` (``Q4_K_M`` -> ``Q4_K``)."""
    up = label.upper()
    if up in TYPE_BITS:
        return up
    for suffix in _MIX_SUFFIX:
        if up.endswith(suffix) and up[: -len(suffix)] in TYPE_BITS:
            return up[: -len(suffix)]
    if up.startswith(("IQ3", "Q3")):
        return "Q3_K"
    if up.startswith(("IQ2", "Q2")):
        return "Q2_K"
    bits = {"2BIT": "Q2_K", "3BIT": "Q3_K", "4BIT": "Q4_0", "5BIT": "Q5_0", "6BIT": "Q6_K", "8BIT": "Q8_0"}
    return bits.get(up, "F16")


@dataclass(frozen=True, slots=True)
class KernelSpeed:
    """How fast one tensor type's kernels run on a device.

    Attributes:
        type: The tensor type (``Q4_0``, ``Q4_K``, ``F16``...).
        decode_rate: Bytes of weights a single-row product reads per second (from memory, with its dequantizing).
        prompt_rate: Operations per second (2 per weight per row) over a block of prompt rows.
        expert_rate: Operations per second of an MoE's expert products over a block of rows (llama.cpp's
            ``MUL_MAT_ID``, which takes each expert's rows on its own and runs slower than a dense product of the
            same rows); 0 when not measured (then the dense ``prompt_rate``).
    """

    type: str
    decode_rate: float
    prompt_rate: float
    expert_rate: float = 0.0

    @property
    def experts_rate(self) -> float:
        """The rate an MoE's expert products run at over a block of rows: measured, else the dense product's."""
        return self.expert_rate if math.isfinite(self.expert_rate) and self.expert_rate > 0 else self.prompt_rate

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "decode_rate": self.decode_rate, "prompt_rate": self.prompt_rate,
                "expert_rate": self.expert_rate}  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> KernelSpeed:
        return cls(str(d["type"]), float(d["decode_rate"]), float(d["prompt_rate"]), float(d.get("expert_rate", 0.0)))


@dataclass(frozen=True, slots=True)
class DeviceSpeed:
    """One device's rates: the bandwidth it streams memory at, its matrix products, its kernels per type.

    Attributes:
        device: ``cpu``, ``gpu0``...
        name: In words (the CPU's model, the GPU's name).
        bandwidth: Bytes per second read from its memory (the KV cache is read at this rate).
        flops: Operations per second of a dense 32-bit (CPU) or 16-bit (GPU) matrix product: attention's rate.
        kernels: Measured rates per tensor type.
        basis: Where the bandwidth came from: ``measured``, ``reported by NVML``...
        token_overhead: Seconds each decoded token costs besides reading (the graph, sampling, Hearth's loop).
        layer_overhead: Seconds each layer adds to a token besides its weights (its small operations and barriers).
    """

    device: str
    name: str
    bandwidth: float
    flops: float
    kernels: tuple[KernelSpeed, ...] = ()
    basis: str = "measured"
    token_overhead: float = 0.0
    layer_overhead: float = 0.0

    def kernel(self, type_name: str) -> KernelSpeed:
        """The rates of ``type_name``'s kernels: measured, else a like type's, else streaming at the bandwidth."""
        by_type = {k.type: k for k in self.kernels}
        t = type_name.upper()
        for name in (t, *_LIKE.get(t, ())):
            if name in by_type:
                return by_type[name]
        return KernelSpeed(t, self.bandwidth, self.flops)

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "name": self.name,
            "bandwidth": self.bandwidth,
            "flops": self.flops,
            "kernels": [k.to_dict() for k in self.kernels],
            "basis": self.basis,
            "token_overhead": self.token_overhead,
            "layer_overhead": self.layer_overhead,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DeviceSpeed:
        return cls(
            device=str(d["device"]), name=str(d["name"]), bandwidth=float(d["bandwidth"]), flops=float(d["flops"]),
            kernels=tuple(KernelSpeed.from_dict(k) for k in d.get("kernels", ())), basis=str(d.get("basis", "measured")),
            token_overhead=float(d.get("token_overhead", 0.0)), layer_overhead=float(d.get("layer_overhead", 0.0)),
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class MachineSpeed:
    """The rates of this machine's devices, and which hardware they were measured on."""

    identity: str
    cpu: DeviceSpeed
    gpus: tuple[DeviceSpeed, ...] = ()
    measured_at: str = ""

    def device(self, name: str) -> DeviceSpeed:
        """The device called ``name`` (``cpu``, ``gpu0``); the CPU for a GPU not measured."""
        return next((g for g in self.gpus if g.device == name), self.cpu)

    def to_dict(self) -> dict[str, Any]:
        return {
            "identity": self.identity,
            "measured_at": self.measured_at,
            "cpu": self.cpu.to_dict(),
            "gpus": [g.to_dict() for g in self.gpus],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MachineSpeed:
        return cls(
            identity=str(d["identity"]),
            cpu=DeviceSpeed.from_dict(d["cpu"]),
            gpus=tuple(DeviceSpeed.from_dict(g) for g in d.get("gpus", ())),
            measured_at=str(d.get("measured_at", "")),
        )


@dataclass(frozen=True, slots=True)
class SpeedEstimate:
    """How fast a load answers here, with the figures behind it.

    Attributes:
        decode_tok_s: Tokens per second decoding one stream with ``depth`` tokens before it.
        prompt_tok_s: Prompt tokens read per second.
        bytes_per_token: Bytes one decoded token reads: weights (active experts only) and the KV cache at ``depth``.
        read_rate: The rate those bytes are read at (the devices' kernels, weighted by what each holds).
        basis: Where the rate came from (``measured``, ``reported by NVML``...).
        depth: Tokens in the KV cache while decoding.
        slots: Decode tokens per second of all streams together at 1, 2, 4, 8 and 16 streams.
        batch_limit: Streams past which batching adds less than a tenth (the products' compute is the cost).
    """

    decode_tok_s: float
    prompt_tok_s: float
    bytes_per_token: int
    read_rate: float
    basis: str
    depth: int
    slots: tuple[tuple[int, float], ...] = ()
    batch_limit: int = 1

    def aggregate(self, n: int) -> float | None:
        return dict(self.slots).get(n)

    def describe(self) -> str:
        """``about 38 tok/s (reads 0.10 GB a token at 4.1 GB/s measured)``."""
        return (
            f"about {_rate(self.decode_tok_s)} tok/s (reads {self.bytes_per_token / 1e9:.2f} GB a token at "
            f"{self.read_rate / 1e9:.1f} GB/s {self.basis})"
        )

    def describe_batching(self) -> str:
        """``reads prompts at about 900 tok/s; 16 streams together decode about 300 tok/s ...``."""
        n = SLOT_LEVELS[-1]
        together = self.aggregate(n) or self.decode_tok_s
        if self.batch_limit <= 1:
            stops = "batching does not help (a further stream costs as much as a step)"
        elif self.batch_limit <= n:
            stops = f"batching stops helping past about {self.batch_limit} streams"
        else:
            stops = f"batching keeps helping up to about {self.batch_limit} streams"
        return f"reads prompts at about {_rate(self.prompt_tok_s)} tok/s; {n} streams together decode about {_rate(together)} tok/s, and {stops}"

    def slow(self, threshold: float = DEFAULT_MIN_TOKENS_PER_S) -> bool:
        return self.decode_tok_s < threshold

    def label(self, threshold: float = DEFAULT_MIN_TOKENS_PER_S) -> str:
        """``about 38 tok/s``, or ``slow here: about 1 tok/s`` under ``threshold``."""
        text = f"about {_rate(self.decode_tok_s)} tok/s"
        return f"slow here: {text}" if self.slow(threshold) else text

    def to_dict(self) -> dict[str, Any]:
        return {
            "decode_tokens_per_s": self.decode_tok_s,
            "prompt_tokens_per_s": self.prompt_tok_s,
            "bytes_per_token": self.bytes_per_token,
            "read_rate": self.read_rate,
            "basis": self.basis,
            "depth": self.depth,
            "slots": [{"slots": n, "tokens_per_s": t} for n, t in self.slots],
            "batch_limit": self.batch_limit,
            "summary": self.describe(),
        }


def _rate(x: float) -> str:
    # one decimal under 10, so that a model just under the threshold never reads "about 10"
    if x >= 100:
        return f"{round(x, -1):,.0f}"
    return f"{x:.0f}" if x >= 10 else f"{x:.1f}"


# The types llama.cpp's quantizer gives a K-quant mix's tensors besides its base type (llama_tensor_get_type):
# (attention values, feed-forward down, attention output), each with the share of the layers that get it. Q4_K_M and
# Q5_K_M give half the layers' values and down projections (the first and last eighths, every third between) Q6_K.
_MIXES: dict[str, tuple[tuple[str, float], tuple[str, float], tuple[str, float]]] = {
    "Q4_K_M": (("Q6_K", 0.5), ("Q6_K", 0.5), ("Q4_K", 1.0)),
    "Q5_K_M": (("Q6_K", 0.5), ("Q6_K", 0.5), ("Q5_K", 1.0)),
    "Q3_K_M": (("Q5_K", 1.0), ("Q4_K", 1.0), ("Q4_K", 1.0)),
    "Q3_K_L": (("Q5_K", 1.0), ("Q5_K", 1.0), ("Q5_K", 1.0)),
}


def label_mix(label: str, facts: ModelFacts) -> dict[str, float]:
    """The share of a variant's layer bytes each tensor type holds, from its label and the model's shape: a K-quant
    mix (``Q4_K_M``) as llama.cpp's quantizer makes it, else its main type alone."""
    main = kernel_type(label)
    mix = _MIXES.get(label.upper())
    s = facts.shape
    if mix is None or not s.embedding:
        return {main: 1.0}
    embd, hd = facts.embedding, s.head_dim
    ff = (s.expert_feed_forward or facts.feed_forward) * (s.experts or 1)
    roles = {  # weights of each tensor in a layer
        "q": embd * facts.heads * hd, "k": embd * s.kv_heads * hd, "v": embd * s.kv_heads * hd,
        "o": facts.heads * hd * embd, "gate_up": 2 * embd * ff, "down": embd * ff,
    }  # fmt: skip
    bytes_of: dict[str, float] = {}

    def add(t: str, weights: float) -> None:
        bytes_of[t] = bytes_of.get(t, 0.0) + weights * TYPE_BITS.get(t, 16.0) / 8

    for role, (t, share) in zip(("v", "down", "o"), mix, strict=True):
        add(t, roles[role] * share)
        add(main, roles[role] * (1 - share))
    add(main, roles["q"] + roles["k"] + roles["gate_up"])
    total = sum(bytes_of.values())
    return {t: b / total for t, b in bytes_of.items() if b > 0}


def _type_shares(facts: ModelFacts, label: str | None) -> dict[str, float]:
    """The share of the layers' bytes each tensor type holds: the file's table, else the variant's mix by its label."""
    weights = {t: b for t, b in (facts.layer_types or facts.by_type) if t not in ("F32",)}
    total = sum(weights.values())
    if total > 0:
        return {t: b / total for t, b in weights.items()}
    return label_mix(label or "F16", facts)


def _head_bytes(facts: ModelFacts) -> int:
    # With the output head tied to the embeddings (no output.weight) the head reads the embeddings' matrix.
    return facts.output_bytes if facts.output_bytes * 2 >= facts.input_bytes else facts.input_bytes


def _active(facts: ModelFacts) -> tuple[int, ...]:
    """Bytes of each layer a decoded token reads: every weight but the experts it does not run."""
    layers = facts.layer_weights()
    return tuple(w - e + a for w, e, a in zip(layers, _all_experts(facts), _active_experts(facts), strict=True))


def _all_experts(facts: ModelFacts) -> tuple[int, ...]:
    n = len(facts.layer_weights())
    return (tuple(facts.expert_bytes) + (0,) * n)[:n]


def _active_experts(facts: ModelFacts) -> tuple[int, ...]:
    """Bytes of each layer's experts a token runs (``experts_used`` of them): 0 for a dense model."""
    experts = facts.shape.experts or 1
    used = min(experts, facts.shape.experts_used or experts)
    return tuple(e * used // experts for e in _all_experts(facts))


def _placement(plan: LoadPlan | None, layers: int) -> list[str]:
    """The device of each layer: llama.cpp offloads the last ``gpu_layers``; the GPUs take them in order."""
    if plan is None or plan.gpu_layers <= 0:
        return ["cpu"] * layers
    where = ["cpu"] * (layers - min(plan.gpu_layers, layers))
    for d in plan.devices:
        if d.device != "cpu":
            where += [d.device] * d.layers
    return (where + [where[-1] if where else "cpu"] * layers)[:layers]


def estimate_speed(
    facts: ModelFacts,
    machine: MachineSpeed,
    *,
    plan: LoadPlan | None = None,
    depth: int | None = None,
    label: str | None = None,
    kv_type: str | None = None,
) -> SpeedEstimate:
    """How fast ``facts`` loaded by ``plan`` (all on the CPU when None) answers on ``machine``.

    Args:
        depth: Tokens in the KV cache while decoding (None: the plan's whole context, the slowest a slot gets).
        label: The variant's quantization label, for a model whose tensor types are not known (a Hub variant).
        kv_type: The KV cache type (None: the plan's, else 16-bit).
    """
    n_layers = max(1, facts.layers)
    ctx = max(0, depth if depth is not None else (plan.n_ctx if plan is not None else 4096))
    kv = kv_type or (plan.kv_type if plan is not None else "f16")
    where = _placement(plan, n_layers)
    shares = _type_shares(facts, label)
    active = _active(facts)
    active_experts = _active_experts(facts)
    kv_layer = kv_bytes_per_token(facts, kv, layers=1) * ctx
    # Attending costs what every query head reads of the cache: with grouped-query attention the heads of a group
    # each go over their group's keys and values (measured: a Qwen2.5-0.5B shape, 14 heads on 2 KV heads, slowed
    # as 14 heads of its own cache would). Timed as 16-bit elements, whatever the cache's type.
    kv_layer_f16 = facts.heads * facts.shape.head_dim * 2 * 2 * ctx
    # scores and the weighted sum over the cache: 4 operations per head element per cached token
    attn_ops = 4 * facts.heads * facts.shape.head_dim

    weights_time = kv_time = row_time = attn_time = overhead = 0.0
    weights_read = 0.0
    for i in range(n_layers):
        dev = machine.device(where[i])
        overhead += dev.layer_overhead
        for t, share in shares.items():
            k = dev.kernel(t)
            weights_time += active[i] * share / k.decode_rate
            weights_read += active[i] * share
            # a prompt row multiplies each weight it uses once (an MoE's row, its own experts'): 2 operations a
            # weight, the experts' at the rate of llama.cpp's expert products (each expert's rows on their own)
            dense = active[i] - active_experts[i]
            per_weight = 2 * share * 8 / TYPE_BITS.get(t, 16.0)
            row_time += per_weight * (dense / k.prompt_rate + active_experts[i] / k.experts_rate)
        kv_time += kv_layer_f16 / _rate_of(dev, KV_KERNEL, dev.bandwidth, decode=True)
        attn_time += attn_ops * ctx / _rate_of(dev, ATTENTION_KERNEL, dev.flops, decode=False)
    head_dev = machine.device(where[-1] if plan is not None and plan.gpu_layers >= n_layers else "cpu")
    # a K-quant mix's output head is Q6_K (llama.cpp's quantizer); else the file's type, or the main one
    head_type = facts.head_type or ("Q6_K" if (label or "").upper() in _MIXES else max(shares, key=lambda t: shares[t]))
    head_kernel = head_dev.kernel(head_type)
    head = _head_bytes(facts)
    weights_time += head / head_kernel.decode_rate
    weights_read += head
    row_time += 2 * head * 8 / TYPE_BITS.get(head_kernel.type, 16.0) / head_kernel.prompt_rate
    one = weights_time + kv_time + overhead + head_dev.token_overhead + LOOP_SECONDS
    # a prompt's rows attend to half its length on average; each further stream reads its own cache
    prompt_row = row_time + attn_time / 2
    # a further stream: its rows' products, reading (and attending over) its own cache, and its token in Hearth's loop
    extra = row_time + kv_time + LOOP_SECONDS
    # a step of N rows costs one token's reading and N - 1 rows' products (never more than N steps of one row)
    slots = tuple((n, n / min(n * one, one + (n - 1) * extra)) for n in SLOT_LEVELS)
    basis = machine.cpu.basis if all(w == "cpu" for w in where) else machine.device(where[-1]).basis
    read = weights_read + kv_layer * n_layers
    return SpeedEstimate(
        decode_tok_s=1 / one,
        prompt_tok_s=1 / max(1e-12, prompt_row),
        bytes_per_token=int(read),
        read_rate=read / max(1e-12, weights_time + kv_time),
        basis=basis,
        depth=ctx,
        slots=slots,
        batch_limit=_batch_limit(one, extra),
    )


def _rate_of(dev: DeviceSpeed, kind: str, fallback: float, *, decode: bool) -> float:
    k = next((k for k in dev.kernels if k.type == kind), None)
    rate = (k.decode_rate if decode else k.prompt_rate) if k is not None else fallback
    return rate if math.isfinite(rate) and rate > 0 else fallback


def _batch_limit(one: float, extra: float) -> int:
    """Streams past which batching adds less than a tenth: N streams decode N / (one + (N - 1) x extra) tokens a
    second, which reaches 90% of its ceiling (1 / extra) at N = 9 x (one - extra) / extra (1: a further row costs
    as much as a step, and batching does not help at all)."""
    return max(1, math.ceil(9 * (one - extra) / max(1e-12, extra)))


__all__ = [
    "KernelSpeed", "DeviceSpeed", "MachineSpeed", "SpeedEstimate", "estimate_speed", "kernel_type", "label_mix", "TYPE_BITS",
    "SLOT_LEVELS", "DEFAULT_MIN_TOKENS_PER_S", "CHAT_DEPTH", "KV_KERNEL", "ATTENTION_KERNEL",
]  # fmt: skip

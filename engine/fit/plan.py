"""Choosing how to load a model within a memory budget: context, slots, KV cache type, GPU layers.

:func:`plan_load` is the one decision both the loaders and the advisor use. For GGUF on llama.cpp:

1. Context: what was asked, else 4,096 tokens (or the model's own length when shorter).
2. KV cache type: what was asked, else 16-bit, falling back to 8-bit and then 4-bit when one slot
   of the context would not fit otherwise (where an 8-bit cache would keep every layer on the GPU
   the reason says so; it is not taken unasked).
3. GPU layers: every layer on the GPUs when one slot fits there, else as many as fit (each GPU
   counted on its own: its layers' weights and KV cache, its compute buffer and CUDA context).
4. Slots: what was asked, else as many as fit, up to 16; on the CPU the KV cache takes at most a
   third of usable RAM, with a partial offload four slots at most (each takes GPU layers).

Settings that were asked for and cannot fit give a plan with ``fits=False`` whose reason names
what would fit; the loaders refuse with it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from engine.fit.budget import RAM_LIVE_SHARE, DeviceBudget, MemoryBudget
from engine.fit.draft import draft_memory
from engine.fit.facts import ModelFacts
from engine.fit.memory import (
    CUDA_CONTEXT_BYTES,
    KV_TYPE_WORDS,
    LLAMACPP_KV_TYPES,
    PAGED_KV_TYPES,
    WORKER_RUNTIME_BYTES,
    ZERO,
    MemoryBreakdown,
    compute_buffer_bytes,
    kv_bytes_per_token,
    kv_cache_bytes,
    llamacpp_model_bytes,
    output_buffer_bytes,
)

DEFAULT_CTX = 4096
MAX_DEFAULT_SLOTS = 16
PARTIAL_OFFLOAD_SLOTS = 4
CPU_KV_SHARE = 1 / 3  # of usable RAM the KV cache may take when Hearth chooses the slots
# The llama.cpp loop's prompt block with layers on a GPU, and on the CPU (see `prefill_block`). With the slots, the
# first sizes the micro-batch the fit model counts for every llama.cpp load.
PREFILL_BLOCK = 64
PREFILL_BLOCK_CPU = 256
MIN_CTX = 256
# The paged engine (see engine/backends/paged/memory.py and config.py)
PAGED_BLOCK_TOKENS = 16
PAGED_MAX_SEQS = 32
#: The paged engine's step budget unless one is asked for: at least this many tokens, and room for a prefill chunk
#: as large as the decodes of every slot (paged_step_tokens).
PAGED_STEP_TOKENS = 2048
MLX_BATCH_TOKENS = 512  # rows mlx-lm computes a prompt in
PAGED_CPU_SHARE = 0.25
PAGED_CPU_CAP = 4 * 1024**3
PAGED_GPU_SHARE = 0.9
PAGED_QUANT_BYTES = {"int8": 1.0, "fp8": 1.0, "int4": 0.625}  # per weight, with the scales (int4: groups of 32)
TORCH_RUNTIME_BYTES = 350 * 1024**2  # torch's own libraries in the worker (measured on the CPU build)
MLX_RUNTIME_BYTES = 150 * 1024**2


def gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB"


@dataclass(frozen=True, slots=True)
class DevicePlan:
    """What one device holds under a plan, against what it may hold."""

    device: str
    name: str
    layers: int
    memory: MemoryBreakdown
    usable: int

    @property
    def fits(self) -> bool:
        return self.memory.total <= self.usable

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "name": self.name,
            "layers": self.layers,
            "usable_bytes": self.usable,
            "fits": self.fits,
            **self.memory.to_dict(),
        }


@dataclass(frozen=True, slots=True)
class LoadPlan:
    """How a model is (or would be) loaded, what it takes, and why."""

    backend: str
    n_ctx: int  # per slot
    n_seq: int  # slots (sequences decoded at once)
    kv_type: str
    flash_attn: bool
    gpu_layers: int
    total_layers: int
    memory: MemoryBreakdown
    devices: tuple[DevicePlan, ...]
    fits: bool
    reason: str
    cpu_moe: int = 0  # the first N layers' MoE experts held in RAM while their layers are on a GPU
    kv_blocks: int | None = None  # the paged engine's block pool
    projector_bytes: int = 0  # of the total: the multimodal projector's weights, encoder buffers and contexts
    draft_bytes: int = 0  # of the total: the draft model's weights, KV cache, buffers and bookkeeping

    @property
    def model_bytes(self) -> int:
        """What this load adds to a running worker: the total less the worker's own runtime, which is
        there with or without models (the model pool adds these up against its budget)."""
        return max(0, self.memory.total - WORKER_RUNTIME_BYTES)

    @property
    def where(self) -> str:
        if self.gpu_layers <= 0:
            return "CPU"
        gpus = [d for d in self.devices if d.device != "cpu" and d.layers]
        names = " + ".join(d.name for d in gpus) or "the GPU"
        if self.gpu_layers >= self.total_layers and self.cpu_moe:
            which = "every layer's" if self.cpu_moe >= self.total_layers else f"those of {self.cpu_moe}"
            return f"GPU ({names}): all {self.total_layers} layers, MoE experts ({which}) on the CPU"
        if self.gpu_layers >= self.total_layers:
            return f"GPU ({names}): all {self.total_layers} layers"
        return f"GPU ({names}): {self.gpu_layers} of {self.total_layers} layers, the rest on the CPU"

    @property
    def tensor_split(self) -> tuple[float, ...]:
        """Layers per GPU, for llama.cpp's tensor_split (empty with fewer than two GPUs used)."""
        gpus = [d for d in self.devices if d.device != "cpu"]
        return tuple(float(d.layers) for d in gpus) if len(gpus) > 1 else ()

    def describe(self) -> str:
        kv = KV_TYPE_WORDS.get(self.kv_type, self.kv_type)
        slots = "1 slot" if self.n_seq == 1 else f"{self.n_seq} slots"
        return f"{slots} of {self.n_ctx:,} tokens, {kv} KV cache, on {self.where}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "n_ctx": self.n_ctx,
            "parallel": self.n_seq,
            "kv_type": self.kv_type,
            "flash_attn": self.flash_attn,
            "gpu_layers": self.gpu_layers,
            "cpu_moe": self.cpu_moe,
            "total_layers": self.total_layers,
            "where": self.where,
            "summary": self.describe(),
            "fits": self.fits,
            "reason": self.reason,
            "kv_blocks": self.kv_blocks,
            "projector_bytes": self.projector_bytes,
            "draft_bytes": self.draft_bytes,
            "model_bytes": self.model_bytes,
            "memory": self.memory.to_dict(),
            "devices": [d.to_dict() for d in self.devices],
        }


# -- llama.cpp ------------------------------------------------------------------------------------


def prefill_block(gpu_layers: int) -> int:
    """Most prompt tokens the llama.cpp loop computes in one call, for a load with ``gpu_layers`` on a GPU.

    On the CPU 256: prompts compute 7-12% faster per token than in blocks of 64, and the larger compute
    buffer llama.cpp reserves for it is address space, not resident memory (see `_gguf_devices`). With
    layers on a GPU 64: there the whole buffer is allocated, and it takes the memory that decides which
    quantization fits (an 8B model's would grow by about 100 MB).
    """
    return PREFILL_BLOCK if gpu_layers > 0 else PREFILL_BLOCK_CPU


def _gguf_devices(
    facts: ModelFacts, budget: MemoryBudget, *, n_seq: int, n_ctx: int, kv_type: str, gpu_layers: int, flash_attn: bool,
    cpu_moe: int = 0,
) -> tuple[DevicePlan, ...]:
    layers = facts.layers
    # The micro-batch of a GPU load's loop. On the CPU the loop computes prompts in blocks of 256 and llama.cpp
    # reserves a compute buffer four times the size, but only the logits of the rows a call asks for are ever
    # written (one per prompt block): measured, the resident memory is that of a 64-token micro-batch.
    n_ub = max(PREFILL_BLOCK, n_seq)
    weights = facts.layer_weights()
    experts = facts.expert_bytes or (0,) * layers
    kept = min(cpu_moe, layers)  # the experts of layers [0, kept) stay in RAM wherever their layer goes
    kv_layer = kv_cache_bytes(facts, n_ctx=n_ctx, n_seq=n_seq, kv_type=kv_type, layers=1)
    compute = compute_buffer_bytes(facts, n_ubatch=n_ub, n_ctx=n_ctx, flash_attn=flash_attn)
    output = output_buffer_bytes(facts, n_outputs=n_seq)
    runtime = WORKER_RUNTIME_BYTES + llamacpp_model_bytes(facts)
    gpus = budget.usable_gpus
    g = max(0, min(gpu_layers, layers)) if gpus else 0
    full = g >= layers
    counts = _split_layers(g, gpus, weights, kv_layer, compute, facts.output_bytes if full else 0)
    devices = []
    start = layers - g
    for gpu, n in zip(gpus, counts, strict=True):
        if n == 0:
            continue
        w = sum(weights[start : start + n]) - sum(experts[start : max(start, min(start + n, kept))])
        start += n
        if full and start == layers:
            w += facts.output_bytes
        ctx = 0 if gpu.unified else CUDA_CONTEXT_BYTES
        devices.append(DevicePlan(gpu.device, gpu.name, n, MemoryBreakdown(w, kv_layer * n, compute, ctx), gpu.usable))
    cpu_layers = layers - g
    cpu_w = facts.input_bytes + sum(weights[:cpu_layers]) + (0 if full else facts.output_bytes) + sum(experts[cpu_layers:kept])
    host_compute = compute if cpu_layers else 4 * n_ub * facts.embedding * 2
    cpu = DevicePlan("cpu", "RAM", cpu_layers, MemoryBreakdown(cpu_w, kv_layer * cpu_layers, host_compute + output, runtime), budget.ram.usable)
    proj = facts.projector
    if proj is not None:  # libmtmd encodes on the first GPU when the model has layers there, else on the CPU
        extra = MemoryBreakdown(proj.weights_bytes, 0, proj.compute_bytes, 0)
        if devices and g > 0:
            devices[0] = replace(devices[0], memory=devices[0].memory + extra)
        else:
            cpu = replace(cpu, memory=cpu.memory + extra)
        cpu = replace(cpu, memory=cpu.memory + MemoryBreakdown(0, 0, 0, proj.context_bytes))
    if facts.draft is not None:  # its KV grows with the slots and context, so it is counted for each candidate
        draft = draft_memory(facts.draft, n_ctx=n_ctx, n_seq=n_seq, on_gpu=bool(devices and g > 0))
        if devices and g > 0:
            devices[0] = replace(devices[0], memory=devices[0].memory + draft.device)
        cpu = replace(cpu, memory=cpu.memory + draft.host + (ZERO if devices and g > 0 else draft.device))
    if budget.unified and devices:  # one pool: everything counts against the GPU's share of it
        pooled = devices[0].memory + cpu.memory
        return (DevicePlan(devices[0].device, devices[0].name, g, pooled, devices[0].usable),)
    return (cpu, *devices)


def _split_layers(
    g: int, gpus: tuple[DeviceBudget, ...], weights: tuple[int, ...], kv_layer: int, compute: int, head: int
) -> list[int]:
    """Layers per GPU for ``g`` offloaded layers: in proportion to what each GPU has room for."""
    if not gpus or g <= 0:
        return [0] * len(gpus)
    if len(gpus) == 1:
        return [g]
    per_layer = max(1, max(weights) + kv_layer)
    room = [max(0, (d.usable - compute - (0 if d.unified else CUDA_CONTEXT_BYTES)) // per_layer) for d in gpus]
    room[-1] = max(0, room[-1] - -(-head // per_layer))
    total_room = sum(room)
    if total_room <= 0:
        return [g] + [0] * (len(gpus) - 1)
    counts = [min(r, g * r // total_room) for r in room]
    i = 0
    while sum(counts) < g and i < 4 * len(gpus):
        j = i % len(gpus)
        if counts[j] < room[j] or all(c >= r for c, r in zip(counts, room, strict=True)):
            counts[j] += 1
        i += 1
    while sum(counts) < g:
        counts[-1] += 1
    return counts


def _total(devices: tuple[DevicePlan, ...]) -> MemoryBreakdown:
    out = MemoryBreakdown(0, 0, 0, 0)
    for d in devices:
        out = out + d.memory
    return out


def _fits(devices: tuple[DevicePlan, ...]) -> bool:
    return all(d.fits for d in devices)


def _largest(lo: int, hi: int, ok: Callable[[int], bool]) -> int | None:
    """The largest n in [lo, hi] with ok(n), for ok true up to some n and false after."""
    if hi < lo or not ok(lo):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _ctx_default(facts: ModelFacts) -> int:
    return min(DEFAULT_CTX, facts.shape.context_length or DEFAULT_CTX)


def _plan_gguf_type(
    facts: ModelFacts,
    budget: MemoryBudget,
    *,
    n_ctx: int,
    n_seq: int | None,
    kv_type: str,
    gpu_layers: int | None,
    flash_attn: bool,
    max_slots: int,
    cpu_moe: int | None = None,
) -> tuple[LoadPlan, bool]:
    """The plan for one KV type; the flag says whether it fits. ``cpu_moe``: the first N layers' experts in RAM
    (-1: every layer's; None: Hearth chooses, for an MoE model whose layers do not all fit on the GPUs)."""
    layers = facts.layers
    gpus = budget.usable_gpus
    moe = 0 if cpu_moe is None else (layers if cpu_moe < 0 else min(cpu_moe, layers))

    def devices(p: int, g: int, k: int | None = None) -> tuple[DevicePlan, ...]:
        return _gguf_devices(facts, budget, n_seq=p, n_ctx=n_ctx, kv_type=kv_type, gpu_layers=g, flash_attn=flash_attn,
                             cpu_moe=moe if k is None else k)  # fmt: skip

    def experts_needed(p: int) -> int | None:
        """The fewest layers whose experts must stay in RAM for every layer to go on the GPUs (None: none do)."""
        if cpu_moe is not None or not facts.expert_bytes:
            return None
        return next((k for k in range(1, layers + 1) if _fits(devices(p, layers, k))), None)

    def ok(p: int, g: int) -> bool:
        return _fits(devices(p, g))

    def max_layers(p: int) -> int:
        if not gpus:
            return 0
        best = _largest(0, layers, lambda g: all(d.fits for d in devices(p, g) if d.device != "cpu"))
        return best or 0

    why: list[str] = []
    if gpu_layers is not None:
        g = min(gpu_layers, layers) if gpus else 0
        why.append("GPU layers as asked")
    elif gpus and ok(n_seq or 1, layers):
        g = layers
    elif gpus and (k := experts_needed(n_seq or 1)) is not None:
        g, moe = layers, k
        which = "every layer's" if k >= layers else f"those of the first {k} of {layers} layers"
        why.append(f"fits with experts on the CPU ({which}): all of it on the GPU would not fit")
    elif gpus:
        g = max_layers(min(n_seq or 1, PARTIAL_OFFLOAD_SLOTS))
    else:
        g = 0
    ram = budget.ram.usable
    if n_seq is not None:
        p = n_seq
        why.append("slots as asked")
    else:
        if g and g < layers:
            cap = PARTIAL_OFFLOAD_SLOTS
        else:
            cap = max_slots
        on_cpu = g < layers and not budget.unified

        def slots_ok(q: int) -> bool:
            if on_cpu and kv_cache_bytes(facts, n_ctx=n_ctx, n_seq=q, kv_type=kv_type, layers=layers - g) > CPU_KV_SHARE * ram and q > 1:
                return False
            return ok(q, g)

        p = _largest(1, cap, slots_ok) or 1
        if p == max_slots:
            why.append(f"{p} slots, the most Hearth opens by default")
        elif p == cap:
            why.append(f"{p} slots, the most with part of the model on the CPU")
        elif p == 1:
            why.append("one slot: a second would not fit")
        elif on_cpu and not kv_cache_bytes(facts, n_ctx=n_ctx, n_seq=p + 1, kv_type=kv_type, layers=layers - g) <= CPU_KV_SHARE * ram:
            why.append(f"{p} slots: more would give the KV cache over a third of the {gb(ram)} of usable RAM")
        else:
            why.append(f"{p} slots: more would not fit")
    if gpus and g and gpu_layers is None and g < layers:
        g = max_layers(p)
        why.append(f"{g} of {layers} layers fit on the GPU")
    devs = devices(p, g)
    fits = _fits(devs)
    plan = LoadPlan(
        backend="llamacpp",
        n_ctx=n_ctx,
        n_seq=p,
        kv_type=kv_type,
        flash_attn=flash_attn,
        gpu_layers=g,
        cpu_moe=moe if g else 0,
        total_layers=layers,
        memory=_total(devs),
        devices=devs,
        fits=fits,
        reason="; ".join(why),
        projector_bytes=facts.projector.total if facts.projector is not None else 0,
        draft_bytes=draft_memory(facts.draft, n_ctx=n_ctx, n_seq=p, on_gpu=bool(gpus and g)).total if facts.draft else 0,
    )
    return plan, fits


def _a(word: str) -> str:
    return "an" if word.startswith("8") else "a"


def _where_short(plan: LoadPlan) -> str:
    over = [d for d in plan.devices if not d.fits]
    if not over:
        return ""
    d = over[0]
    place = "usable RAM" if d.device == "cpu" else f"usable on the {d.name}"
    return f"more than the {gb(d.usable)} {place}"


def _need(plan: LoadPlan) -> str:
    m = plan.memory
    projector = f", the projector's {gb(plan.projector_bytes)} included" if plan.projector_bytes else ""
    draft = f", the draft model's {gb(plan.draft_bytes)} included" if plan.draft_bytes else ""
    return (
        f"about {gb(m.total)} ({gb(m.weights)} weights + {gb(m.kv_cache)} KV cache + "
        f"{gb(m.buffers)} compute buffers + {gb(m.runtime)} runtime{projector}{draft})"
    )


def plan_gguf(
    facts: ModelFacts,
    budget: MemoryBudget,
    *,
    n_ctx: int | None = None,
    n_seq: int | None = None,
    kv_type: str | None = None,
    gpu_layers: int | None = None,
    flash_attn: bool = True,
    max_slots: int = MAX_DEFAULT_SLOTS,
    cpu_moe: int | None = None,
) -> LoadPlan:
    """The llama.cpp plan for ``facts`` within ``budget`` (None: Hearth chooses). ``cpu_moe``: the first N layers'
    MoE experts kept in RAM (-1: all); when None and every layer does not fit on the GPUs, an MoE model keeps
    the fewest layers' experts in RAM that lets every layer go there ("fits with experts on the CPU")."""
    if kv_type is not None and kv_type not in LLAMACPP_KV_TYPES:
        raise ValueError(f"llama.cpp's KV cache can be {', '.join(LLAMACPP_KV_TYPES)}, not '{kv_type}'.")
    if kv_type in ("q8_0", "q4_0") and not flash_attn:
        raise ValueError("A quantized KV cache needs flash attention in llama.cpp; turn flash attention on or use f16.")
    ctx = n_ctx or _ctx_default(facts)
    types = (kv_type,) if kv_type else LLAMACPP_KV_TYPES
    kw: dict[str, Any] = dict(n_seq=n_seq, gpu_layers=gpu_layers, flash_attn=flash_attn, max_slots=max_slots, cpu_moe=cpu_moe)
    first = None
    for t in types:
        plan, fits = _plan_gguf_type(facts, budget, n_ctx=ctx, kv_type=t, **kw)
        first = first or plan
        hint = ""
        if fits and kv_type is None and t == "f16" and budget.usable_gpus and 0 < plan.gpu_layers < plan.total_layers:
            q8, q8_fits = _plan_gguf_type(facts, budget, n_ctx=ctx, kv_type="q8_0", **kw)
            if q8_fits and q8.gpu_layers >= q8.total_layers:
                hint = " With an 8-bit KV cache (--kv-type q8_0) every layer would fit on the GPU."
        if fits:
            if t != types[0]:
                was, now = KV_TYPE_WORDS[types[0]], KV_TYPE_WORDS[t]
                plan = _with_reason(plan, f"{_a(was)} {was} KV cache would not fit, {_a(now)} {now} one does; {plan.reason}")
            return _with_reason(plan, f"{plan.describe()}: {plan.reason}. It needs {_need(plan)}.{hint}")
    if n_ctx is None and n_seq is None:  # shorten the default context until one slot fits
        c = ctx // 2
        while c >= MIN_CTX * 2:
            for t in types:
                plan, fits = _plan_gguf_type(facts, budget, n_ctx=c, kv_type=t, **kw)
                if fits:
                    return _with_reason(
                        plan,
                        f"{plan.describe()}: {ctx:,} tokens of context would not fit; {plan.reason}. It needs {_need(plan)}.",
                    )
            c //= 2
    assert first is not None
    return _with_reason(first, _refusal(facts, budget, first, types, kw), fits=False)


def _refusal(facts: ModelFacts, budget: MemoryBudget, plan: LoadPlan, types: tuple[str, ...], kw: dict) -> str:
    """Why ``plan`` does not fit, and what would."""
    asked = f"{plan.n_seq} slots of {plan.n_ctx:,} tokens need" if plan.n_seq != 1 else f"One slot of {plan.n_ctx:,} tokens needs"
    head = f"{asked} {_need(plan)}, {_where_short(plan)}"
    t = types[-1]
    kw = {**kw, "n_seq": None}

    def fits_ctx(c: int, p: int) -> bool:
        return _plan_gguf_type(facts, budget, n_ctx=c, kv_type=t, **{**kw, "n_seq": p, "max_slots": p})[1]

    options = []
    slots = _largest(1, plan.n_seq - 1, lambda p: fits_ctx(plan.n_ctx, p)) if plan.n_seq > 1 else None
    if slots:
        options.append(f"{slots} slot{'s' if slots != 1 else ''} of {plan.n_ctx:,} tokens (--parallel {slots})")
    top = facts.shape.context_length or 131_072
    ctx = _largest(MIN_CTX // MIN_CTX, min(plan.n_ctx, top) // MIN_CTX, lambda k: fits_ctx(k * MIN_CTX, plan.n_seq))
    if ctx and ctx * MIN_CTX < plan.n_ctx:
        options.append(f"{plan.n_seq} slot{'s' if plan.n_seq != 1 else ''} of {ctx * MIN_CTX:,} tokens (--ctx {ctx * MIN_CTX})")
    kv = "" if t == "f16" else f" with {_a(KV_TYPE_WORDS[t])} {KV_TYPE_WORDS[t]} KV cache"
    if options:
        return f"{head}; {' or '.join(options)} would fit{kv}."
    return f"{head}; even one slot of {MIN_CTX} tokens does not fit, so pick a smaller quantization or model."


def _with_reason(plan: LoadPlan, reason: str, *, fits: bool | None = None) -> LoadPlan:
    from dataclasses import replace

    return replace(plan, reason=reason, fits=plan.fits if fits is None else fits)


# -- the paged engine and MLX -----------------------------------------------------------------------


def paged_dtype_bytes(budget: MemoryBudget, quantization: str | None = None) -> int:
    """Bytes per activation (and 16-bit-type KV) element the paged engine picks: bfloat16 on a GPU,
    float32 on the CPU, bfloat16 there too with int4 weights (see engine/backends/paged/startup.py)."""
    return 2 if budget.usable_gpus or quantization == "int4" else 4


def paged_weights_bytes(facts: ModelFacts, *, dtype_bytes: int, quantization: str | None = None) -> int:
    """The paged engine's weights in memory: every parameter in the engine's dtype (a GGUF file is
    dequantized), or in its weight-only quantization; the file's size where the count is unknown."""
    if not facts.parameters:
        return facts.weights_bytes
    per = PAGED_QUANT_BYTES.get(quantization, dtype_bytes) if quantization else dtype_bytes
    return int(facts.parameters * per)


def paged_step_tokens(n_seq: int | None) -> int:
    """The paged engine's token budget of a step with ``n_seq`` slots, unless a load asks for one (``n_batch``).

    A budget the decodes fill leaves a burst's prompts a few tokens a step: 512 with 256 slots decoding read 256
    prompt tokens a step, and a burst of 256 prompts of 100-1,024 tokens took ~560 steps to its last first token.
    """
    return max(PAGED_STEP_TOKENS, 2 * (n_seq or PAGED_MAX_SEQS))


def plan_paged(
    facts: ModelFacts,
    budget: MemoryBudget,
    *,
    n_ctx: int | None = None,
    n_seq: int | None = None,
    kv_type: str | None = None,
    block_tokens: int = PAGED_BLOCK_TOKENS,
    batch_tokens: int | None = None,
    kv_blocks: int | None = None,
    kv_share: float | None = None,
    dtype_bytes: int | None = None,
    quantization: str | None = None,
    ctx_asked: bool | None = None,
) -> LoadPlan:
    """The paged engine's plan: weights, its KV block pool, activations and torch's runtime.

    The loader (engine/backends/paged/startup.py) allocates the pool this plan sizes: ``kv_blocks``
    when asked, else on a GPU 90% (``kv_share``) of what is free after the weights, less the
    activations of a full step; on the CPU a quarter (``kv_share``) of available RAM up to 4 GiB;
    either way no more than the sequences could use (four times that on a GPU, for the prefix cache).
    When the pool holds less than the default context, the context is shortened to it; a context
    that was asked for and does not fit is refused, naming what would.

    Args:
        dtype_bytes: Bytes per element of the engine's dtype (None: as the engine picks, see
            :func:`paged_dtype_bytes`); a ``f16`` KV cache is held in it, ``fp8`` in one byte.
        quantization: The engine's weight-only quantization (``int8``, ``fp8``, ``int4``) or None.
        ctx_asked: Whether ``n_ctx`` was asked for (refused when it does not fit) or is the loader's
            default, within the model's limits (shortened to the pool); None: whether it was given.
    """
    kv = kv_type or "f16"
    if kv not in PAGED_KV_TYPES:
        raise ValueError(f"The paged engine's KV cache can be {', '.join(PAGED_KV_TYPES)}, not '{kv}'.")
    ctx = n_ctx or _ctx_default(facts)
    if facts.shape.context_length:  # the engine never goes past the model's positions
        ctx = min(ctx, int(facts.shape.context_length))
    seqs = n_seq or PAGED_MAX_SEQS
    elem = dtype_bytes or paged_dtype_bytes(budget, quantization)
    per_block = kv_bytes_per_token(facts, "fp8") * (1 if kv == "fp8" else elem) * block_tokens
    cap = seqs * -(-ctx // block_tokens)
    weights = paged_weights_bytes(facts, dtype_bytes=elem, quantization=quantization)
    compute = compute_buffer_bytes(facts, n_ubatch=batch_tokens or paged_step_tokens(n_seq), n_ctx=ctx)
    gpus = budget.usable_gpus
    runtime = WORKER_RUNTIME_BYTES + TORCH_RUNTIME_BYTES
    gpu = max(gpus, key=lambda d: d.usable) if gpus else None
    if gpu is not None:
        share = kv_share or PAGED_GPU_SHARE
        free = gpu.usable - weights - CUDA_CONTEXT_BYTES
        sized = max(0, min(4 * cap, int((free * share - compute) // per_block)))
        why = f"{share:.0%} of the {gb(gpu.usable)} usable on the {gpu.name} after the weights and a step's activations"
        if sized == 4 * cap:
            why = f"four times what {seqs} sequences of {ctx:,} tokens use (the rest serves the prefix cache)"
    else:
        share = kv_share or PAGED_CPU_SHARE
        available = budget.ram.usable / RAM_LIVE_SHARE
        pool = min(available * share, PAGED_CPU_CAP)
        sized = max(0, min(cap, int(pool // per_block)))
        why = f"{share:.0%} of the {gb(available)} of available RAM"
        if pool == PAGED_CPU_CAP:
            why = f"{gb(PAGED_CPU_CAP)}, the most the paged engine takes of RAM unasked"
        if sized == cap:
            why = f"what {seqs} sequences of {ctx:,} tokens use"
    blocks = kv_blocks if kv_blocks is not None else sized
    if kv_blocks is not None:
        why = "the number of blocks asked for"
    if gpu is not None:
        mem = MemoryBreakdown(weights, blocks * per_block, compute, CUDA_CONTEXT_BYTES)
        devs = (DevicePlan("cpu", "RAM", 0, MemoryBreakdown(0, 0, 0, runtime), budget.ram.usable),
                DevicePlan(gpu.device, gpu.name, facts.layers, mem, gpu.usable))
    else:
        mem = MemoryBreakdown(weights, blocks * per_block, compute, runtime)
        devs = (DevicePlan("cpu", "RAM", facts.layers, mem, budget.ram.usable),)
    pool_tokens = blocks * block_tokens
    asked = n_ctx is not None if ctx_asked is None else ctx_asked
    shortened = not asked and 2 <= blocks and pool_tokens < ctx
    if shortened:
        ctx = pool_tokens
    fits = _fits(devs) and pool_tokens >= ctx
    plan = LoadPlan(
        backend="paged", n_ctx=ctx, n_seq=seqs, kv_type=kv, flash_attn=False, gpu_layers=facts.layers if gpus else 0,
        total_layers=facts.layers, memory=_total(devs), devices=devs, fits=fits, reason="", kv_blocks=blocks,
    )  # fmt: skip
    if fits:
        why = f"a pool of {blocks:,} KV blocks of {block_tokens} tokens ({pool_tokens:,} tokens) shared by up to {seqs} sequences: {why}"
        if shortened:
            why += f"; {n_ctx or _ctx_default(facts):,} tokens of context would not fit in it, so the context is {ctx:,}"
        return _with_reason(plan, f"{plan.describe()}: {why}. It needs {_need(plan)}.")
    if not _fits(devs):
        return _with_reason(plan, f"The weights and the KV cache need {_need(plan)}, {_where_short(plan)}.")
    return _with_reason(
        plan,
        f"A {ctx:,}-token sequence needs {-(-ctx // block_tokens):,} KV blocks, and a pool of {blocks:,} "
        f"({why}) holds {pool_tokens:,} tokens; --ctx {pool_tokens // MIN_CTX * MIN_CTX or pool_tokens} would fit.",
    )


def plan_mlx(facts: ModelFacts, budget: MemoryBudget, *, n_ctx: int | None = None, n_seq: int | None = None) -> LoadPlan:
    """MLX on Apple Silicon: everything in unified memory, one 16-bit KV cache per sequence."""
    ctx = n_ctx or _ctx_default(facts)
    seqs = n_seq or 1
    compute = compute_buffer_bytes(facts, n_ubatch=MLX_BATCH_TOKENS, n_ctx=ctx)
    mem = MemoryBreakdown(facts.weights_bytes, kv_cache_bytes(facts, n_ctx=ctx, n_seq=seqs), compute,
                          WORKER_RUNTIME_BYTES + MLX_RUNTIME_BYTES)  # fmt: skip
    pool = budget.gpus[0] if budget.unified else budget.ram
    devs = (DevicePlan(pool.device, pool.name, facts.layers, mem, pool.usable),)
    plan = LoadPlan(
        backend="mlx", n_ctx=ctx, n_seq=seqs, kv_type="f16", flash_attn=False, gpu_layers=facts.layers if budget.unified else 0,
        total_layers=facts.layers, memory=mem, devices=devs, fits=_fits(devs), reason="",
    )  # fmt: skip
    if plan.fits:
        return _with_reason(plan, f"{plan.describe()}. It needs {_need(plan)}.")
    return _with_reason(plan, f"It needs {_need(plan)}, {_where_short(plan)}.")


def plan_load(
    facts: ModelFacts,
    budget: MemoryBudget,
    *,
    backend: str | None = None,
    n_ctx: int | None = None,
    n_seq: int | None = None,
    kv_type: str | None = None,
    gpu_layers: int | None = None,
    flash_attn: bool = True,
    cpu_moe: int | None = None,
) -> LoadPlan:
    """The plan for ``facts`` on ``backend`` (by format when None) within ``budget``.

    Raises:
        ValueError: a KV cache type the backend does not have (the message says which it has).
    """
    backend = backend or {"gguf": "llamacpp", "mlx": "mlx"}.get(facts.format, "paged")
    if backend == "paged":
        return plan_paged(facts, budget, n_ctx=n_ctx, n_seq=n_seq, kv_type=kv_type)
    if backend == "mlx":
        return plan_mlx(facts, budget, n_ctx=n_ctx, n_seq=n_seq)
    return plan_gguf(facts, budget, n_ctx=n_ctx, n_seq=n_seq, kv_type=kv_type, gpu_layers=gpu_layers, flash_attn=flash_attn,
                     cpu_moe=cpu_moe)  # fmt: skip


__all__ = [
    "LoadPlan", "DevicePlan", "plan_load", "plan_gguf", "plan_paged", "paged_step_tokens", "plan_mlx", "paged_dtype_bytes",
    "paged_weights_bytes", "prefill_block", "DEFAULT_CTX", "MAX_DEFAULT_SLOTS",
]  # fmt: skip

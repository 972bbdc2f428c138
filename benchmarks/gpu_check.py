"""One GPU check for the paged engine: kernels on CUDA, then throughput against transformers.

Needs only torch, triton and transformers; downloads nothing (random weights) and fits in 8 minutes
on one GPU. Steps:
1. every Triton kernel against its torch reference on CUDA (bf16), and a tiny model through both;
2. a random-weight model shaped like Qwen3-0.6B serving 256 sequences, input and output lengths
   uniform in 100-1024, EOS ignored (nano-vllm's published benchmark): output tokens/s, and the decode
   step time at batch 1 and 256 (CUDA graphs);
3. transformers' generate on a slice of the same workload (left-padded batch), and the engine on the
   same slice: tokens/s and the ratios.

`--dry-run` runs the same code at tiny sizes on the CPU (kernels under TRITON_INTERPRET=1), as the
test suite does, so the script is known to work before a GPU is at hand.

    python benchmarks/gpu_check.py            # on a CUDA machine
    python benchmarks/gpu_check.py --dry-run  # anywhere
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

QWEN3_06B = dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                 intermediate_size=3072, vocab_size=151936, max_position_embeddings=40960, rms_norm_eps=1e-6,
                 rope_theta=1000000.0, tie_word_embeddings=True)  # fmt: skip
TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            intermediate_size=128, vocab_size=512, max_position_embeddings=512, rms_norm_eps=1e-6,
            rope_theta=10000.0, tie_word_embeddings=True)  # fmt: skip


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU")
    ap.add_argument("--seqs", type=int, default=None)
    ap.add_argument("--hf-seqs", type=int, default=None, help="requests in transformers' slice")
    ap.add_argument("--seed", type=int, default=0)
    return ap.parse_args()


def sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def build(shape: dict, device, dtype):
    import torch

    from engine.backends.paged.models.qwen3 import Model, ModelArgs

    args = ModelArgs.from_dict({"model_type": "qwen3", **shape})
    torch.manual_seed(0)
    with torch.device("meta"):
        model = Model(args)
    model = model.to_empty(device=device)
    from engine.backends.paged.rope import cos_sin_table

    model.register_buffer("cos_sin", cos_sin_table(args.rope, args.dim_head, args.max_position_embeddings).to(device),
                          persistent=False)  # fmt: skip
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.fill_(1.0) if "norm" in name or "layernorm" in name else p.normal_(0, 0.02)
    return model.to(dtype).eval()


def make_engine(model, device, *, max_seqs: int, max_len: int, budget: int):
    from engine.backends.paged.config import EngineConfig
    from engine.backends.paged.llm_engine import LLMEngine
    from engine.backends.paged.memory import num_kv_blocks
    from engine.backends.paged.model_runner import ModelRunner
    from engine.backends.paged.startup import pick_ops

    config = EngineConfig(max_num_seqs=max_seqs, max_model_len=max_len, max_num_batched_tokens=budget,
                          kv_cache_fraction=0.85 if device.type == "cuda" else 0.05)  # fmt: skip
    runner = ModelRunner(model, config, device, ops=pick_ops(config, device))
    blocks = num_kv_blocks(runner, config)
    runner.allocate_kv_cache(blocks)
    t0 = time.perf_counter()
    runner.capture_cuda_graphs()
    print(f"  KV cache: {blocks} blocks ({blocks * config.block_size} tokens), ops={runner.ops.name}, "
          f"CUDA graphs: {runner.graphs.sizes if runner.graphs else 'none'} ({time.perf_counter() - t0:.1f} s)")  # fmt: skip
    return LLMEngine(runner, config, blocks)


def new_seq(prompt, max_tokens: int, vocab: int, device):
    from engine.backends.paged.sampler import RequestSampler
    from engine.backends.paged.sequence import Sequence
    from engine.types import SamplingParams

    params = SamplingParams(temperature=0.6, max_tokens=max_tokens, ignore_eos=True, seed=len(prompt))
    sampler = RequestSampler(params, vocab_size=vocab, eos_ids=[], device=device)
    return Sequence(prompt, params, block_size=16, owner=SimpleNamespace(sampler=sampler))


def serve(engine, jobs, vocab: int, device) -> tuple[float, int]:
    """Run every (prompt, max_tokens) job to completion: (seconds, output tokens)."""
    seqs = [new_seq(p, m, vocab, device) for p, m in jobs]
    for s in seqs:
        engine.add(s)
    sync(device)
    t0 = time.perf_counter()
    while engine.has_work:
        for out in engine.step():
            if out.seq.num_completion_tokens >= out.seq.params.max_tokens:
                engine.finish(out.seq)
    sync(device)
    return time.perf_counter() - t0, sum(s.num_completion_tokens for s in seqs)


def decode_step_ms(engine, batch: int, vocab: int, device, steps: int = 10) -> float:
    seqs = [new_seq([random.randrange(vocab) for _ in range(64)], 10**6, vocab, device) for _ in range(batch)]
    for s in seqs:
        engine.add(s)
    while any(s.num_completion_tokens == 0 for s in seqs):
        engine.step()
    sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        engine.step()
    sync(device)
    for s in seqs:
        engine.finish(s)
    return (time.perf_counter() - t0) / steps * 1000


def hf_slice(shape: dict, jobs, device, dtype) -> float:
    import torch
    import transformers

    cfg = transformers.Qwen3Config(**shape)
    torch.manual_seed(0)
    model = transformers.Qwen3ForCausalLM(cfg).to(device=device, dtype=dtype).eval()
    width = max(len(p) for p, _ in jobs)
    ids = torch.tensor([[0] * (width - len(p)) + p for p, _ in jobs], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p, _ in jobs], device=device)
    new = max(m for _, m in jobs)
    sync(device)
    t0 = time.perf_counter()
    with torch.no_grad():
        model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new, do_sample=True,
                       temperature=0.6, top_k=0, pad_token_id=0)  # fmt: skip
    sync(device)
    return time.perf_counter() - t0


def main() -> None:
    args = parse()
    import torch

    cuda = torch.cuda.is_available() and not args.dry_run
    if not cuda and not args.dry_run:
        sys.exit("gpu_check needs a CUDA GPU; use --dry-run to try it on the CPU.")
    if not cuda:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is first imported
    device = torch.device("cuda" if cuda else "cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    shape = QWEN3_06B if cuda else TINY
    n_seqs = args.seqs or (256 if cuda else 8)
    n_hf = args.hf_seqs or (16 if cuda else 4)
    lo, hi = (100, 1024) if cuda else (10, 40)
    summary: dict = {"device": torch.cuda.get_device_name(device) if cuda else "cpu (dry run)"}
    print(f"device: {summary['device']}, dtype {dtype}")

    from engine.backends.paged.kernels.checks import run_all

    print("1. kernels against the torch reference")
    t0 = time.perf_counter()
    results = run_all(str(device), dtype)
    bad = [r for r in results if not r[1] <= r[2]]
    for name, err, tol in results:
        print(f"  {'ok ' if err <= tol else 'BAD'} {name}: max error {err:.2e} (tolerance {tol:.0e})")
    summary["kernel_checks"] = {"total": len(results), "failed": [r[0] for r in bad]}
    print(f"  {len(results) - len(bad)}/{len(results)} passed in {time.perf_counter() - t0:.1f} s")

    print(f"2. throughput: {n_seqs} sequences, lengths uniform in {lo}-{hi}, model {shape['num_hidden_layers']} layers")
    rng = random.Random(args.seed)
    vocab = shape["vocab_size"]
    jobs = [([rng.randrange(vocab) for _ in range(rng.randint(lo, hi))], rng.randint(lo, hi)) for _ in range(n_seqs)]
    model = build(shape, device, dtype)
    engine = make_engine(model, device, max_seqs=n_seqs, max_len=2 * hi + 16, budget=16384 if cuda else 256)
    serve(engine, jobs[:2], vocab, device)  # warm-up
    seconds, tokens = serve(engine, jobs, vocab, device)
    summary["engine_tokens_per_s"] = tokens / seconds
    print(f"  engine: {tokens} output tokens in {seconds:.1f} s = {tokens / seconds:.0f} tokens/s")
    for batch in (1, n_seqs):
        ms = decode_step_ms(engine, batch, vocab, device)
        summary[f"decode_step_ms_batch_{batch}"] = ms
        print(f"  decode step at batch {batch}: {ms:.2f} ms")

    print(f"3. transformers generate on a slice of {n_hf} requests (one left-padded batch)")
    part = jobs[:n_hf]
    useful = sum(m for _, m in part)
    s_ours, _ = serve(engine, part, vocab, device)
    del engine, model
    if cuda:
        torch.cuda.empty_cache()
    s_hf = hf_slice(shape, part, device, dtype)
    summary.update(hf_tokens_per_s=useful / s_hf, engine_slice_tokens_per_s=useful / s_ours)
    summary["ratio_slice"] = s_hf / s_ours
    summary["ratio_full_vs_hf"] = summary["engine_tokens_per_s"] / summary["hf_tokens_per_s"]
    print(f"  transformers: {useful / s_hf:.0f} useful tokens/s; engine on the same slice: {useful / s_ours:.0f}")
    print(f"  ratio engine / transformers on the slice: {summary['ratio_slice']:.2f}x")
    print(f"  ratio engine (full workload) / transformers (slice): {summary['ratio_full_vs_hf']:.2f}x")
    print("summary " + json.dumps(summary))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

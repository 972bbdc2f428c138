"""Each Triton kernel against its plain-torch reference on random inputs of several shapes.

Run on CUDA by ``benchmarks/gpu_check.py``, and on the CPU by the tests, under
``TRITON_INTERPRET=1`` (``python -m engine.backends.paged.kernels.checks`` prints JSON).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

import torch

from engine.backends.paged import attention as ref
from engine.backends.paged.attention import AttentionMetadata
from engine.backends.paged.ops import TorchOps

Check = tuple[str, float, float]  # (name, max abs error, tolerance)

# Tolerances are counted in steps of the dtype's rounding (the spacing of its numbers in [1, 2)) at the
# scale of the reference's output: a kernel that differs from its twin by one bf16 rounding passes.
STEP = {torch.bfloat16: 2.0**-7, torch.float16: 2.0**-10, torch.float32: 2.0**-23}
STEPS = {torch.bfloat16: 4, torch.float16: 4, torch.float32: 64}


def _cache(blocks: int, bs: int, n_kv: int, dim: int, dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.randn(blocks, bs, n_kv, dim, device=device).to(dtype),
            torch.randn(blocks, bs, n_kv, dim, device=device).to(dtype))  # fmt: skip


def _tables(lens: list[int], bs: int, blocks: int, device) -> torch.Tensor:
    perm = torch.randperm(blocks).tolist()
    width = max(-(-n // bs) for n in lens)
    rows, used = [], 0
    for n in lens:
        k = -(-n // bs)
        rows.append(perm[used : used + k] + [0] * (width - k))
        used += k
    return torch.tensor(rows, dtype=torch.int32, device=device)


def check_store(device, dtype) -> list[Check]:
    from engine.backends.paged.kernels import store_kv

    out = []
    for tokens, n_kv, dim, bs in [(7, 2, 64, 16), (33, 3, 80, 8)]:
        k, v = torch.randn(2, tokens, n_kv, dim, device=device).to(dtype)
        slots = torch.randperm(64 * bs, device=device)[:tokens]
        slots[1] = -1
        kc, vc = _cache(64, bs, n_kv, dim, dtype, device)
        kr, vr = kc.clone(), vc.clone()
        store_kv(k, v, kc, vc, slots)
        ref.store_kv(k, v, kr, vr, slots, has_padding=True)
        err = float((kc.float() - kr.float()).abs().max() + (vc.float() - vr.float()).abs().max())
        out.append((f"store_kv t{tokens} kv{n_kv} d{dim} bs{bs}", err, 0.0))
    return out


def check_decode(device, dtype, kv_dtype=None, *, quick: bool = False) -> list[Check]:
    from engine.backends.paged.kernels import paged_decode_attention

    out = []
    cases = [  # batch, heads, kv_heads, head_dim, block_size, context slices (None: the engine's choice)
        (3, 4, 4, 64, 16, None), (5, 9, 3, 64, 16, 3), (2, 8, 2, 128, 32, 16), (4, 6, 2, 80, 8, 1),
        (2, 32, 1, 32, 16, 4),  # a group of 32 query heads: two programs per KV head
    ]  # fmt: skip
    for batch, heads, n_kv, dim, bs, splits in cases[1:3] if quick else cases:
        lens = torch.randint(1, 12 * bs, (batch,)).tolist()
        lens[0] = 1  # a one-token context: most slices are empty
        kc, vc = _cache(160, bs, n_kv, dim, kv_dtype or dtype, device)
        tables = _tables(lens, bs, 160, device)
        q = torch.randn(batch, heads, dim, device=device).to(dtype)
        cl = torch.tensor(lens, dtype=torch.int32, device=device)
        got = paged_decode_attention(q, kc, vc, tables, cl, dim**-0.5, num_splits=splits)
        want = ref.decode_attention(q, kc, vc, tables, cl, dim**-0.5, max(lens))
        tag = f" kv={kv_dtype}" if kv_dtype else ""
        out.append((f"decode b{batch} h{heads}/{n_kv} d{dim} bs{bs} splits={splits}{tag}", _err(got, want),
                     _tol(dtype, want)))  # fmt: skip
    return out


def check_prefill(device, dtype, kv_dtype=None, *, quick: bool = False) -> list[Check]:
    from engine.backends.paged.kernels import paged_prefill_attention

    out = []
    cases = [
        (4, 2, 64, 16, [(5, 5), (20, 37), (1, 17)]), (6, 6, 32, 8, [(40, 40), (9, 70)]),  # blocks of 8: K tiles of 32
        (4, 1, 64, 32, [(70, 70), (17, 100)]),  # chunks over 16 rows: 64-row tiles
    ]  # fmt: skip
    for heads, n_kv, dim, bs, chunks in cases[:1] if quick else cases:
        q_lens, ctx = [c[0] for c in chunks], [c[1] for c in chunks]
        kc, vc = _cache(64, bs, n_kv, dim, kv_dtype or dtype, device)
        tables = _tables(ctx, bs, 64, device)
        q = torch.randn(sum(q_lens), heads, dim, device=device).to(dtype)
        starts = [sum(q_lens[:i]) for i in range(len(q_lens))]
        # the chunk's own keys, read back from the cache (the reference takes them fresh when ctx == q_len)
        fresh_k = torch.cat([ref.gather_kv(kc, tables[i], c)[c - n :] for i, (n, c) in enumerate(chunks)]).to(dtype)
        fresh_v = torch.cat([ref.gather_kv(vc, tables[i], c)[c - n :] for i, (n, c) in enumerate(chunks)]).to(dtype)
        meta = AttentionMetadata(
            slot_mapping=torch.zeros(0, dtype=torch.int64, device=device), prefill_query_starts=tuple(starts),
            prefill_query_lens=tuple(q_lens), prefill_context_lens=tuple(ctx), prefill_block_tables=tables,
        )  # fmt: skip
        want = ref.prefill_attention(q, fresh_k, fresh_v, kc, vc, meta, dim**-0.5)
        cu = torch.tensor([*starts, sum(q_lens)], dtype=torch.int32, device=device)
        got = paged_prefill_attention(q, kc, vc, tables, cu, torch.tensor(ctx, dtype=torch.int32, device=device),
                                      max(q_lens), dim**-0.5)  # fmt: skip
        tag = f" kv={kv_dtype}" if kv_dtype else ""
        out.append((f"prefill h{heads}/{n_kv} d{dim} bs{bs} chunks{chunks}{tag}", _err(got, want), _tol(dtype, want)))
    return out


def check_fused(device, dtype) -> list[Check]:
    from engine.backends.paged.kernels import rms_norm, rotary, silu_and_mul
    from engine.backends.paged.rope import cos_sin_table

    out = []
    for rows, n in [(3, 576), (17, 1000), (2, 2500)]:  # 2500: a row in three tiles
        x, r = torch.randn(2, rows, n, device=device).to(dtype)
        w = torch.randn(n, device=device).to(dtype)
        for residual in (None, r):
            got, got_r = rms_norm(x, w, 1e-5, residual)
            want, want_r = TorchOps.rms_norm(x, w, 1e-5, residual)
            err = max(_err(got, want), _err(got_r, want_r))
            out.append((f"rms_norm {rows}x{n} residual={residual is not None}", err, _tol(dtype, want, want_r)))
    for rows, n in [(4, 1536), (9, 100)]:
        x = torch.randn(rows, 2 * n, device=device).to(dtype)
        want = TorchOps.silu_and_mul(x)
        out.append((f"silu_and_mul {rows}x{n}", _err(silu_and_mul(x), want), _tol(dtype, want)))
    for heads, n_kv, dim in [(9, 3, 64), (4, 4, 128)]:
        tokens = 11
        qkv = torch.randn(tokens, (heads + 2 * n_kv) * dim, device=device).to(dtype)
        table = cos_sin_table({"rope_theta": 10000.0, "rope_type": "default"}, dim, 64).to(device)
        pos = torch.randint(0, 64, (tokens,), device=device)
        q = qkv[:, : heads * dim].view(tokens, heads, dim)  # strided views, as the models pass them
        k = qkv[:, heads * dim : (heads + n_kv) * dim].view(tokens, n_kv, dim)
        want_q, want_k = TorchOps.rotary(pos, q.clone(), k.clone(), table)
        got_q, got_k = rotary(pos, q, k, table)
        err = max(_err(got_q, want_q), _err(got_k, want_k))
        out.append((f"rotary h{heads}/{n_kv} d{dim}", err, _tol(dtype, want_q, want_k)))
        # Qwen3: each head's RMSNorm, then the rotation, in the same launch
        qw, kw = (torch.rand(dim, device=device).add(0.5).to(dtype) for _ in range(2))
        want_q, want_k = TorchOps.rotary(pos, q.clone(), k.clone(), table, qw, kw, 1e-6)
        got_q, got_k = rotary(pos, q, k, table, qw, kw, 1e-6)
        err = max(_err(got_q, want_q), _err(got_k, want_k))
        out.append((f"rotary with q/k norms h{heads}/{n_kv} d{dim}", err, _tol(dtype, want_q, want_k)))
    return out


def check_sampling(device, dtype) -> list[Check]:
    """The batch's draw in one launch against the same race in torch: the same token in every row."""
    from engine.backends.paged.kernels.sampling import race
    from engine.backends.paged.sampler import race_noise

    out = []
    for rows, vocab in [(5, 300), (3, 2500)]:
        probs = torch.randn(rows, vocab, device=device).mul(3).softmax(-1)
        keys = torch.randint(0, 2**32, (rows, 3), dtype=torch.int64, device=device)
        got = race(probs, keys)
        want = (probs / race_noise(keys, vocab)).argmax(-1)
        out.append((f"race {rows}x{vocab}", float((got != want).sum()), 0.0))
    # the top hash: key (0, 19575, 0) makes token 895's u round to 1 (noise -0.0 before the floor); in row 0 that
    # token has probability 0 and must not be drawn, in row 1 it has some and is (the least noise)
    probs = torch.zeros(2, 1000, device=device)
    probs[0, 3], probs[1, 3], probs[1, 895] = 1.0, 0.5, 0.5
    keys = torch.tensor([[0, 19575, 0]] * 2, dtype=torch.int64, device=device)
    want = torch.tensor([3, 895], device=device)
    got, ref = race(probs, keys), (probs / race_noise(keys, 1000)).argmax(-1)
    out.append(("race at the top hash", float((got != want).sum() + (ref != want).sum()), 0.0))
    return out


def check_model(device, dtype) -> list[Check]:
    """A tiny random Llama (and one with Qwen3's q/k norms) through TritonOps vs TorchOps: chunked prefill over a
    prefix, then decodes."""
    from engine.backends.paged.models.llama import Model, ModelArgs

    checks = []
    for qk_norm in (False, True):  # Llama, and Qwen3's norms of each head before the rotation
        args = ModelArgs(model_type="llama", hidden_size=64, num_hidden_layers=2, intermediate_size=128,
                         num_attention_heads=4, num_key_value_heads=2, vocab_size=128, max_position_embeddings=256,
                         rope={"rope_theta": 10000.0, "rope_type": "default"}, qk_norm=qk_norm)  # fmt: skip
        model = Model(args)
        for p in model.parameters():
            torch.nn.init.normal_(p, std=0.2)
        error, tol = _model_error(model.to(device=device, dtype=dtype).eval(), device, dtype)
        checks.append((f"model forward{' with q/k norms' if qk_norm else ''} (prefill chunks, prefix, decodes)", error, tol))
    return checks


def _model_error(model, device, dtype) -> tuple[float, float]:
    from engine.backends.paged.block_manager import BlockManager
    from engine.backends.paged.config import EngineConfig
    from engine.backends.paged.kernels import TritonOps
    from engine.backends.paged.model_runner import ModelRunner
    from engine.backends.paged.scheduler import Scheduler
    from engine.backends.paged.sequence import Sequence
    from engine.types import SamplingParams

    # a 36-token budget: step 0 prefills B (14, the shorter of the two arrivals) and a chunk of A (22); step 1
    # decodes B beside A's last 8 over its cached prefix (into its second block); then both decode. (Few tokens:
    # the tests run this under Triton's interpreter, whose time grows with the programs launched, one a token.)
    config = EngineConfig(block_size=16, max_model_len=256, max_num_batched_tokens=36)
    logits = {}
    for ops in (TorchOps, TritonOps):
        runner = ModelRunner(model, config, device, ops=ops)
        runner.allocate_kv_cache(32)
        sched = Scheduler(config, BlockManager(32, 16, enable_prefix_caching=False))
        seqs = [Sequence(list(range(a, a + n)), SamplingParams(temperature=0), block_size=16) for a, n in ((1, 30), (7, 14))]
        for seq in seqs:
            sched.add(seq)
        outs = []
        for step in range(3):
            out = sched.schedule()
            outs.append(runner.run(runner.prepare(out.scheduled)))
            sched.postprocess(out, {x.seq.seq_id: (step * 7 + seqs.index(x.seq)) % 128 for x in out.scheduled if x.samples})
        logits[ops.name] = torch.cat(outs)
    return _err(logits["triton"], logits["torch"]), 8 * _tol(dtype, logits["torch"])


def _err(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.float() - want.float()).abs().max())


def _tol(dtype, *refs: torch.Tensor) -> float:
    """STEPS rounding steps of ``dtype`` at the scale of the references (at least 1)."""
    scale = max([1.0, *(float(r.float().abs().max()) for r in refs)])
    return STEPS[dtype] * STEP[dtype] * scale


def run_all(
    device: str = "cpu", dtype: torch.dtype = torch.float32, *, fp8: bool = True, quick: bool = False
) -> list[Check]:
    """Every check (``quick``: a few of attention and the KV store, for a dry run under the interpreter)."""
    torch.manual_seed(0)
    dev = torch.device(device)
    suites: list[Callable[[], list[Check]]] = [
        lambda: check_store(dev, dtype), lambda: check_decode(dev, dtype, quick=quick),
        lambda: check_prefill(dev, dtype, quick=quick),
    ]  # fmt: skip
    if not quick:
        suites += [lambda: check_fused(dev, dtype), lambda: check_model(dev, dtype), lambda: check_sampling(dev, dtype)]
    if fp8 and hasattr(torch, "float8_e4m3fn") and not quick:
        suites.append(lambda: check_decode(dev, dtype, kv_dtype=torch.float8_e4m3fn))
        suites.append(lambda: check_prefill(dev, dtype, kv_dtype=torch.float8_e4m3fn))
    return [c for suite in suites for c in suite()]


if __name__ == "__main__":
    device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    results = run_all(device)
    print(json.dumps([{"name": n, "error": e, "tolerance": t} for n, e, t in results]))

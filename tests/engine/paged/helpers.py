"""Shared helpers for the paged-engine tests: tiny checkpoints and a direct model runner."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from engine.backends.paged.block_manager import BlockManager
from engine.backends.paged.config import EngineConfig
from engine.backends.paged.model_runner import ModelRunner
from engine.backends.paged.ops import ForwardContext, TorchOps
from engine.backends.paged.scheduler import ScheduledSeq
from engine.backends.paged.sequence import Sequence
from engine.types import SamplingParams


def write_byte_tokenizer(folder: Path, *, chat_template: str | None = None) -> None:
    """A byte-level BPE tokenizer.json (256 byte tokens, a few merges, <s> and </s>) for tiny checkpoints."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    from engine.gguf.vocab import byte_alphabet

    chars = sorted(byte_alphabet(), key=lambda c: byte_alphabet()[c])
    vocab = {c: i for i, c in enumerate(chars)}
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    tok = Tokenizer(models.BPE(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken("<s>", special=True), AddedToken("</s>", special=True)])
    tok.save(str(folder / "tokenizer.json"))
    cfg = {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True}
    if chat_template:
        cfg["chat_template"] = chat_template
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))


def make_runner(model, *, num_blocks: int = 64, block_size: int = 4, ops=TorchOps, kv_dtype=None) -> ModelRunner:
    config = EngineConfig(block_size=block_size, max_model_len=num_blocks * block_size, max_num_batched_tokens=256)
    runner = ModelRunner(model, config, torch.device("cpu"), ops=ops, kv_dtype=kv_dtype)
    runner.allocate_kv_cache(num_blocks)
    return runner


@torch.inference_mode()
def paged_logits(runner: ModelRunner, tokens: list[int], chunks: list[int]) -> torch.Tensor:
    """Logits [len(tokens), vocab] for every position, computed in the given chunk sizes through the paged cache."""
    bm = BlockManager(len(runner.kv_caches[0][0]), runner.config.block_size, enable_prefix_caching=False)
    seq = Sequence(tokens, SamplingParams(temperature=0), block_size=runner.config.block_size)
    bm.allocate(seq)
    out = []
    for n in chunks:
        bm.append_slots(seq, n)
        batch = runner.prepare([ScheduledSeq(seq, n)])
        hidden = runner.model(batch.input_ids, batch.positions, ForwardContext(batch.meta, runner.kv_caches, runner.ops))
        out.append(runner.model.compute_logits(hidden))
        seq.num_computed_tokens += n
    return torch.cat(out)

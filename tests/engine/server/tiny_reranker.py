"""A tiny random-weight cross-encoder reranker for the rerank tests, and its GGUF made by llama.cpp's own
converter (``convert_hf_to_gguf.py`` from the llama-cpp-python sdist at Hearth's pin).

The model is transformers' ``RobertaForSequenceClassification`` with one label over a small WordPiece
vocabulary: its head (the first token's hidden state -> dense -> tanh -> out_proj) is what llama.cpp's rank
pooling computes, so the GGUF's scores and transformers' logits are the same function of the same weights.
(``BertForSequenceClassification`` is not: llama.cpp's converter drops BERT's pooler, so a BERT
cross-encoder's GGUF scores ``classifier(hidden)`` where transformers scores
``classifier(tanh(pooler(hidden)))``.)

Both folders are kept in tests/data/tiny-reranker (a clone passes without building anything); run this
module to build them again::

    .venv/bin/python -m tests.engine.server.tiny_reranker [--sources LLAMA_CPP_DIR]

Without ``--sources`` it downloads the sdist with pip (PyPI only).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "data" / "tiny-reranker"
HF_DIR = DATA / "hf"
GGUF_PATH = DATA / "tiny-reranker-f32.gguf"
SEED = 1234

_SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
_WORDS = (
    "the a an of to in is are was on for with and or not what who where how why when which "
    "panda bear bears giant eats eat bamboo china animal animals lives live forest tree trees "
    "cat cats dog dogs city river water blue sky sun moon paris france capital berlin people "
    "many large small fast slow car cars train music song book books read reading"
).split()
_PUNCT = list(".,?!'-")
_LETTERS = [chr(c) for c in range(ord("a"), ord("z") + 1)]


def vocabulary() -> list[str]:
    """The WordPiece vocabulary: the special tokens, punctuation, letters (so every lower-case word has a
    tokenization), their ``##`` continuations, then whole words."""
    words = [w for w in dict.fromkeys(_WORDS) if w not in _LETTERS]
    return _SPECIAL + _PUNCT + _LETTERS + ["##" + c for c in _LETTERS] + words


def build_hf(folder: Path) -> None:
    """Write the seeded random-weight model and its tokenizer (vocab.txt, no tokenizer.json: llama.cpp's
    converter reads a RoBERTa folder with a tokenizer.json as byte-level BPE) to ``folder``."""
    import torch
    from transformers import BertTokenizer, RobertaConfig, RobertaForSequenceClassification

    folder.mkdir(parents=True, exist_ok=True)
    vocab = vocabulary()
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tokenizer = BertTokenizer(vocab=str(folder / "vocab.txt"), do_lower_case=True)
    tokenizer.save_pretrained(str(folder))
    (folder / "tokenizer.json").unlink(missing_ok=True)
    config_path = folder / "tokenizer_config.json"
    tok_config = json.loads(config_path.read_text())
    # The special tokens and where they go, said in the tokenizer config that llama.cpp's converter reads:
    # [CLS] query [SEP] document [SEP], as the BERT tokenizer pairs them.
    tok_config.update(
        tokenizer_class="BertTokenizer", bos_token="[CLS]", eos_token="[SEP]",
        add_bos_token=True, add_eos_token=True, add_sep_token=False,
    )  # fmt: skip
    config_path.write_text(json.dumps(tok_config, indent=2))

    torch.manual_seed(SEED)
    config = RobertaConfig(
        vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=514, type_vocab_size=1, pad_token_id=0, bos_token_id=2, eos_token_id=3,
        unk_token_id=1, cls_token_id=2, sep_token_id=3, mask_token_id=4,
        num_labels=1, initializer_range=0.2, hidden_act="gelu", architectures=["RobertaForSequenceClassification"],
    )  # fmt: skip
    model = RobertaForSequenceClassification(config).eval()
    model.save_pretrained(str(folder), safe_serialization=True)


# Run in a child Python, with the sdist's gguf-py first on sys.path (not the installed gguf). The converter
# names a BPE pre-tokenizer by hashing how the tokenizer splits a test string, which only a published
# model's vocabulary matches; a WordPiece vocabulary has no pre-tokenizer, so the name is given.
_CONVERT = """
import runpy, sys
src = sys.argv[1]
sys.path[:0] = [src + "/gguf-py", src]
from conversion.base import TextModel
TextModel.get_vocab_base_pre = lambda self, tokenizer: "default"
sys.argv = [src + "/convert_hf_to_gguf.py", *sys.argv[2:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def convert(hf_dir: Path, out: Path, sources: Path) -> None:
    """``hf_dir`` to an f32 GGUF at ``out`` with ``sources``' convert_hf_to_gguf.py."""
    cmd = [sys.executable, "-c", _CONVERT, str(sources), str(hf_dir), "--outtype", "f32", "--outfile", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)


def llama_cpp_sources(workdir: Path) -> Path:
    """llama.cpp's sources from the llama-cpp-python sdist at the installed version (pip download)."""
    import llama_cpp

    version = llama_cpp.__version__
    cmd = [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
           f"llama-cpp-python=={version}", "-d", str(workdir)]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True)
    archive = next(workdir.glob(f"llama_cpp_python-{version}.tar.gz"))
    with tarfile.open(archive) as tar:
        tar.extractall(workdir, filter="data")
    return workdir / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"


def build(sources: Path | None = None) -> Path:
    """Build the model and its GGUF into tests/data/tiny-reranker; returns the GGUF's path."""
    build_hf(HF_DIR)
    with tempfile.TemporaryDirectory() as tmp:
        convert(HF_DIR, GGUF_PATH, sources or llama_cpp_sources(Path(tmp)))
    return GGUF_PATH


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sources", type=Path, help="llama.cpp's source folder (else the sdist is downloaded)")
    args = parser.parse_args()
    print(build(args.sources))


if __name__ == "__main__":
    main()

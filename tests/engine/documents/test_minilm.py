"""The default embedding model: converted from the package's safetensors to GGUF, run by llama.cpp, and
checked against the original model run by transformers (mean pooling, as sentence-transformers does)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

SENTENCES = [
    "The cat sits on the mat.",
    "Preheat the oven to 220 degrees before the loaf goes in.",
    "Héllo wörld, a naïve café in Zürich!",
    "def add(a, b):\n    return a + b",
    "Filters are replaced every three months. " * 12,
]


def test_the_converted_model_matches_the_original(embedder, tmp_path: Path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from engine.documents.minilm import extract_to, model_zip

    folder = extract_to(model_zip(), tmp_path / "minilm")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    model = transformers.AutoModel.from_pretrained(str(folder)).eval()
    batch = tokenizer(SENTENCES, padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    reference = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)

    ours = torch.tensor(embedder.embed(SENTENCES))
    assert ours.shape == (len(SENTENCES), 384)
    cosine = (ours * reference).sum(-1)
    assert bool((cosine > 0.99).all()), cosine
    # and it tells texts apart: no two different sentences look alike
    sims = ours @ ours.T
    assert float(sims[0, 1]) < 0.5


def test_the_model_is_converted_once_into_the_data_folder(embedder, hearth_home: Path):
    from engine.documents.minilm import default_model_path, ensure_default_model

    path = ensure_default_model()
    assert path == default_model_path() and path.is_relative_to(hearth_home)
    mtime = path.stat().st_mtime_ns
    assert ensure_default_model().stat().st_mtime_ns == mtime
    assert path.read_bytes()[:4] == b"GGUF"
    if os.name != "nt":  # private to its owner, as everything Hearth keeps in its data folder
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_a_passage_longer_than_the_model_takes_is_embedded_by_its_beginning(embedder):
    """The worker may load the model with a context longer than BERT's 512 positions: a long passage
    (code: many tokens a character) is cut to what the model was trained for, not crashed on."""
    from engine.backends import LoadOptions
    from engine.documents.embedding import BackendEmbedder
    from engine.loading import open_model

    backend, _ = open_model(str(embedder.backend.spec.path), options=LoadOptions(n_seq_max=1, n_threads=1, n_ctx=2048))
    long_embedder = BackendEmbedder(backend, "minilm-2048")
    try:
        code = "x = {a: [1, 2, 3]}; " * 300
        long_vec, short_vec = long_embedder.embed([code, "x = {a: [1, 2, 3]};"])
        assert len(long_vec) == 384
        assert abs(sum(v * v for v in long_vec) - 1.0) < 1e-3
        assert sum(a * b for a, b in zip(long_vec, short_vec, strict=True)) > 0.5  # the same code, repeated
    finally:
        long_embedder.close()


def test_sentences_embedded_together_are_each_what_they_are_alone(embedder):
    """The encoder reads short texts packed into one call, each its own sequence (attending both ways within it
    only): the vectors are those of each text alone."""
    together = embedder.embed(SENTENCES)
    for sentence, vec in zip(SENTENCES, together, strict=True):
        alone = embedder.embed([sentence])[0]
        assert sum(a * b for a, b in zip(alone, vec, strict=True)) > 0.9999, sentence

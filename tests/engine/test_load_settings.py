"""Saved load settings: validated with a sentence, kept in the data folder, put into a load's options; and the
llama.cpp overrides they become (YaRN, MoE experts on the CPU)."""

from __future__ import annotations

import re

import pytest

from engine.backends.options import LoadOptions
from engine.errors import InvalidRequest
from engine.load_settings import CPU_MOE_ALL, LoadSettingsStore, ModelLoadSettings


def test_settings_are_saved_per_model_and_forgotten_when_empty(tmp_path):
    store = LoadSettingsStore(tmp_path)
    assert store.get("a").is_empty
    store.put("a", ModelLoadSettings(n_ctx=8192, kv_type="q8_0", cpu_moe=CPU_MOE_ALL, rope_scale=4.0))
    store.put("b", ModelLoadSettings(n_threads=1))
    again = LoadSettingsStore(tmp_path)  # another process (the worker after a restart) reads the same
    assert again.get("a") == ModelLoadSettings(n_ctx=8192, kv_type="q8_0", cpu_moe=-1, rope_scale=4.0)
    assert again.get("b").n_threads == 1
    again.put("a", ModelLoadSettings())
    assert LoadSettingsStore(tmp_path).get("a").is_empty and LoadSettingsStore(tmp_path).get("b").n_threads == 1


def test_a_damaged_file_leaves_hearths_own_choices(tmp_path):
    (tmp_path / "load-settings.json").write_text("{not json")
    assert LoadSettingsStore(tmp_path).get("a").is_empty


@pytest.mark.parametrize(
    ("given", "param"),
    [({"n_ctx": 4}, "n_ctx"), ({"kv_type": "q3"}, "kv_type"), ({"rope_scale": 0.5}, "rope_scale"),
     ({"cpu_moe": -2}, "cpu_moe"), ({"n_threads": 100_000}, "n_threads"), ({"n_batch": 0}, "n_batch"),
     ({"kv_type": "q4_0", "flash_attn": False}, "flash_attn"), ({"speculative": "sometimes"}, "speculative"),
     ({"speculative": 1}, "speculative")],
)  # fmt: skip
def test_out_of_range_values_are_refused_naming_the_setting(given, param):
    with pytest.raises(InvalidRequest) as err:
        ModelLoadSettings.from_dict(given)
    assert err.value.param == param and param in str(err.value).lower()


def test_an_unknown_setting_is_refused_not_ignored():
    with pytest.raises(InvalidRequest, match="'context'"):
        ModelLoadSettings.from_dict({"context": 4096})


def test_settings_go_into_the_options_a_load_takes_and_a_loads_own_flags_win():
    saved = ModelLoadSettings(n_ctx=8192, n_gpu_layers=10, flash_attn=False, n_batch=128, cpu_moe=3, rope_scale=2.0)
    options = saved.overridden_by(ModelLoadSettings(n_ctx=2048)).apply(LoadOptions(n_seq_max=2, n_threads=4))
    assert (options.n_ctx, options.n_gpu_layers, options.n_batch, options.n_seq_max, options.n_threads) == (2048, 10, 128, 2, 4)
    assert (options.llamacpp.flash_attn, options.llamacpp.cpu_moe, options.llamacpp.rope_scale) == (False, 3, 2.0)
    assert ModelLoadSettings().apply(LoadOptions(n_ctx=512)) == LoadOptions(n_ctx=512)


def test_a_models_speculative_mode_goes_over_the_servers_and_is_saved(tmp_path):
    from engine.backends.speculative import SpeculativeOptions

    serve_wide = LoadOptions(speculative=SpeculativeOptions.parse("ngram"))
    assert ModelLoadSettings(speculative="off").apply(serve_wide).speculative.mode == "off"
    assert ModelLoadSettings(speculative="Auto").apply(serve_wide).speculative.mode == "auto"
    assert ModelLoadSettings(n_ctx=512).apply(serve_wide).speculative.mode == "ngram"  # unset: the server's
    store = LoadSettingsStore(tmp_path)
    store.put("a", ModelLoadSettings(speculative="off"))
    assert LoadSettingsStore(tmp_path).get("a").speculative == "off"
    assert ModelLoadSettings(speculative="off").overridden_by(ModelLoadSettings(speculative="ngram")).speculative == "ngram"


# load-settings.json as Hearth wrote it before the load settings became one type (every field set, and few):
# a file already on a person's disk must load as it did, and be written back the same.
SAVED_FILE = """{
 "org/model-7b:Q4_K_M": {
  "cpu_moe": -1,
  "flash_attn": true,
  "kv_type": "q8_0",
  "n_batch": 256,
  "n_ctx": 8192,
  "n_gpu_layers": 20,
  "n_seq_max": 2,
  "n_threads": 1,
  "rope_orig_ctx": 32768,
  "rope_scale": 4.0,
  "speculative": "draft:small"
 },
 "tiny": {
  "flash_attn": false,
  "n_ctx": 4096,
  "speculative": "off"
 }
}"""


def test_a_file_saved_before_loads_as_it_did_and_is_written_back_the_same(tmp_path):
    (tmp_path / "load-settings.json").write_text(SAVED_FILE)
    store = LoadSettingsStore(tmp_path)
    big, tiny = store.get("org/model-7b:Q4_K_M"), store.get("tiny")
    assert big == ModelLoadSettings(n_ctx=8192, n_seq_max=2, n_gpu_layers=20, kv_type="q8_0", flash_attn=True, n_threads=1,
                                    n_batch=256, rope_scale=4.0, rope_orig_ctx=32768, cpu_moe=CPU_MOE_ALL,
                                    speculative="draft:small")  # fmt: skip
    assert tiny == ModelLoadSettings(n_ctx=4096, flash_attn=False, speculative="off")
    again = tmp_path / "again"
    again.mkdir()
    LoadSettingsStore(again).put("org/model-7b:Q4_K_M", big)
    LoadSettingsStore(again).put("tiny", tiny)
    assert (again / "load-settings.json").read_text() == SAVED_FILE


def test_cpu_moe_patterns_match_the_experts_of_the_layers_asked_for_only():
    from engine.backends.llamacpp.overrides import cpu_moe_overrides, expert_patterns

    def on_cpu(n: int, name: str) -> bool:  # llama.cpp searches each pattern in the tensor's name
        return any(re.search(p, name) for p in expert_patterns(n))

    assert on_cpu(CPU_MOE_ALL, "blk.47.ffn_down_exps.weight") and on_cpu(CPU_MOE_ALL, "blk.0.ffn_gate_exps.weight")
    assert not on_cpu(CPU_MOE_ALL, "blk.0.ffn_down.weight") and not on_cpu(CPU_MOE_ALL, "blk.0.ffn_gate_inp.weight")
    assert not on_cpu(CPU_MOE_ALL, "blk.0.ffn_down_shexp.weight")  # the shared expert stays with its layer
    assert on_cpu(2, "blk.1.ffn_up_exps.weight") and not on_cpu(2, "blk.2.ffn_up_exps.weight")
    assert not on_cpu(2, "blk.11.ffn_up_exps.weight") and not on_cpu(2, "blk.10.ffn_up_exps.weight")
    array = cpu_moe_overrides(2)
    assert array is not None and len(array) == 3 and array[2].pattern is None and array[0].buft  # NULL-ended
    assert cpu_moe_overrides(None) is None and cpu_moe_overrides(0) is None


def test_yarn_rope_scaling_reaches_llama_cpp(starter_path):
    """The starter with YaRN x4 answers otherwise than without (its positions are scaled), and loads its context."""
    from engine.backends.base import LlamaCppOptions, ModelSpec
    from engine.backends.llamacpp import LlamaCppBackend
    from engine.types import GenerationRequest, SamplingParams

    answers = {}
    for scale in (None, 4.0):
        backend = LlamaCppBackend()
        try:
            own = LlamaCppOptions(rope_scale=scale, rope_orig_ctx=2048 if scale else None)
            backend.load(ModelSpec(name="starter", path=starter_path), LoadOptions(n_ctx=1024, n_seq_max=1, n_threads=1, llamacpp=own))
            request = GenerationRequest(model="starter", prompt="The capital of France is", params=SamplingParams(temperature=0, max_tokens=8))
            answers[scale] = "".join(c.text for c in backend.stream(request))
        finally:
            backend.close()
    assert answers[None].strip() and answers[4.0] != answers[None]


def test_the_apis_models_are_the_settings_fields_and_the_load_body_names_them_as_always():
    """A setting is added in one place, ModelLoadSettings: the API's models take their fields from it."""
    from dataclasses import fields

    from engine.server import api_models as am

    names = [f.name for f in fields(ModelLoadSettings)]
    assert list(am.LoadSettings.model_fields) == names and list(am.ModelSettingsBody.model_fields) == names
    assert list(am.ModelLoadBody.model_fields) == ["model", *names, "save", "keep_alive"]
    every = ModelLoadSettings(n_ctx=8192, n_seq_max=2, n_gpu_layers=20, kv_type="q8_0", flash_attn=True, n_threads=1,
                              n_batch=256, rope_scale=4.0, rope_orig_ctx=32768, cpu_moe=-1, speculative="ngram")  # fmt: skip
    wire = every.to_wire()
    assert list(wire) == ["ctx", "parallel", "gpu_layers", "kv_type", "flash_attn", "threads", "batch", "rope_scale",
                          "rope_orig_ctx", "cpu_moe", "speculative"]  # fmt: skip
    body = am.ModelLoadBody.model_validate({"model": "m", **wire})
    assert body.model_extra == {} and ModelLoadSettings.read(body) == every
    assert body.model_dump(mode="json", exclude_unset=True) == {"model": "m", **wire}  # what the app sends
    assert ModelLoadSettings.read(am.LoadSettings(**every.to_dict())) == every

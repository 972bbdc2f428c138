"""Each supported family, tiny and random, through the Hugging Face loader: logits match transformers."""

from __future__ import annotations

import json

import pytest
import torch

from engine.backends.paged.loader import read_checkpoint
from engine.backends.paged.models import build_model
from engine.errors import ModelLoadError

from .helpers import make_runner, paged_logits, write_byte_tokenizer

transformers = pytest.importorskip("transformers")

BASE = dict(
    hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    vocab_size=300, max_position_embeddings=256, rms_norm_eps=1e-5, rope_theta=10000.0,
)
CASES = {
    "llama": ("LlamaConfig", {}),
    "llama-tied": ("LlamaConfig", {"tie_word_embeddings": True}),
    "llama3-rope": ("LlamaConfig", {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                     "high_freq_factor": 4.0, "original_max_position_embeddings": 32}}),
    "linear-rope": ("LlamaConfig", {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}),
    "yarn-rope": ("LlamaConfig", {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}}),
    "mistral": ("MistralConfig", {"sliding_window": None}),
    "qwen2": ("Qwen2Config", {"tie_word_embeddings": True}),
    "qwen3": ("Qwen3Config", {"head_dim": 32, "num_key_value_heads": 1}),
}  # fmt: skip


def make_checkpoint(tmp_path, config_class: str, extra: dict, *, legacy_rope: bool = False):
    torch.manual_seed(0)
    config = getattr(transformers, config_class)(**{**BASE, **extra})
    model = transformers.AutoModelForCausalLM.from_config(config).float().eval()
    with torch.no_grad():  # random norms, so a mis-wired norm weight cannot hide behind ones
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    model.save_pretrained(tmp_path)
    write_byte_tokenizer(tmp_path)
    if legacy_rope:  # config.json as older checkpoints write it: rope_scaling + rope_theta
        cfg = json.loads((tmp_path / "config.json").read_text())
        params = cfg.pop("rope_parameters", None) or {}
        cfg["rope_theta"] = params.pop("rope_theta", 10000.0)
        cfg["rope_scaling"] = params if params.get("rope_type", "default") != "default" else None
        (tmp_path / "config.json").write_text(json.dumps(cfg))
    return model


@pytest.mark.parametrize("case", list(CASES))
def test_family_logits_match_transformers(tmp_path, case):
    config_class, extra = CASES[case]
    ref = make_checkpoint(tmp_path, config_class, extra, legacy_rope=case == "llama3-rope")
    ckpt = read_checkpoint(tmp_path)
    model = build_model(ckpt.config, ckpt.weights(), dtype=torch.float32, device=torch.device("cpu"), path=str(tmp_path))
    tokens = torch.randint(0, 300, (70,), generator=torch.Generator().manual_seed(1)).tolist()
    # a prefill chunk, a second chunk over the cached prefix, then one-token decode steps
    got = paged_logits(make_runner(model), tokens, [40, 27, 1, 1, 1])
    with torch.no_grad():
        want = ref(torch.tensor([tokens])).logits[0]
    torch.testing.assert_close(got, want, atol=2e-4, rtol=1e-4)


def test_hf_folder_reads_tokenizer_and_chat_template(tmp_path):
    make_checkpoint(tmp_path, "LlamaConfig", {})
    cfg = json.loads((tmp_path / "tokenizer_config.json").read_text())
    cfg["chat_template"] = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(cfg))
    ckpt = read_checkpoint(tmp_path)
    assert ckpt.chat_template.startswith("{% for m in messages %}")
    tok = ckpt.tokenizer
    ids = tok.encode_prompt("the cat")
    assert ids[0] == tok.bos_id and tok.decode(ids[1:]) == "the cat"
    assert tok.tokenizer.token_to_id("</s>") in tok.eog_ids  # from tokenizer_config.json, beside config.json's id


def test_unknown_model_type_is_a_load_error(tmp_path):
    make_checkpoint(tmp_path, "LlamaConfig", {})
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["model_type"] = "gpt_neox"
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    ckpt = read_checkpoint(tmp_path)
    with pytest.raises(ModelLoadError, match="gpt_neox"):
        build_model(ckpt.config, ckpt.weights(), dtype=torch.float32, device=torch.device("cpu"), path=str(tmp_path))


def test_unknown_config_keys_are_ignored():
    from engine.backends.paged.models import model_module

    args = model_module("llama").ModelArgs.from_dict({**BASE, "model_type": "llama", "some_future_key": [1, 2]})
    assert args.hidden_size == 64 and args.n_kv_heads == 2


def test_missing_weights_are_a_load_error_naming_them(tmp_path):
    make_checkpoint(tmp_path, "LlamaConfig", {})
    ckpt = read_checkpoint(tmp_path)
    partial = [(n, t) for n, t in ckpt.weights() if "layers.1.mlp" not in n]
    with pytest.raises(ModelLoadError, match="layers.1.mlp"):
        build_model(ckpt.config, partial, dtype=torch.float32, device=torch.device("cpu"), path=str(tmp_path))


@pytest.mark.parametrize(
    ("change", "words"),
    [({"hidden_act": "gelu_pytorch_tanh"}, "activation 'gelu_pytorch_tanh'"),
     ({"rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}}, "RoPE scaling 'dynamic'"),
     ({"model_type": "gemma2"}, "model type 'gemma2'")],  # fmt: skip
)
def test_a_model_the_engine_would_compute_otherwise_is_refused_saying_what_to_run_it_on(tmp_path, change, words):
    """An activation or a RoPE scaling the decoder does not compute ran with SiLU's or plain RoPE's numbers."""
    make_checkpoint(tmp_path, "LlamaConfig", {})
    cfg = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**cfg, **change}))
    ckpt = read_checkpoint(tmp_path)
    with pytest.raises(ModelLoadError, match=words) as err:
        build_model(ckpt.config, ckpt.weights(), dtype=torch.float32, device=torch.device("cpu"), path=str(tmp_path))
    assert str(tmp_path) in str(err.value) and str(err.value).endswith("run a GGUF of it on the llama.cpp backend.")


def test_a_qwen_window_the_config_does_not_use_does_not_cap_the_context():
    from engine.backends.paged.models import model_args

    for family in ("qwen2", "qwen3"):
        unused = model_args({**BASE, "model_type": family, "sliding_window": 32, "use_sliding_window": False}, path="m")
        used = model_args({**BASE, "model_type": family, "sliding_window": 32, "use_sliding_window": True}, path="m")
        assert unused.sliding_window is None and used.sliding_window == 32
    mistral = model_args({**BASE, "model_type": "mistral", "sliding_window": 32}, path="m")
    assert mistral.sliding_window == 32  # Mistral's window is its own

"""Quantization labels parsed from real-world file names, and files grouped into variants."""

from __future__ import annotations

import pytest

from engine.catalog.shape import parameters_from_name
from engine.catalog.variants import RemoteFile, group_variants, quality_rank, quant_label, split_part


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("tiny-llama.Q4_K_M.gguf", "Q4_K_M"),
        ("Qwen2.5-7B-Instruct-Q4_K_M.gguf", "Q4_K_M"),
        ("Meta-Llama-3.1-8B-Instruct-IQ4_XS.gguf", "IQ4_XS"),
        ("model-bf16.gguf", "BF16"),
        ("ggml-model-q4_0.gguf", "Q4_0"),
        ("llama-3-8b.fp16.gguf", "F16"),
        ("gemma-2-9b-it-Q4_K_L.gguf", "Q4_K_L"),
        ("Llama-3.2-1B-Instruct-UD-Q4_K_XL.gguf", "Q4_K_XL"),
        ("Q4_K_M/Foo-Q4_K_M-00002-of-00003.gguf", "Q4_K_M"),
        ("x.Q6_K-00001-of-00002.gguf", "Q6_K"),
        ("Mixtral-8x7B-v0.1.Q3_K_S.gguf", "Q3_K_S"),
        ("model.gguf", None),
    ],
)
def test_quant_labels_from_file_names(name, label):
    assert quant_label(name) == label


def test_split_parts_are_recognised():
    assert split_part("a.Q6_K-00001-of-00002.gguf") == (1, 2)
    assert split_part("deep/path/m-Q8_0-00003-of-00005.gguf") == (3, 5)
    assert split_part("a.Q6_K.gguf") is None


def test_quality_order_matches_what_people_expect():
    order = ["Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_0", "Q4_1", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "Q8_0", "F16", "F32"]
    ranks = [quality_rank(x) for x in order]
    assert ranks == sorted(ranks) and len(set(ranks)) == len(ranks)
    assert quality_rank("BF16") == quality_rank("F16")
    assert quality_rank("Q3_K_L") < quality_rank("IQ4_XS") < quality_rank("Q4_K_S")
    assert quality_rank("4bit", "mlx") < quality_rank("8bit", "mlx") < quality_rank("BF16", "mlx")
    assert quality_rank("Q9_Z") == -1


def test_gguf_repo_files_group_into_variants_lowest_quality_first():
    files = [
        RemoteFile("README.md", 100),
        RemoteFile("m.Q8_0.gguf", 800),
        RemoteFile("m.Q2_K.gguf", 300),
        RemoteFile("m.Q6_K-00002-of-00002.gguf", 350),
        RemoteFile("m.Q6_K-00001-of-00002.gguf", 350),
        RemoteFile("mmproj-m-f16.gguf", 600),
        RemoteFile("m.F16.gguf", 1600),
    ]
    variants = group_variants("o/m-GGUF", files)
    assert [v.name for v in variants] == ["Q2_K", "Q6_K", "Q8_0", "F16"]
    q6 = variants[1]
    assert [f.path for f in q6.files] == ["m.Q6_K-00001-of-00002.gguf", "m.Q6_K-00002-of-00002.gguf"]
    assert q6.size_bytes == 700 and q6.parts == 2 and q6.primary.path.endswith("00001-of-00002.gguf")
    assert all("mmproj" not in f.path for v in variants for f in v.files)


def test_two_models_with_the_same_quant_in_one_repo_stay_apart():
    files = [RemoteFile("base-7b.Q4_K_M.gguf", 1), RemoteFile("chat-7b.Q4_K_M.gguf", 1)]
    names = sorted(v.name for v in group_variants("o/m", files))
    assert names == ["base-7b-Q4_K_M", "chat-7b-Q4_K_M"]


def test_mlx_and_safetensors_repos_are_one_variant_with_their_config():
    files = [RemoteFile(p, 10) for p in ("config.json", "model.safetensors", "tokenizer.json", "README.md", ".gitattributes")]
    (mlx,) = group_variants("mlx-community/Foo-8bit", files, tags=["mlx"])
    assert (mlx.name, mlx.format) == ("8bit", "mlx")
    assert {f.path for f in mlx.files} == {"config.json", "model.safetensors", "tokenizer.json"}
    (quant,) = group_variants("o/Foo", files, config={"quantization": {"group_size": 64, "bits": 4}})
    assert (quant.name, quant.format) == ("4bit", "mlx")
    (st,) = group_variants("o/Foo", files, tags=["safetensors"], config={"torch_dtype": "bfloat16"})
    assert (st.name, st.format) == ("BF16", "safetensors")


@pytest.mark.parametrize(
    ("name", "params"),
    [("Llama-3.1-8B-Instruct-GGUF", 8e9), ("SmolLM2-135M-Instruct", 135e6), ("Mixtral-8x7B-v0.1", 56e9), ("Phi-3.5-mini", None)],
)
def test_parameter_counts_from_names(name, params):
    assert parameters_from_name(name) == (int(params) if params else None)

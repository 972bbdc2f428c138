"""A fake hub full of real small files (GGUF made with the gguf package, safetensors, configs)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.hubserver import FakeHub, HubFile, HubRepo

TINY = "TheOrg/Tiny-Llama-GGUF"
BIG = "TheOrg/Big-Llama-8B-GGUF"
MLX_TINY = "mlx-community/Tiny-Llama-4bit"
MLX_BIG = "mlx-community/Big-Llama-8B-4bit"
ST_TINY = "TheOrg/Tiny-Llama-BF16"
ST_BIG = "TheOrg/Big-Llama-8B"
GATED = "TheOrg/Gated-Llama-GGUF"
PRIVATE = "TheOrg/Private-Llama-GGUF"
TOKEN = "hf_test_token"

FILE_TYPES = {"F16": 1, "Q8_0": 7, "Q2_K": 10, "Q4_K_M": 15, "Q5_K_M": 17, "Q6_K": 18}
TEMPLATE = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}<|assistant|>"
# Llama-3-8B's real shape and file sizes: the advisor's four machines are judged on these.
BIG_SHAPE = dict(layers=32, heads=32, kv_heads=8, embd=4096, ctx=8192)
BIG_SIZES = {"Q2_K": 3_180_000_000, "Q4_K_M": 4_920_000_000, "Q5_K_M": 5_730_000_000, "Q8_0": 8_540_000_000, "F16": 16_070_000_000}
BIG_Q6_PARTS = 3_300_000_000  # each of two split parts


def make_gguf(
    path: Path,
    *,
    label: str,
    n_floats: int,
    layers: int = 4,
    heads: int = 4,
    kv_heads: int = 2,
    embd: int = 64,
    ctx: int = 2048,
    seed: int = 0,
    split: tuple[int, int] | None = None,
) -> bytes:
    """A real GGUF file with llama metadata and one random tensor of ``n_floats`` floats."""
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    if split is None or split[0] == 0:
        w.add_name("Tiny Llama")
        w.add_block_count(layers)
        w.add_context_length(ctx)
        w.add_embedding_length(embd)
        w.add_feed_forward_length(embd * 4)
        w.add_head_count(heads)
        w.add_head_count_kv(kv_heads)
        w.add_layer_norm_rms_eps(1e-5)
        w.add_file_type(FILE_TYPES[label])
        w.add_tokenizer_model("llama")
        w.add_token_list([f"t{i}".encode() for i in range(32)])
        w.add_chat_template(TEMPLATE)
    if split is not None:
        w.add_uint16("split.no", split[0])
        w.add_uint16("split.count", split[1])
        w.add_int32("split.tensors.count", split[1])
    rng = np.random.default_rng(seed)
    w.add_tensor(f"blk.{seed}.attn_q.weight", rng.standard_normal(n_floats, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path.read_bytes()


def make_safetensors(n_floats: int, seed: int = 0) -> bytes:
    from safetensors.numpy import save

    rng = np.random.default_rng(seed)
    return save({"model.embed_tokens.weight": rng.standard_normal(n_floats, dtype=np.float32)})


def llama_config(*, layers: int, heads: int, kv_heads: int, hidden: int, ctx: int, **extra) -> bytes:
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "hidden_size": hidden,
        "max_position_embeddings": ctx,
        "torch_dtype": "bfloat16",
        **extra,
    }
    return json.dumps(config).encode()


def build_repos(folder: Path) -> list[HubRepo]:
    folder.mkdir(parents=True, exist_ok=True)
    readme = HubFile("README.md", b"# Tiny Llama\n", lfs=False)
    tiny_files = [readme]
    sizes = {"Q2_K": 30_000, "Q4_K_M": 400_000, "Q8_0": 120_000, "F16": 200_000}
    for i, (label, n) in enumerate(sizes.items()):
        name = f"tiny-llama.{label}.gguf"
        tiny_files.append(HubFile(name, make_gguf(folder / name, label=label, n_floats=n, seed=i)))
    for part in (1, 2):
        name = f"tiny-llama.Q6_K-0000{part}-of-00002.gguf"
        data = make_gguf(folder / name, label="Q6_K", n_floats=50_000, seed=10 + part, split=(part - 1, 2))
        tiny_files.append(HubFile(name, data))

    big_files = [HubFile("README.md", b"# Big Llama 8B\n", lfs=False)]
    for i, (label, size) in enumerate(BIG_SIZES.items()):
        name = f"Big-Llama-8B.{label}.gguf"
        data = make_gguf(folder / name, label=label, n_floats=1000, seed=20 + i, **BIG_SHAPE)
        big_files.append(HubFile(name, data, listed_size=size))
    for part in (1, 2):
        name = f"Big-Llama-8B.Q6_K-0000{part}-of-00002.gguf"
        data = make_gguf(folder / name, label="Q6_K", n_floats=1000, seed=30 + part, split=(part - 1, 2), **BIG_SHAPE)
        big_files.append(HubFile(name, data, listed_size=BIG_Q6_PARTS))

    quant = {"group_size": 64, "bits": 4}
    tok_cfg = json.dumps({"chat_template": TEMPLATE}).encode()
    mlx_tiny = [
        HubFile("config.json", llama_config(layers=4, heads=4, kv_heads=2, hidden=64, ctx=2048, quantization=quant), lfs=False),
        HubFile("model.safetensors", make_safetensors(60_000, seed=3)),
        HubFile("tokenizer_config.json", tok_cfg, lfs=False),
        HubFile("README.md", b"# mlx\n", lfs=False),
    ]
    mlx_big = [
        HubFile("config.json", llama_config(layers=32, heads=32, kv_heads=8, hidden=4096, ctx=8192, quantization=quant), lfs=False),
        HubFile("model.safetensors", make_safetensors(1000, seed=4), listed_size=4_520_000_000),
        HubFile("tokenizer_config.json", tok_cfg, lfs=False),
    ]
    st_tiny = [
        HubFile("config.json", llama_config(layers=4, heads=4, kv_heads=2, hidden=64, ctx=2048), lfs=False),
        HubFile("model.safetensors", make_safetensors(50_000, seed=5)),
        HubFile("tokenizer_config.json", tok_cfg, lfs=False),
        HubFile(".gitattributes", b"*.safetensors filter=lfs\n", lfs=False),
    ]
    st_big = [
        HubFile("config.json", llama_config(layers=32, heads=32, kv_heads=8, hidden=4096, ctx=8192), lfs=False),
        *[
            HubFile(f"model-0000{i}-of-00004.safetensors", make_safetensors(100, seed=40 + i), listed_size=4_015_000_000)
            for i in range(1, 5)
        ],
        HubFile("model.safetensors.index.json", b"{}", lfs=False),
        HubFile("tokenizer_config.json", tok_cfg, lfs=False),
    ]
    gated_gguf = make_gguf(folder / "gated.Q4_K_M.gguf", label="Q4_K_M", n_floats=1000, seed=50)
    private_gguf = make_gguf(folder / "private.Q4_K_M.gguf", label="Q4_K_M", n_floats=1000, seed=51)
    return [
        HubRepo(TINY, tiny_files, tags=["gguf", "llama", "text-generation"], downloads=5_000, likes=40,
                last_modified="2025-03-01T10:00:00.000Z"),
        HubRepo(BIG, big_files, tags=["gguf", "llama", "text-generation"], downloads=90_000, likes=900,
                last_modified="2024-07-01T10:00:00.000Z",
                gguf={"total": 8_030_261_248, "architecture": "llama", "context_length": 8192}),
        HubRepo(MLX_TINY, mlx_tiny, tags=["mlx", "safetensors", "llama"], library_name="mlx", downloads=300, likes=5,
                last_modified="2025-06-01T10:00:00.000Z"),
        HubRepo(MLX_BIG, mlx_big, tags=["mlx", "safetensors", "llama"], library_name="mlx", downloads=2_000, likes=30,
                last_modified="2025-05-01T10:00:00.000Z"),
        HubRepo(ST_TINY, st_tiny, tags=["safetensors", "transformers", "llama"], library_name="transformers",
                downloads=800, likes=2, last_modified="2024-01-01T10:00:00.000Z"),
        HubRepo(ST_BIG, st_big, tags=["safetensors", "transformers", "llama"], library_name="transformers",
                downloads=100_000, likes=2_000, last_modified="2024-04-18T10:00:00.000Z"),
        HubRepo(GATED, [HubFile("gated.Q4_K_M.gguf", gated_gguf)], tags=["gguf"], gated="manual", downloads=10, likes=1,
                last_modified="2023-01-01T10:00:00.000Z"),
        HubRepo(PRIVATE, [HubFile("private.Q4_K_M.gguf", private_gguf)], tags=["gguf"], private=True,
                last_modified="2023-01-01T10:00:00.000Z"),
    ]  # fmt: skip


@pytest.fixture(scope="session")
def _fake_hub(tmp_path_factory: pytest.TempPathFactory):
    repos = build_repos(tmp_path_factory.mktemp("hub-files"))
    with FakeHub(repos, token=TOKEN) as hub:
        yield hub


@pytest.fixture
def hub(_fake_hub: FakeHub) -> FakeHub:
    """The fake hub, with no faults set and an empty request log."""
    _fake_hub.reset()
    yield _fake_hub
    _fake_hub.reset()


@pytest.fixture
def client(hub: FakeHub):
    from engine.catalog.hub import HubClient

    return HubClient(endpoint=hub.url, token=None, timeout=5)


@pytest.fixture
def registry(tmp_path: Path):
    from engine.catalog.registry import ModelRegistry

    reg = ModelRegistry(tmp_path / "home", register_starter=False)
    yield reg
    reg.close()

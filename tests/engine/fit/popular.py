"""Four popular GGUF repos as the Hub lists them: their real shapes and quant file sizes (bytes),
and the machine classes the advisor's choice table is checked on."""

from __future__ import annotations

from pathlib import Path

from engine.hardware import GIB, CpuInfo, GpuInfo, HardwareInfo

# name -> (shape, {variant: size in bytes, or a tuple of split-part sizes})
SHAPES = {
    "llama": dict(layers=32, heads=32, kv_heads=8, embd=4096, ff=14336, vocab=128_256, ctx=131_072),
    "qwen14": dict(layers=48, heads=40, kv_heads=8, embd=5120, ff=13824, vocab=152_064, ctx=32_768),
    "qwen32": dict(layers=64, heads=40, kv_heads=8, embd=5120, ff=27648, vocab=152_064, ctx=32_768),
    "llama70": dict(layers=80, heads=64, kv_heads=8, embd=8192, ff=28672, vocab=128_256, ctx=131_072),
}
REPOS = {
    "bartowski/Meta-Llama-3.1-8B-Instruct-GGUF": ("Meta-Llama-3.1-8B-Instruct", "llama", "llama", {
        "Q2_K": 3_179_131_104, "Q3_K_S": 3_664_504_544, "Q3_K_M": 4_018_918_624, "Q3_K_L": 4_321_956_064,
        "Q4_0": 4_661_212_384, "Q4_K_S": 4_692_669_664, "Q4_K_M": 4_920_734_432, "Q5_K_S": 5_599_295_200,
        "Q5_K_M": 5_732_987_104, "Q6_K": 6_596_006_112, "Q8_0": 8_540_770_528, "F16": 16_068_891_328,
    }),
    "bartowski/Qwen2.5-14B-Instruct-GGUF": ("Qwen2.5-14B-Instruct", "qwen2", "qwen14", {
        "Q2_K": 5_770_498_816, "Q3_K_S": 6_659_596_544, "Q3_K_M": 7_339_204_864, "Q3_K_L": 7_924_767_488,
        "Q4_0": 8_517_730_560, "Q4_K_S": 8_573_436_160, "Q4_K_M": 8_988_110_080, "Q5_K_S": 10_266_554_624,
        "Q5_K_M": 10_508_873_984, "Q6_K": 12_124_684_032, "Q8_0": 15_701_598_976,
        "F16": (14_770_000_000, 14_770_000_000),
    }),
    "bartowski/Qwen2.5-32B-Instruct-GGUF": ("Qwen2.5-32B-Instruct", "qwen2", "qwen32", {
        "Q2_K": 12_313_098_240, "Q3_K_S": 14_392_330_240, "Q3_K_M": 15_935_047_680, "Q3_K_L": 17_247_078_400,
        "Q4_0": 18_640_230_400, "Q4_K_S": 18_784_410_624, "Q4_K_M": 19_851_335_680, "Q5_K_S": 22_638_254_080,
        "Q5_K_M": 23_262_156_800, "Q6_K": 26_886_155_264, "Q8_0": (17_410_000_000, 17_410_000_000),
        "F16": (32_770_000_000, 32_770_000_000),
    }),
    "bartowski/Llama-3.3-70B-Instruct-GGUF": ("Llama-3.3-70B-Instruct", "llama", "llama70", {
        "Q2_K": 26_375_113_280, "Q3_K_S": 30_912_048_576, "Q3_K_M": 34_267_494_016, "Q3_K_L": 37_140_594_816,
        "Q4_0": 40_116_466_816, "Q4_K_S": 40_347_221_120, "Q4_K_M": 42_520_398_976, "Q5_K_S": 48_657_451_136,
        "Q5_K_M": 49_949_819_008, "Q6_K": (28_940_000_000, 28_940_000_000), "Q8_0": (37_490_000_000, 37_490_000_000),
        "F16": (47_040_000_000, 47_040_000_000, 47_040_000_000),
    }),
}  # fmt: skip

# GGUF general.file_type of each label (llama.cpp's LLAMA_FTYPE values)
FILE_TYPES = {"F16": 1, "Q4_0": 2, "Q8_0": 7, "Q2_K": 10, "Q3_K_S": 11, "Q3_K_M": 12, "Q3_K_L": 13, "Q4_K_S": 14,
              "Q4_K_M": 15, "Q5_K_S": 16, "Q5_K_M": 17, "Q6_K": 18}  # fmt: skip


def machine(name: str, *, ram_gb: int, vram_gb: int = 0, apple: bool = False, gpus: int = 1) -> HardwareInfo:
    found: tuple[GpuInfo, ...] = ()
    if apple:
        found = (GpuInfo(0, "Apple M-series GPU", "apple", ram_gb * GIB, unified_memory=True),)
    elif vram_gb:
        found = tuple(
            GpuInfo(i, f"NVIDIA {vram_gb} GB", "nvidia", vram_gb * GIB, vram_gb * GIB, "8.9", "550.54") for i in range(gpus)
        )
    cpu = CpuInfo("Test CPU", "arm64" if apple else "x86_64", 8, 16, ("neon",) if apple else ("avx2",))
    return HardwareInfo(os=name, cpu=cpu, ram_total=ram_gb * GIB, ram_available=ram_gb * GIB // 2, gpus=found)


MACHINES = {
    "CPU 8 GB": machine("CPU 8 GB", ram_gb=8),
    "CPU 16 GB": machine("CPU 16 GB", ram_gb=16),
    "CPU 32 GB": machine("CPU 32 GB", ram_gb=32),
    "NVIDIA 6 GB": machine("NVIDIA 6 GB", ram_gb=16, vram_gb=6),
    "NVIDIA 8 GB": machine("NVIDIA 8 GB", ram_gb=16, vram_gb=8),
    "NVIDIA 12 GB": machine("NVIDIA 12 GB", ram_gb=32, vram_gb=12),
    "NVIDIA 16 GB": machine("NVIDIA 16 GB", ram_gb=32, vram_gb=16),
    "NVIDIA 24 GB": machine("NVIDIA 24 GB", ram_gb=64, vram_gb=24),
    "NVIDIA 48 GB": machine("NVIDIA 48 GB", ram_gb=128, vram_gb=48),
    "NVIDIA 80 GB": machine("NVIDIA 80 GB", ram_gb=256, vram_gb=80),
    "Apple 16 GB": machine("Apple 16 GB", ram_gb=16, apple=True),
    "Apple 32 GB": machine("Apple 32 GB", ram_gb=32, apple=True),
    "Apple 64 GB": machine("Apple 64 GB", ram_gb=64, apple=True),
}


def write_header_gguf(path: Path, *, arch: str, label: str, shape: dict, split: tuple[int, int] | None = None) -> bytes:
    """A GGUF file with the model's real metadata (what the Hub's range reads see) and one tiny tensor."""
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(path), arch)
    if split is None or split[0] == 0:
        w.add_name(path.stem)
        w.add_block_count(shape["layers"])
        w.add_context_length(shape["ctx"])
        w.add_embedding_length(shape["embd"])
        w.add_feed_forward_length(shape["ff"])
        w.add_head_count(shape["heads"])
        w.add_head_count_kv(shape["kv_heads"])
        w.add_vocab_size(shape["vocab"])
        w.add_file_type(FILE_TYPES[label])
        w.add_tokenizer_model("gpt2")
    if split is not None:
        w.add_uint16("split.no", split[0])
        w.add_uint16("split.count", split[1])
    w.add_tensor("blk.0.attn_q.weight", np.zeros(64, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path.read_bytes()


def hub_repos(folder: Path):
    """The four repos for the fake hub (tests.hubserver), each file listed with its real size."""
    from tests.hubserver import HubFile, HubRepo

    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for repo, (stem, arch, shape_name, sizes) in REPOS.items():
        shape = SHAPES[shape_name]
        files = [HubFile("README.md", f"# {stem}\n".encode(), lfs=False)]
        for label, size in sizes.items():
            parts = size if isinstance(size, tuple) else (size,)
            for i, part in enumerate(parts):
                name = f"{stem}-{label}.gguf" if len(parts) == 1 else f"{stem}-{label}-{i + 1:05d}-of-{len(parts):05d}.gguf"
                data = write_header_gguf(folder / name, arch=arch, label=label, shape=shape,
                                         split=None if len(parts) == 1 else (i, len(parts)))  # fmt: skip
                files.append(HubFile(name, data, listed_size=part))
        out.append(HubRepo(repo, files, tags=["gguf", arch, "text-generation"], downloads=100_000, likes=1_000,
                           last_modified="2024-12-01T10:00:00.000Z"))  # fmt: skip
    return out


def cell(advice) -> str:
    """One cell of docs/fit.md's choice table: the recommended variant, where it runs, slots, KV type."""
    if advice.recommended is None:
        return "—"
    e = advice.get(advice.recommended)
    plan = e.plan
    if e.fit.value == "gpu":
        where = "GPU"
    elif e.fit.value == "partial":
        where = f"GPU {plan.gpu_layers}/{plan.total_layers} layers"
    else:
        where = "CPU"
    extra = f", {plan.kv_type} KV" if plan.kv_type != "f16" else ""
    slots = f"{plan.n_seq} slot{'s' if plan.n_seq != 1 else ''}"
    return f"{advice.recommended} ({where}, {slots}{extra})"


def table(listings: dict, ctx: int) -> list[str]:
    """docs/fit.md's table at ``ctx`` tokens, one markdown row per machine class."""
    from engine.catalog.advisor import advise

    names = [REPOS[r][0].removesuffix("-Instruct") for r in listings]
    rows = [f"| machine | {' | '.join(names)} |", "| --- |" + " --- |" * len(names)]
    for name, hw in MACHINES.items():
        cells = [cell(advise(lst.variants, shape, hw, context_length=ctx, gpu_offload_supported=True))
                 for lst, shape in listings.values()]  # fmt: skip
        rows.append(f"| {name} | {' | '.join(cells)} |")
    return rows

"""`hearth hw`: what this machine has to run models with, and which backend each format gets."""

from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "hw", help="show this machine's GPUs, CPU, memory and disk", description="Show the hardware Hearth sees."
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from engine.backend_choice import choose_backend
    from engine.commands.models import human_size
    from engine.hardware import detect_hardware

    hw = detect_hardware()
    choices = {fmt: choose_backend(fmt, hardware=hw) for fmt in ("gguf", "safetensors", "mlx")}
    if args.json:
        out = hw.to_dict()
        out["backends"] = {fmt: {"backend": c.backend, "reason": c.reason, "gpu": c.gpu_offload} for fmt, c in choices.items()}
        print(json.dumps(out, indent=2))
        return 0
    cpu = hw.cpu
    features = ", ".join(f.upper().replace("AVX512", "AVX-512") for f in cpu.features if f in ("avx2", "avx512", "neon"))
    print(f"OS     {hw.os}")
    print(f"CPU    {cpu.model} ({cpu.arch}), {cpu.cores_physical} cores / {cpu.cores_logical} threads" + (f", {features}" if features else ""))
    print(f"RAM    {human_size(hw.ram_total)} total, {human_size(hw.ram_available)} available")
    if not hw.gpus:
        print(f"GPU    {hw.describe_gpu()}")
    for g in hw.gpus:
        if g.unified_memory:
            print(f"GPU    {g.name}: {human_size(g.memory_total)} unified memory shared with the CPU")
        else:
            free = f", {human_size(g.memory_free)} free" if g.memory_free is not None else ""
            extra = "".join(
                [f", compute {g.compute_capability}" if g.compute_capability else "", f", driver {g.driver}" if g.driver else ""]
            )
            print(f"GPU    {g.name}: {human_size(g.memory_total)} VRAM{free}{extra}")
    if hw.disk_free is not None:
        print(f"Disk   {human_size(hw.disk_free)} free in {hw.models_dir}")
    for fmt, c in choices.items():
        print(f"{fmt:<12} -> {c.backend}: {c.reason}")
    for note in hw.notes:
        print(f"note: {note}")
    return 0

"""The projector's share of the memory model against a real worker: the tiny vision model of
tests/engine/server/tiny_vision.py served alone, then with a projector (its own, and random-weight Idefics3
projectors of larger shapes, tests/engine/fit/projector_files.py), each answering one picture. The measured
cost of the projector is the worker's resident memory with it less without it; the predicted one is the plan's
``projector_bytes`` (/api/stats), which the worker's plan adds to the model's.

    .venv/bin/python benchmarks/fit_vision.py [--dir /tmp/fit-vision]

Goal: within +-15% where the projector is large enough to stand out of the worker's noise (tens of MB).
"""

from __future__ import annotations

import argparse
import base64
import io
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fit_accuracy import serving  # noqa: E402

from tests.engine.fit.projector_files import VisionShape, write_random_mmproj  # noqa: E402
from tests.engine.server import tiny_vision  # noqa: E402

MIB = 1024**2
SHAPES = {
    "224px, 384 wide, 4 layers": VisionShape(224, 14, 384, 1536, 4, 6),
    "448px, 384 wide, 2 layers": VisionShape(448, 14, 384, 1536, 2, 6),
    "448px, 768 wide, 6 layers": VisionShape(448, 14, 768, 3072, 6, 12),
}


def picture(side: int) -> str:
    from PIL import Image

    img = Image.new("RGB", (side, side), (200, 40, 40))
    for x in range(0, side, 8):
        for y in range(0, side, 8):
            if (x + y) // 8 % 2:
                img.putpixel((x, y), (20, 20, 200))
    out = io.BytesIO()
    img.save(out, format="PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


def measure(home: Path, mmproj: Path | None, side: int, timeout: float = 300) -> dict:
    """Serve the tiny model (with ``mmproj``), answer one message (with a picture), and read the worker's RSS."""
    args = ["--model", str(tiny_vision.MODEL_PATH), "--ctx", "1024", "--parallel", "1"]
    if mmproj is not None:
        args += ["--mmproj", str(mmproj)]
    with serving(args, home, timeout) as (proc, base):
        content: list[dict] = [{"type": "text", "text": "What is in this picture?"}]
        if mmproj is not None:
            content.append({"type": "image_url", "image_url": {"url": picture(side)}})
        model = tiny_vision.MODEL_PATH.stem
        r = httpx.post(f"{base}/v1/chat/completions", timeout=timeout, json={
            "model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 4, "temperature": 0,
        })  # fmt: skip
        r.raise_for_status()
        plan = next(iter(httpx.get(f"{base}/api/stats", timeout=10).json()["models"].values()))["load_plan"]
        time.sleep(0.5)
        return {"rss": psutil.Process(proc.pid).memory_info().rss, "plan": plan}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None, help="where the random projectors are written (kept)")
    parser.add_argument("--runs", type=int, default=2, help="workers per case; the median is taken")
    args = parser.parse_args()
    folder = args.dir or Path(tempfile.mkdtemp(prefix="fit-vision-"))
    folder.mkdir(parents=True, exist_ok=True)
    cases = {"tiny (its own, 64px)": (tiny_vision.MMPROJ_PATH, 64)}
    for name, shape in SHAPES.items():
        path = folder / f"mmproj-{shape.image}-{shape.embd}-{shape.layers}.gguf"
        if not path.exists():
            write_random_mmproj(path, shape)
        cases[name] = (path, shape.image)
    with tempfile.TemporaryDirectory() as home:

        def median_rss(mmproj: Path | None, side: int) -> tuple[int, dict]:
            runs = [measure(Path(home), mmproj, side) for _ in range(args.runs)]
            runs.sort(key=lambda r: r["rss"])
            return runs[len(runs) // 2]["rss"], runs[0]["plan"]

        alone, _ = median_rss(None, 64)
        print(f"the tiny text model alone: {alone / MIB:.0f} MiB resident")
        print(f"{'projector':<28} {'file':>8} {'predicted':>10} {'measured':>9} {'error':>7}")
        for name, (path, side) in cases.items():
            rss, plan = median_rss(path, side)
            predicted, measured = plan["projector_bytes"], rss - alone
            err = (predicted - measured) / measured if measured > 0 else float("nan")
            print(f"{name:<28} {path.stat().st_size / MIB:>6.1f}MB {predicted / MIB:>8.1f}MB {measured / MIB:>7.1f}MB {err:>+7.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

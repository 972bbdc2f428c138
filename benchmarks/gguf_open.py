"""Opening a GGUF file: Hearth's reader (engine.gguf.open_gguf) against the gguf library's GGUFReader, in one run.

Both parse the whole header (every metadata value, the vocabulary's tokens and merges included, and
every tensor's info); rounds alternate which goes first. Prints the best and median time of each and
their ratio. The paged engine and MLX open the file this way on every load.

    .venv/bin/python benchmarks/gguf_open.py [--model PATH] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import gguf

    from engine.gguf import open_gguf
    from engine.starter import starter_model_path

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=None, help="GGUF file (default: the starter model)")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    path = args.model or starter_model_path()
    sides = {"hearth": open_gguf, "gguf.GGUFReader": gguf.GGUFReader}
    times: dict[str, list[float]] = {name: [] for name in sides}
    for r in range(args.rounds):
        order = list(sides) if r % 2 == 0 else list(reversed(sides))
        for name in order:
            t0 = time.perf_counter()
            reader = sides[name](path)
            times[name].append(time.perf_counter() - t0)
            del reader
    for name, ts in times.items():
        print(f"{name:>16}: best {min(ts):.3f} s, median {statistics.median(ts):.3f} s")
    ratio = statistics.median(times["gguf.GGUFReader"]) / statistics.median(times["hearth"])
    print(f"hearth opens {path.name} {ratio:.1f}x as fast as gguf.GGUFReader (medians)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Hearth's `/v1/embeddings` (llama.cpp backend) against llama.cpp's own `llama-server --embedding`, in one run.

Both servers load the same GGUF with the same threads and context per sequence; each round sends one request of
``--texts`` short texts (``--words`` words each, fresh words every round, so no cache helps) to each server, the
order alternating round by round, and prints each side's texts per second and the ratio (Hearth / llama-server),
then the median over the rounds. llama-server pools by the mean (``--pooling mean``) and normalises, as Hearth
does: the vectors of the two are compared too (cosine of each text's pair), which checks Hearth against the
reference on the same input.

    python benchmarks/embeddings_peer.py --llama-server PATH                      # the starter model (a decoder)
    python benchmarks/embeddings_peer.py --llama-server PATH --minilm             # all-MiniLM-L6-v2 (an encoder)
    python benchmarks/embeddings_peer.py --llama-server PATH --texts 256 --words 40 80 --rounds 5
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WORDS = (
    "river mountain bread oven garden window letter engine harbour winter summer lantern forest valley kettle "
    "market ladder pocket candle bridge meadow violin carpet castle island rocket pillow basket mirror cabin "
    "thunder orchard compass blanket saddle quarry tunnel feather glacier pepper anchor marble"
).split()


def texts_for(n: int, words: tuple[int, int], seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(*words))) + f" ({seed}.{i})" for i in range(n)]


def embed(url: str, model: str, texts: list[str], key: str | None) -> tuple[float, list[list[float]]]:
    import httpx

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    t0 = time.perf_counter()
    r = httpx.post(f"{url}/embeddings", json={"model": model, "input": texts}, headers=headers, timeout=3600)
    seconds = time.perf_counter() - t0
    r.raise_for_status()
    data = sorted(r.json()["data"], key=lambda d: d["index"])
    return seconds, [d["embedding"] for d in data]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-server", type=Path, required=True, metavar="PATH", help="llama.cpp's llama-server binary")
    ap.add_argument("--model", type=Path, default=None, help="GGUF file (default: the starter model)")
    ap.add_argument("--minilm", action="store_true", help="the default documents model, all-MiniLM-L6-v2, instead")
    ap.add_argument("--texts", type=int, default=1024, help="texts in each request (default 1024)")
    ap.add_argument("--words", type=int, nargs=2, default=(4, 12), metavar=("LO", "HI"), help="words a text (default 4 12)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ctx", type=int, default=512, help="context per sequence, both servers (default 512)")
    ap.add_argument("--threads", type=int, default=None, help="threads for both (default: Hearth's default)")
    args = ap.parse_args(argv)

    import numpy as np

    from engine.backends.llamacpp.backend import default_threads
    from engine.bench.peers import LlamaServer
    from engine.catalog.registry import resolve_model
    from engine.starter import STARTER_NAME, starter_model_path
    from engine.worker.supervisor import WorkerSupervisor

    with tempfile.TemporaryDirectory() as tmp:
        import os

        os.environ.setdefault("HEARTH_HOME", str(Path(tmp) / "home"))  # the user's models and settings stay out
        if args.minilm:
            from engine.documents.minilm import ensure_default_model

            path = ensure_default_model()
        else:
            path = args.model or starter_model_path()
        load = STARTER_NAME if path == starter_model_path() else str(path)
        threads = args.threads or default_threads()
        hearth = WorkerSupervisor(
            port=0, api_key="", model=load, log_path=Path(tmp) / "hearth.log", startup_timeout=300,
            extra_args=["--backend", "llamacpp", "--parallel", "1", "--ctx", str(args.ctx), "--threads", str(threads)],
        )  # fmt: skip
        peer = LlamaServer(
            args.llama_server, path, n_ctx=args.ctx, parallel=1, n_threads=threads, log_path=Path(tmp) / "peer.log",
            extra_args=("--embedding", "--pooling", "mean", "-b", str(args.ctx), "-ub", str(args.ctx)),
        )  # fmt: skip
        try:
            hearth.start()
            peer.start()
            model = resolve_model(load).name
            sides = {"hearth": hearth.base_url, "llama-server": peer.url}
            for url in sides.values():  # each loads and warms up on a request of its own
                embed(url, model, texts_for(8, tuple(args.words), seed=-1), None)
            ratios = []
            for r in range(args.rounds):
                texts = texts_for(args.texts, tuple(args.words), seed=r)
                order = list(sides) if r % 2 == 0 else list(sides)[::-1]
                got = {name: embed(sides[name], model, texts, None) for name in order}
                (h_s, h_v), (p_s, p_v) = got["hearth"], got["llama-server"]
                cos = [float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b))) for a, b in zip(h_v, p_v, strict=True)]
                ratio = p_s / h_s
                ratios.append(ratio)
                print(f"round {r + 1}: hearth {len(texts) / h_s:.1f} texts/s ({h_s:.2f} s), llama-server "
                      f"{len(texts) / p_s:.1f} texts/s ({p_s:.2f} s): {ratio:.2f}x; cosine with llama-server's "
                      f"min {min(cos):.5f}, mean {statistics.fmean(cos):.5f}", flush=True)  # fmt: skip
            print(f"median of {len(ratios)} round(s): Hearth {statistics.median(ratios):.2f}x llama-server's texts/s")
        finally:
            peer.stop()
            hearth.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`hearth bench`'s client against the ``openai`` SDK's, on the same server and requests, in one run.

At hundreds of streams the benchmark's own client shares the machine with the server it measures: what it
spends on a chunk is CPU the server does not get, and one event loop caps the chunks it can take a second.
This serves the tiny random-weight model of ``paged_port.py`` (hidden 64, SmolLM2's vocabulary) with
``hearth serve --backend paged`` and streams the same chat completions through each client in the order
SDK, Hearth, Hearth, SDK, with fresh prompts every run. It prints each side's client CPU per chunk, the server's
output tokens a second as each client saw them, and the ratios.

    python benchmarks/bench_client.py                       # 256 streams, lengths 100-400
    python benchmarks/bench_client.py --streams 64 --lengths 50 200
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from port_common import Served, make_jobs, tiny_model  # noqa: E402

#: Greedy, with the newlines banned: the random model's greedy answer is otherwise a newline over and over, which a
#: chat answer holds back as leading space and sends as one chunk at the end; banned, it is a word over and
#: over, a chunk a token.
NO_NEWLINES = {"198": -100, "1116": -100}


async def through_sdk(url: str, model: str, bodies: list[dict]) -> tuple[int, int]:
    """The ``openai`` SDK's streaming, as a client that reads each chunk's text: (chunks, output tokens)."""
    import httpx
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=url, api_key="none", max_retries=0,
                         http_client=httpx.AsyncClient(limits=httpx.Limits(max_connections=None), timeout=600))  # fmt: skip

    async def one(body: dict) -> tuple[int, int]:
        chunks = tokens = 0
        stream = await client.chat.completions.create(
            model=model, messages=body["messages"], max_tokens=body["max_tokens"], temperature=0, stream=True, logit_bias=NO_NEWLINES,
            stream_options={"include_usage": True}, extra_body={"ignore_eos": True})  # fmt: skip
        async for chunk in stream:
            if chunk.usage is not None:
                tokens = chunk.usage.completion_tokens
            for choice in chunk.choices:
                if choice.delta is not None and choice.delta.content:
                    chunks += 1
        return chunks, tokens

    try:
        done = await asyncio.gather(*(one(b) for b in bodies))
    finally:
        await client.close()
    return sum(c for c, _ in done), sum(t for _, t in done)


async def through_hearth(url: str, model: str, bodies: list[dict]) -> tuple[int, int]:
    """`hearth bench`'s own client (engine.bench.client): (chunks, output tokens)."""
    from engine.bench.client import ChatClient, send
    from engine.bench.workload import BenchRequest

    client = ChatClient(url, None, 600.0)
    try:
        results = await asyncio.gather(*(
            send(client, model, BenchRequest(messages=tuple(b["messages"]), max_tokens=b["max_tokens"]), level_start=0.0,
                 extra_body={"logit_bias": NO_NEWLINES})
            for b in bodies))  # fmt: skip
    finally:
        await client.close()
    failed = [r.error for r in results if not r.ok]
    if failed:
        raise RuntimeError(f"{len(failed)} requests failed: {failed[0]}")
    return sum(r.content_chunks for r in results), sum(r.output_tokens for r in results)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=256, help="requests, all in flight at once (default 256)")
    ap.add_argument("--lengths", type=int, nargs=2, default=(100, 400), metavar=("LO", "HI"),
                    help="prompt words and output tokens, each uniform in LO-HI (default 100 400)")  # fmt: skip
    ap.add_argument("--work", type=Path, default=None, help="folder for the model (default: a temporary one)")
    args = ap.parse_args(argv)
    try:
        from uvloop import new_event_loop as loop_factory
    except ImportError:
        loop_factory = None
    sides = {"sdk": through_sdk, "hearth": through_hearth}
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        tokenizer, model = tiny_model(work)
        served = Served(model, ["--parallel", str(args.streams), "--ctx", "4096", "--speculative", "off"],
                        log=work / "serve.log")  # fmt: skip
        runs: dict[str, list[dict]] = {name: [] for name in sides}
        try:
            served.load()
            for k, name in enumerate(("sdk", "hearth", "hearth", "sdk")):
                jobs = make_jobs(tokenizer, args.streams, tuple(args.lengths), seed=0, words=k)
                bodies = [{"messages": [{"role": "user", "content": j.prompt}], "max_tokens": j.max_tokens} for j in jobs]
                cpu, wall = time.process_time(), time.perf_counter()
                with asyncio.Runner(loop_factory=loop_factory) as runner:
                    chunks, tokens = runner.run(sides[name](served.url + "/v1", served.model, bodies))
                cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
                run = {"client": name, "chunks": chunks, "output_tokens": tokens, "seconds": round(wall, 2),
                       "client_cpu_s": round(cpu, 2), "client_us_per_chunk": round(cpu / max(chunks, 1) * 1e6, 1),
                       "output_tokens_per_s": round(tokens / wall, 1)}  # fmt: skip
                runs[name].append(run)
                print(json.dumps(run), flush=True)
        finally:
            served.close()
    mean = {name: {key: sum(r[key] for r in rs) / len(rs) for key in ("client_us_per_chunk", "output_tokens_per_s")}
            for name, rs in runs.items()}  # fmt: skip
    cost = mean["sdk"]["client_us_per_chunk"] / mean["hearth"]["client_us_per_chunk"]
    speed = mean["hearth"]["output_tokens_per_s"] / mean["sdk"]["output_tokens_per_s"]
    print(f"client CPU a chunk: openai SDK {mean['sdk']['client_us_per_chunk']:.0f} us, hearth bench "
          f"{mean['hearth']['client_us_per_chunk']:.0f} us ({cost:.1f}x less); output tok/s seen: SDK "
          f"{mean['sdk']['output_tokens_per_s']:.0f}, hearth bench {mean['hearth']['output_tokens_per_s']:.0f} "
          f"({speed:.2f}x)", file=sys.stderr)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

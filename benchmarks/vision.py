"""Pictures: Hearth against llama.cpp's own llama-server on the same files and threads, in one run.

Both servers load the same text GGUF and projector (the tiny test model of tests/engine/server/tiny_vision.py
unless --model/--mmproj name a real one) with the same threads, slots and context per slot, and are asked
the same things through /v1/chat/completions, side by side and alternating which goes first:

- first picture: the time to the first token (a 1-token answer, greedy) for one fresh picture (a photo-like
  JPEG, --size, a new one each round so neither side has it cached) and a short question; the figure is each
  side's median and Hearth / llama-server (goal <= 1.05). The same question without a picture is timed too:
  what a request costs before any picture.
- the same picture again: its time to the first token against the first one's, per side (goal <= 0.3 for
  Hearth). With the tiny model the encoder is nearly free, so the in-process breakdown below says what is left.
- four chats decoding text while four others arrive with pictures: the text chats' decode tokens/s against
  their rate alone (goal >= 0.9), and against four text companions (the same batch, no pictures); and beside
  four "brief" picture chats that answer in one token: their pictures read, encoded and prefilled beside the
  text chats, with no rows of their own after that. Each ratio is taken within a round (the same minute of a
  drifting machine) and given as the median and the spread of the rounds.

Then, in this process, where Hearth's time for one picture goes: base64, the server's checks
(engine.server.media.check_image), llama.cpp reading the file, mtmd's preprocessing and the encoder.

    .venv/bin/python benchmarks/vision.py [--llama-server PATH] [--threads 2] [--rounds 7] [--size 1280x960]
    .venv/bin/python benchmarks/vision.py --model real.gguf --mmproj mmproj-real-f16.gguf

On a shared machine whose other processes take the cores, ``--threads 1`` gives steadier ratios (two threads
of an OpenMP team wait on each other whenever one is descheduled). Measured on the 2-core CI VM, tiny model,
1280x960 JPEG, --threads 1, 25 rounds, before and after Hearth stopped decoding a whole picture twice and began
laying a picture it has seen out from its size:

    first picture, Hearth / llama-server     1.08 -> 0.85   (37.7 ms against 44.3 ms)
    the same picture again / first, Hearth   0.89 -> 0.24   (llama-server: 0.83)
    check_image, one picture                 7-9 ms -> 0.2 ms

With the tiny model the encoder costs a few milliseconds; what is left of a first picture is llama.cpp
decoding the file (stb_image, ~17 ms for this JPEG) and mtmd resizing and slicing it (~10-25 ms), which
llama-server does too.

Text chats beside four picture chats that answer as long as they do: what slows them is the picture chats'
answers, not their pictures. Every step then decodes eight rows instead of four, and with this model a row
is dear: its logits over SmolLM2's 49k-token vocabulary are most of a step (the llama.cpp call of a step,
1 thread: 1.3 ms for four rows, 2.3-2.5 for eight; Hearth's whole step 2.1-2.8 ms and 3.7-5.4 ms). A picture's
own work in the loop is small: its two chunks' encode and embeddings (2-3 ms each) and its text's prefill,
about 7 ms a picture, against the 400-600 ms the text chats decode for. So the "+4 pictures / alone" figure is
that of any four companions (llama-server's is as low) and cannot reach 0.9 with this model; a real model,
whose step costs its weights rather than its rows, is where that goal can be judged. What pictures add on
their own is "brief pictures / alone" and "pictures / text". Measured on the busy 2-core CI VM (load 4-9 from
other jobs), 1 thread, 9 rounds (the concurrent part 4), after the loop began handing a step's tokens to
their streams together at its end and leaving a core to pictures being read:

                                         Hearth              llama-server
    first picture, TTFT (ms)             53.9 (ratio 1.00)   53.7
    the same picture again / first       0.28                0.86
    text chats, +4 pictures / alone      0.80 [0.46-1.33]    0.65 [0.60-0.98]
    text chats, +4 pictures / +4 text    0.89 [0.67-1.17]    1.15 [0.82-1.67]
    text chats, +4 brief pictures / alone 1.06 [0.72-1.40]   0.70 [0.53-0.82]

On two threads this VM gives no steady figure while other jobs run (rates swing 10x between rounds on both
sides); a two-thread team stalls at every barrier whenever one of its cores is taken, by another process or by
this one's request threads reading a picture (in-process at load 9, a 4-row step of this model: 3.8 ms on one
thread, 7.8 with another thread reading JPEGs beside it; 143 ms and 628 ms on two threads). That is why the loop computes on one thread fewer
while pictures are read and its team takes every core; the projector's encoder keeps its own thread count.
"""

from __future__ import annotations

import argparse
import base64
import io
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

KEY = "vision-bench-key"
QUESTION = "What is in this picture? Answer in one sentence."
JPEG_MAGIC = b"\xff\xd8"
DEFAULT_SERVER = Path("/tmp/sdist/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/llama-server")


def photo(seed: int, size: tuple[int, int], fmt: str) -> bytes:
    """A photo-like picture (smooth gradients, shapes and grain, so it compresses like a photo), seeded."""
    from PIL import Image, ImageDraw, ImageFilter

    rnd = random.Random(seed)
    w, h = size
    img = Image.linear_gradient("L").resize(size).convert("RGB")
    img = Image.merge("RGB", (img.getchannel(0), img.getchannel(0).rotate(90).resize(size), Image.new("L", size, rnd.randrange(256))))
    draw = ImageDraw.Draw(img)
    for _ in range(40):
        x, y, r = rnd.randrange(w), rnd.randrange(h), rnd.randrange(10, max(11, w // 6))
        draw.ellipse((x - r, y - r, x + r, y + r), fill=tuple(rnd.randrange(256) for _ in range(3)))
    img = img.filter(ImageFilter.GaussianBlur(2))
    grain = Image.effect_noise(size, 24).convert("RGB")
    img = Image.blend(img, grain, 0.15)
    out = io.BytesIO()
    img.save(out, format=fmt, **({"quality": 88} if fmt == "JPEG" else {}))
    return out.getvalue()


class Side:
    """One server on loopback: ``cmd`` started, healthy, asked through /v1/chat/completions."""

    def __init__(self, name: str, cmd: list[str], port: int, *, env: dict | None = None, model: str | None = None) -> None:
        self.name, self.model = name, model
        self.base = f"http://127.0.0.1:{port}"
        self.home = Path(tempfile.mkdtemp(prefix=f"vision-bench-{name}-"))
        self.log = open(self.home / "server.log", "wb")  # noqa: SIM115 - open for the server's life
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT)
        # A new connection per request on both sides: a kept-alive one the server has just closed would fail
        self.http = httpx.Client(
            base_url=self.base, headers={"Authorization": f"Bearer {KEY}"}, timeout=600,
            limits=httpx.Limits(max_keepalive_connections=0),
        )  # fmt: skip
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"vision: {name} exited; see {self.home / 'server.log'}")
            try:
                if self.http.get("/health").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise SystemExit(f"vision: {name} did not become ready in 240 s")

    def body(self, picture: bytes | None, *, tokens: int, question: str = QUESTION, stream: bool = False) -> dict:
        parts: list[dict] = []
        if picture is not None:
            kind = "jpeg" if picture.startswith(JPEG_MAGIC) else "png"
            url = f"data:image/{kind};base64,{base64.b64encode(picture).decode()}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
        parts.append({"type": "text", "text": question})
        body = {"messages": [{"role": "user", "content": parts}], "max_tokens": tokens, "temperature": 0, "ignore_eos": True}
        if stream:
            body["stream"] = True
        return {**body, "model": self.model} if self.model else body

    def ttft(self, picture: bytes | None, question: str = QUESTION) -> float:
        """Seconds to a 1-token answer."""
        t0 = time.perf_counter()
        r = self.http.post("/v1/chat/completions", json=self.body(picture, tokens=1, question=question))
        elapsed = time.perf_counter() - t0
        r.raise_for_status()
        return elapsed

    def decode_rate(self, picture: bytes | None, tokens: int, question: str) -> float:
        """Streamed decode tokens/s of one answer: tokens after the first over the time since the first."""
        times: list[float] = []
        with self.http.stream("POST", "/v1/chat/completions", json=self.body(picture, tokens=tokens, question=question, stream=True)) as r:
            r.raise_for_status()
            for line in r.iter_lines():
                if line.startswith("data: {") and '"content":' in line and '"content":""' not in line and '"content":null' not in line:
                    times.append(time.perf_counter())
        return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0

    def close(self) -> None:
        self.http.close()
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
        shutil.rmtree(self.home, ignore_errors=True)


def start_sides(args) -> list[Side]:
    from engine.worker.net import free_port

    slots = 8  # four text chats and four companions
    port = free_port()
    env = {**os.environ, "HEARTH_HOME": tempfile.mkdtemp(prefix="vision-bench-home-"), "HEARTH_API_KEY": KEY}
    hearth = Side("hearth", [
        sys.executable, "-m", "engine.cli", "serve", "--port", str(port), "--model", str(args.model), "--mmproj", str(args.mmproj),
        "--backend", "llamacpp", "--parallel", str(slots), "--ctx", str(args.ctx), "--threads", str(args.threads),
    ], port, env=env, model=args.model.stem)  # fmt: skip
    port = free_port()
    peer = Side("llama-server", [
        str(args.llama_server), "-m", str(args.model), "--mmproj", str(args.mmproj), "--host", "127.0.0.1", "--port", str(port),
        "-t", str(args.threads), "-tb", str(args.threads), "-np", str(slots), "-c", str(slots * args.ctx), "--no-webui",
    ], port)  # fmt: skip
    return [hearth, peer]


def first_and_again(sides: list[Side], args) -> dict[str, dict[str, list[float]]]:
    out = {s.name: {"text": [], "first": [], "again": []} for s in sides}
    for r in range(args.rounds):
        picture = photo(1000 + r, args.size, args.format)
        for s in sides if r % 2 == 0 else sides[::-1]:
            out[s.name]["text"].append(s.ttft(None, f"{QUESTION} ({r})"))
            out[s.name]["first"].append(s.ttft(picture))
            out[s.name]["again"].append(s.ttft(picture))
    return out


COMPANIONS = ("none", "text", "pictures", "brief pictures")


def text_rates(side: Side, args, companions: str, seed: int) -> float:
    """Mean decode tokens/s of four text chats, with four ``companions`` started once the text chats decode:
    "none"; "text" or "pictures", chats that answer as long as the text chats (with a picture each, or without);
    "brief pictures", chats with a picture each that answer in one token (their picture read, encoded and
    prefilled beside the text chats' decoding, and no rows of their own after it)."""
    questions = [f"Write a long story about a lighthouse keeper number {seed * 10 + i}." for i in range(4)]
    with ThreadPoolExecutor(8) as pool:
        texts = [pool.submit(side.decode_rate, None, args.tokens, q) for q in questions]
        time.sleep(0.05)  # the text chats are decoding when the others arrive
        others = []
        for i in range(4 if companions != "none" else 0):
            pic = photo(5000 + seed * 10 + i, args.size, args.format) if companions != "text" else None
            if companions == "brief pictures":
                others.append(pool.submit(side.ttft, pic, f"{QUESTION} ({seed}, {i})"))
            else:
                others.append(pool.submit(side.decode_rate, pic, args.tokens, f"{QUESTION} ({seed}, {i})"))
        rates = [f.result() for f in texts]
        for f in others:
            f.result()
    return statistics.mean(rates)


def breakdown(args) -> list[tuple[str, float]]:
    """Milliseconds of each step Hearth takes for one picture, in this process (median of the rounds)."""
    import llama_cpp

    from engine.backends.llamacpp.media import Projector
    from engine.server import media
    from engine.types import MEDIA_MARKER, MediaInput

    # n_threads_batch too: llama-cpp-python's default is every core, and the embeddings are decoded as a batch
    llm = llama_cpp.Llama(str(args.model), n_ctx=2048, n_threads=args.threads, n_threads_batch=args.threads, verbose=False)
    proj = Projector(args.mmproj, llm._model.model, n_threads=args.threads, use_gpu=False)
    steps: dict[str, list[float]] = {}
    try:
        for r in range(args.rounds):
            picture = photo(9000 + r, args.size, args.format)
            b64 = base64.b64encode(picture).decode()
            t0 = time.perf_counter()
            media._b64(b64, "x")
            steps.setdefault("base64", []).append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            media.check_image(picture, "x")
            steps.setdefault("check_image", []).append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            prompt = proj.tokenize(f"{MEDIA_MARKER}\n{QUESTION}", [MediaInput("image", picture, "x")], bos=None)
            steps.setdefault("mtmd read + preprocess", []).append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            for m in prompt.media.values():
                llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(llm.ctx), True)
                proj.encode_and_decode(llm.ctx, m, seq_id=0, n_past=0, n_batch=512)
            steps.setdefault("encode + decode embeddings", []).append(time.perf_counter() - t0)
            prompt.close()
    finally:
        proj.close()
        llm.close()
    return [(name, statistics.median(v) * 1000) for name, v in steps.items()]


def main(argv: list[str] | None = None) -> int:
    from tests.engine.server import tiny_vision

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=tiny_vision.MODEL_PATH, help="text GGUF (default: the tiny test model)")
    ap.add_argument("--mmproj", type=Path, default=tiny_vision.MMPROJ_PATH, help="its projector GGUF")
    ap.add_argument("--llama-server", type=Path, default=Path(os.environ.get("HEARTH_LLAMA_SERVER") or DEFAULT_SERVER))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=2048, help="context per slot, both servers")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--tokens", type=int, default=128, help="tokens per answer in the concurrent part")
    ap.add_argument("--size", default="1280x960", help="picture size, WxH (default 1280x960)")
    ap.add_argument("--format", default="JPEG", choices=["JPEG", "PNG"])
    ap.add_argument("--skip-servers", action="store_true", help="only the in-process breakdown")
    args = ap.parse_args(argv)
    args.size = tuple(int(v) for v in args.size.lower().split("x"))

    print(f"model {args.model.name} + {args.mmproj.name}, {args.threads} threads, {args.size[0]}x{args.size[1]} "
          f"{args.format} ({len(photo(0, args.size, args.format)) // 1024} KB), median of {args.rounds} rounds")  # fmt: skip
    if not args.skip_servers:
        sides = start_sides(args)
        try:
            for s in sides:  # load, warm up
                s.ttft(photo(1, args.size, args.format))
            times = first_and_again(sides, args)
            rates = {s.name: {c: [] for c in COMPANIONS} for s in sides}
            for r in range(max(3, args.rounds // 2)):
                for s in sides if r % 2 == 0 else sides[::-1]:
                    for c in COMPANIONS if r % 2 == 0 else COMPANIONS[::-1]:
                        rates[s.name][c].append(text_rates(s, args, c, r))
        finally:
            for s in sides:
                s.close()
        med = {n: {k: statistics.median(v) * 1000 for k, v in t.items()} for n, t in times.items()}
        h, p = med["hearth"], med["llama-server"]
        print(f"\n{'time to first token (ms)':34} {'Hearth':>8} {'llama-server':>13} {'ratio':>6}")
        for key, label in (("text", "no picture"), ("first", "first picture"), ("again", "the same picture again")):
            print(f"{label:34} {h[key]:8.1f} {p[key]:13.1f} {h[key] / p[key]:6.2f}")
        print(f"first picture, Hearth / llama-server: {h['first'] / p['first']:.2f} (goal <= 1.05)")
        for n in med:
            print(f"{n}: the same picture again / first: {med[n]['again'] / med[n]['first']:.2f}"
                  + (" (goal <= 0.3)" if n == "hearth" else ""))  # fmt: skip
        print(f"\n{'text chats decode tok/s, 4 of them':34} {'alone':>8} {'+4 text':>8} {'+4 pictures':>12} {'+4 brief pictures':>18}")
        for n, by in rates.items():
            print(f"{n:34} " + " ".join(f"{statistics.median(by[c]):{w}.1f}" for c, w in zip(COMPANIONS, (8, 8, 12, 18), strict=True)))
        print("each round's rate beside the companions / its rate alone (or beside text chats): median [min-max]")
        for n, by in rates.items():
            for c, base in (("pictures", "none"), ("pictures", "text"), ("brief pictures", "none")):
                ratios = [x / y for x, y in zip(by[c], by[base], strict=True) if y > 0]
                print(f"  {n:13} {c:15} / {base:5} {statistics.median(ratios):5.2f} [{min(ratios):.2f}-{max(ratios):.2f}]")
        print("goal: Hearth's text chats with four picture chats >= 0.9x their rate alone")
    print("\nWhere Hearth's time for one picture goes (in-process, ms):")
    for name, ms in breakdown(args):
        print(f"  {name:30} {ms:8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

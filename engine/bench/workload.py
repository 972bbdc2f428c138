"""What a benchmark sends: seeded prompts with input and output lengths drawn from distributions.

Three datasets:

- ``random``: each prompt is a run of common English words, drawn afresh, so no two prompts share
  more than the chat template's own prefix. Each word is one token in the tokenizers of the common
  model families (a leading space and a short, frequent word), so the input length is close to the
  number of words; the chat template adds its own tokens, and the report gives the prompt tokens each
  server counted.
- ``prefix-shared``: one long system prompt (``prefix_len`` words) shared by every request, then a
  distinct question, as when many users talk to the same assistant: a server with prefix caching
  computes the shared part once.
- ``FILE.jsonl``: one request a line, ``{"prompt": "..."}`` or ``{"messages": [...]}``, with an
  optional ``"max_tokens"`` (else drawn from the output distribution). Lines are reused in order
  when more requests than lines are asked for.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from engine.bench.errors import BenchError

# Short, frequent words: one token each (with the leading space) in Llama, Qwen, Mistral, GPT and SmolLM
# vocabularies.
WORDS = (
    "the of and to in is was for on that with as by at from his her they this had not are but which "
    "one all were when we there can an your more if has will about out up them what so some would "
    "other into time could these two may first then do any like my now over such our man me even "
    "most made after also did many before must through back years where much way well down should "
    "because each just those people how too little state good very make world still own see men "
    "work long get here between both life being under never day same another know while last might "
    "us great old year off come since against go came right used take three house water small place "
    "light city king river tree road stone green black white red blue cold warm night morning book "
    "song ship horse bird fish field town door table hand face voice"
).split()


@dataclass(frozen=True, slots=True)
class LengthDist:
    """A distribution of lengths in tokens: ``fixed:N``, ``uniform:A-B`` or ``normal:MEAN,SD``."""

    kind: str
    a: float
    b: float = 0.0

    @classmethod
    def parse(cls, text: str) -> LengthDist:
        """Read ``fixed:128``, ``uniform:20-300``, ``normal:200,50`` (or a bare ``128``).

        Raises:
            BenchError: the text is not one of those forms, or a length is below 1.
        """
        raw = text.strip().lower()
        kind, _, rest = raw.partition(":")
        if not rest and kind.isdigit():
            kind, rest = "fixed", kind
        try:
            if kind == "fixed":
                dist = cls("fixed", float(int(rest)))
            elif kind == "uniform":
                lo, hi = rest.split("-")
                dist = cls("uniform", float(int(lo)), float(int(hi)))
                if dist.b < dist.a:
                    raise BenchError(f"Length distribution '{text}': the upper bound is below the lower one.")
            elif kind == "normal":
                mean, sd = rest.split(",")
                dist = cls("normal", float(mean), float(sd))
                if dist.b < 0:
                    raise BenchError(f"Length distribution '{text}': the standard deviation is negative.")
            else:
                raise ValueError(kind)
        except ValueError:
            raise BenchError(
                f"Cannot read the length distribution '{text}'; use fixed:N, uniform:A-B or normal:MEAN,SD."
            ) from None
        if dist.a < 1:
            raise BenchError(f"Length distribution '{text}': lengths start at 1.")
        return dist

    def sample(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            return int(self.a)
        if self.kind == "uniform":
            return rng.randint(int(self.a), int(self.b))
        return max(1, round(rng.gauss(self.a, self.b)))

    def __str__(self) -> str:
        if self.kind == "fixed":
            return f"fixed:{int(self.a)}"
        if self.kind == "uniform":
            return f"uniform:{int(self.a)}-{int(self.b)}"
        return f"normal:{self.a:g},{self.b:g}"


@dataclass(frozen=True, slots=True)
class BenchRequest:
    """One chat request of the workload: its messages, how many tokens to ask for, and the
    input length it was drawn with (words; None for a file's request)."""

    messages: tuple[dict, ...]
    max_tokens: int
    input_len: int | None = None


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def random_requests(
    n: int, input_len: LengthDist, output_len: LengthDist, rng: random.Random
) -> list[BenchRequest]:
    out = []
    for _ in range(n):
        k = input_len.sample(rng)
        out.append(BenchRequest(({"role": "user", "content": _words(rng, k)},), output_len.sample(rng), k))
    return out


def prefix_shared_requests(
    n: int, input_len: LengthDist, output_len: LengthDist, rng: random.Random, *, prefix_len: int
) -> list[BenchRequest]:
    system = "You answer questions about this text. " + _words(rng, prefix_len)
    out = []
    for i in range(n):
        k = input_len.sample(rng)
        question = f"Question {i + 1}: " + _words(rng, k)
        messages = ({"role": "system", "content": system}, {"role": "user", "content": question})
        out.append(BenchRequest(messages, output_len.sample(rng), prefix_len + k))
    return out


def file_requests(path: Path, n: int, output_len: LengthDist, rng: random.Random) -> list[BenchRequest]:
    """Requests from a JSONL file, reused in order when ``n`` is larger than the file.

    Raises:
        BenchError: the file is missing, empty, or a line is not a request.
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise BenchError(f"Cannot read the dataset {path} ({exc.strerror or exc}).") from exc
    items: list[tuple[tuple[dict, ...], int | None]] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BenchError(f"{where} is not JSON ({exc.msg}).") from None
        if not isinstance(row, dict):
            raise BenchError(f"{where} must be an object with 'prompt' or 'messages'.")
        if isinstance(row.get("messages"), list) and row["messages"]:
            messages = tuple(row["messages"])
            if not all(isinstance(m, dict) and "role" in m and "content" in m for m in messages):
                raise BenchError(f"{where}: each message needs a 'role' and a 'content'.")
        elif isinstance(row.get("prompt"), str) and row["prompt"]:
            messages = ({"role": "user", "content": row["prompt"]},)
        else:
            raise BenchError(f"{where} needs a non-empty 'prompt' string or 'messages' list.")
        max_tokens = row.get("max_tokens")
        if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
            raise BenchError(f"{where}: 'max_tokens' must be a whole number from 1.")
        items.append((messages, max_tokens))
    if not items:
        raise BenchError(f"The dataset {path} has no requests.")
    out = []
    for i in range(n):
        messages, max_tokens = items[i % len(items)]
        out.append(BenchRequest(messages, max_tokens if max_tokens is not None else output_len.sample(rng)))
    return out


def build_workload(
    dataset: str,
    n: int,
    *,
    input_len: LengthDist,
    output_len: LengthDist,
    seed: int,
    prefix_len: int = 512,
) -> list[BenchRequest]:
    """``n`` requests of ``dataset`` (``random``, ``prefix-shared`` or a path to a JSONL file).

    The same arguments give the same requests, so every server and every level sees the same work.

    Raises:
        BenchError: an unknown dataset or a bad file.
    """
    rng = random.Random(seed)
    if dataset == "random":
        return random_requests(n, input_len, output_len, rng)
    if dataset == "prefix-shared":
        return prefix_shared_requests(n, input_len, output_len, rng, prefix_len=prefix_len)
    path = Path(dataset).expanduser()
    if path.suffix.lower() == ".jsonl" or path.exists():
        return file_requests(path, n, output_len, rng)
    raise BenchError(f"Unknown dataset '{dataset}'; use random, prefix-shared or a FILE.jsonl.")

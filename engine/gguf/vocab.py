"""A model's vocabulary: text <-> token ids, the bytes of each token, end-of-generation tokens.

Built on the ``tokenizers`` library, from the vocabulary inside a GGUF file or from a Hugging Face
folder's ``tokenizer.json``. Every backend that tokenizes on its own (the paged engine, MLX) uses this
one class, so a GGUF vocabulary tokenizes the same in each of them and as llama.cpp does.

Streaming needs the raw bytes of each token (a multi-byte character may span tokens): through the
GPT-2 byte alphabet for byte-level BPE vocabularies, through SentencePiece's "▁" and ``<0xXX>``
conventions otherwise.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

from engine.chat_template import ChatTemplate
from engine.errors import InvalidRequest, ModelLoadError
from engine.infill import FIM_KEYS, FimTokens
from engine.literal_text import SpecialTexts, encode_marked

log = logging.getLogger(__name__)

PieceStyle = Literal["bytelevel", "spm", "text"]

# GGUF token types (llama.cpp's llama_token_type).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

# Texts llama.cpp treats as end-of-generation besides the declared EOS/EOT ids (llama-vocab.cpp).
EOG_TEXTS = frozenset(
    {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<end_of_turn>", "<|endoftext|>",
        "<|eom_id|>", "<EOT>", "_<EOT>", "<|end▁of▁sentence|>", "<end_of_utterance>", "<|fim_pad|>",
        "<|repo_name|>", "<reponame>", "<|file_sep|>",
    }
)  # fmt: skip

# llama.cpp's split rules for byte-level BPE vocabularies, by `tokenizer.ggml.pre`.
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LETTERS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+"
_TAIL = r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_LLAMA3 = _LETTERS + r"|\p{N}{1,3}" + _TAIL
_QWEN2 = _LETTERS + r"|\p{N}" + _TAIL
PRE_TOKENIZER_RULES: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("gpt2", "gpt-2", "mpt", "olmo", "jais", "default"), (_GPT2,)),
    **dict.fromkeys(
        ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"), (r"\p{N}", _GPT2)
    ),
    **dict.fromkeys(("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral"), (_LLAMA3,)),
    **dict.fromkeys(("qwen2", "stablelm2"), (_QWEN2,)),
}
# Pre-tokenizers whose vocabularies match whole words before applying merges.
IGNORE_MERGES = frozenset({"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral"})

_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def byte_alphabet() -> dict[str, int]:
    """GPT-2's printable stand-in character for each byte -> the byte."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, n = list(keep), 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(keep, chars, strict=True)}


BYTE_DECODER: dict[str, int] = byte_alphabet()


class Vocabulary:
    """Token ids for text, bytes for token ids, end-of-generation tokens and the chat template.

    Args:
        tokenizer: The ``tokenizers`` tokenizer.
        bos_id: The beginning-of-sequence token, or None.
        eos_id: The end-of-sequence token, or None.
        eog_ids: Every token that ends a generation.
        add_bos: Whether prompts start with ``bos_id``.
        special_ids: Control tokens, which stream as no text.
        piece_style: How token texts map to bytes.
        chat_template: The model's chat template source, or None for ChatML.
        fim_meta: A GGUF's declared fill-in-the-middle marker ids (``tokenizer.ggml.fim_*``), if any.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        bos_id: int | None,
        eos_id: int | None,
        eog_ids: Iterable[int],
        add_bos: bool,
        special_ids: Iterable[int],
        piece_style: PieceStyle,
        chat_template: str | None = None,
        fim_meta: Mapping[str, Any] | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.bos_id = bos_id
        self.eos_id = eos_id
        self.eog_ids, shown = _harmony_markers(tokenizer, set(eog_ids))
        self.add_bos = add_bos and bos_id is not None
        self.special_ids = frozenset(special_ids) - shown
        self.piece_style = piece_style
        self.n_vocab = tokenizer.get_vocab_size(with_added_tokens=True)
        # what `encode` reads as tokens only when parsing special texts: the special added tokens
        self.special_texts = SpecialTexts(
            t.content for t in tokenizer.get_added_tokens_decoder().values() if t.special
        )
        self.chat_template = ChatTemplate(
            chat_template, bos_token=self.token_text(bos_id), eos_token=self.token_text(eos_id),
            specials=self.special_texts,
        )
        self._pieces: dict[int, bytes] = {}
        # `encode_special_tokens` is a switch on a tokenizer: text that must not become control tokens (a message's
        # content) is read by a copy with it on, made at first use, so that no call flips a switch another
        # thread's call reads, and tokenizing needs no lock
        self._literal: Tokenizer | None = None
        self._literal_lock = threading.Lock()
        self.fim = FimTokens.find(tokenizer.token_to_id, self.n_vocab, fim_meta)

    @property
    def vocab_size(self) -> int:
        return self.n_vocab

    def token_text(self, token: int | None) -> str:
        """The token as written in the vocabulary (special tokens included); "" for None."""
        if token is None:
            return ""
        return self.tokenizer.id_to_token(token) or ""

    def encode(self, text: str, *, parse_special: bool = True) -> list[int]:
        """Token ids for ``text`` (no BOS); control-token texts become their ids when ``parse_special``.

        Other threads run meanwhile, other tokenizations among them: the tokenizer's batch call lets go of the GIL
        (its single call holds it, and a long prompt stalled every stream of the worker for as long as it took)."""
        tokenizer = self.tokenizer if parse_special else self._literal or self._make_literal()
        return tokenizer.encode_batch([text], add_special_tokens=False)[0].ids

    def _make_literal(self) -> Tokenizer:
        with self._literal_lock:
            if self._literal is None:
                literal = Tokenizer.from_str(self.tokenizer.to_str())
                literal.encode_special_tokens = True
                self._literal = literal
            return self._literal

    def encode_prompt(self, text: str, literal: Sequence[tuple[int, int]] = ()) -> list[int]:
        """Tokens for a rendered prompt: special tokens parsed except in the ``literal`` spans (content's text), BOS
        added once if the model wants it."""
        tokens = encode_marked(text, literal, self.special_texts, lambda t, special: self.encode(t, parse_special=special))
        if self.add_bos and self.bos_id is not None and (not tokens or tokens[0] != self.bos_id):
            tokens.insert(0, self.bos_id)
        return tokens

    def document_start(self) -> list[int]:
        """The token a prompt with none starts from: BOS, else EOS (none where the vocabulary has neither)."""
        start = self.bos_id if self.bos_id is not None else self.eos_id
        return [] if start is None else [start]

    def piece(self, token: int) -> bytes:
        """The bytes one token adds to the output; control tokens add none (as in llama.cpp)."""
        cached = self._pieces.get(token)
        if cached is not None:
            return cached
        if token in self.special_ids:
            out = b""
        else:
            text = self.tokenizer.id_to_token(token) or ""
            if self.piece_style == "bytelevel":
                if all(c in BYTE_DECODER for c in text):
                    out = bytes(BYTE_DECODER[c] for c in text)
                else:  # an added token stored as plain text
                    out = text.encode("utf-8")
            elif self.piece_style == "spm":
                m = _BYTE_TOKEN.match(text)
                out = bytes([int(m.group(1), 16)]) if m else text.replace("▁", " ").encode("utf-8")
            else:
                out = self.tokenizer.decode([token], skip_special_tokens=False).encode("utf-8")
        self._pieces[token] = out
        return out

    def decode(self, tokens: Iterable[int]) -> str:
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", errors="replace")

    def encode_text(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        """``text``'s ids as llama-server's ``/tokenize`` gives them: BOS first where the model wants it and
        ``add_special``, special tokens' texts read as those tokens where ``parse_special``."""
        ids = self.encode(text, parse_special=parse_special)
        if add_special and self.add_bos and self.bos_id is not None:
            ids.insert(0, self.bos_id)
        return ids

    def token_bytes(self, tokens: Iterable[int]) -> list[bytes]:
        """Each token's bytes, control tokens spelled out.

        Raises:
            InvalidRequest: an id is not in the vocabulary.
        """
        out = []
        for t in tokens:
            if not 0 <= t < self.n_vocab:
                raise InvalidRequest(f"Token {t} is not in this model's vocabulary (ids 0 to {self.n_vocab - 1}).", param="tokens")
            out.append(self.token_text(t).encode() if t in self.special_ids else self.piece(t))
        return out


# -- from a GGUF file's metadata ---------------------------------------------------------------


def vocabulary_from_gguf(path: Path | str, meta: Mapping[str, Any]) -> Vocabulary:
    """The vocabulary stored in a GGUF file's metadata (plain Python values, as
    :func:`engine.gguf.reader.read_metadata` gives them).

    Raises:
        ModelLoadError: the file has no vocabulary, or one of a kind Hearth cannot rebuild.
    """
    kind = str(meta.get("tokenizer.ggml.model", "gpt2"))
    tokens = [str(t) for t in meta.get("tokenizer.ggml.tokens") or ()]
    if not tokens:
        raise ModelLoadError(str(path), "the file holds no tokenizer vocabulary.")
    types = [int(t) for t in meta.get("tokenizer.ggml.token_type") or [NORMAL] * len(tokens)]
    control = [i for i, t in enumerate(types) if t == CONTROL]
    user = [i for i, t in enumerate(types) if t == USER_DEFINED]
    bos = _int(meta.get("tokenizer.ggml.bos_token_id"))
    eos = _int(meta.get("tokenizer.ggml.eos_token_id"))
    declared = (eos, _int(meta.get("tokenizer.ggml.eot_token_id")), _int(meta.get("tokenizer.ggml.eom_token_id")))
    if kind == "gpt2":
        tokenizer = _byte_level_bpe(
            tokens, [str(m) for m in meta.get("tokenizer.ggml.merges") or ()], str(meta.get("tokenizer.ggml.pre", ""))
        )
        style: PieceStyle = "bytelevel"
        add_bos_default = False
    elif kind == "llama":
        scores = [float(s) for s in meta.get("tokenizer.ggml.scores") or [0.0] * len(tokens)]
        tokenizer = _sentencepiece_bpe(tokens, scores, bool(meta.get("tokenizer.ggml.add_space_prefix", True)))
        style = "spm"
        add_bos_default = True
    else:
        raise ModelLoadError(
            str(path), f"Hearth cannot rebuild its '{kind}' tokenizer here; run the file on the llama.cpp backend."
        )
    if control:
        tokenizer.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False) for i in control])
    if user:
        tokenizer.add_tokens([AddedToken(tokens[i], special=False, normalized=False) for i in user])
    add_bos = meta.get("tokenizer.ggml.add_bos_token")
    template = meta.get("tokenizer.chat_template")
    return Vocabulary(
        tokenizer,
        bos_id=bos,
        eos_id=eos,
        eog_ids=_eog_ids(tokens, control + user, declared),
        add_bos=add_bos_default if add_bos is None else bool(add_bos),
        special_ids=control,
        piece_style=style,
        chat_template=str(template) if template else None,
        fim_meta={k: _int(meta.get(k)) for keys in FIM_KEYS.values() for k in keys if meta.get(k) is not None},
    )


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


#: gpt-oss's harmony markers: control tokens its answers are written with, shown as text (as llama.cpp shows
#: them) for engine.tools.harmony to read.
HARMONY_MARKERS = ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>")


def _harmony_markers(tokenizer: Tokenizer, eog: set[int]) -> tuple[frozenset[int], frozenset[int]]:
    """The end-of-generation ids and the control tokens shown as text. In a harmony vocabulary (``<|return|>``,
    ``<|call|>`` and ``<|end|>`` all ending generations) ``<|end|>`` only closes a message: the answer goes on
    after its thinking, as llama.cpp has it."""
    shown = {i for text in HARMONY_MARKERS if (i := tokenizer.token_to_id(text)) is not None}
    done, call, end = (tokenizer.token_to_id(text) for text in ("<|return|>", "<|call|>", "<|end|>"))
    if done in eog and call in eog and end is not None and end in eog:
        eog.discard(end)
        shown.add(end)
    return frozenset(eog), frozenset(shown)


def _eog_ids(tokens: Sequence[str], specials: Iterable[int], declared: Iterable[int | None]) -> set[int]:
    out = {t for t in declared if t is not None and 0 <= t < len(tokens)}
    out.update(t for t in specials if tokens[t] in EOG_TEXTS)
    return out


def _byte_level_bpe(tokens: list[str], merges: list[str], pre: str) -> Tokenizer:
    rules = PRE_TOKENIZER_RULES.get(pre)
    if rules is None:
        log.warning("unknown GGUF pre-tokenizer '%s'; splitting words the GPT-2 way", pre)
        rules = (_GPT2,)
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    model = models.BPE(
        vocab={t: i for i, t in enumerate(tokens)},
        merges=[p for p in pairs if len(p) == 2],
        ignore_merges=pre in IGNORE_MERGES,
    )
    tokenizer = Tokenizer(model)
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in rules]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def _sentencepiece_bpe(tokens: list[str], scores: list[float], add_space_prefix: bool) -> Tokenizer:
    tokenizer = Tokenizer(
        models.BPE(
            {t: i for i, t in enumerate(tokens)}, spm_merges(tokens, scores),
            unk_token=tokens[0], byte_fallback=True, fuse_unk=True,
        )
    )  # fmt: skip
    norm: list[normalizers.Normalizer] = [normalizers.Replace(" ", "▁")]
    if add_space_prefix:
        norm.insert(0, normalizers.Prepend("▁"))
    tokenizer.normalizer = normalizers.Sequence(norm)
    tokenizer.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    return tokenizer


def spm_merges(tokens: list[str], scores: list[float]) -> list[tuple[str, str]]:
    """BPE merges implied by a SentencePiece vocabulary: a pair merges if the joined piece exists,
    earlier for a higher-scored piece."""
    vocab = {t: i for i, t in enumerate(tokens)}
    found = []
    for piece, pid in vocab.items():
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in vocab and right in vocab:
                found.append((-scores[pid], vocab[left], vocab[right], left, right))
    found.sort()
    return [(left, right) for *_, left, right in found]


# -- from a Hugging Face folder ----------------------------------------------------------------


def _decoder_kinds(node: Any) -> Iterable[str]:
    if isinstance(node, Mapping):
        if "type" in node:
            yield str(node["type"])
        for child in node.get("decoders") or ():
            yield from _decoder_kinds(child)


def piece_style_of(tokenizer: Tokenizer) -> PieceStyle:
    """How a token's text maps to bytes, read from the tokenizer's decoder."""
    kinds = set(_decoder_kinds(json.loads(tokenizer.to_str()).get("decoder")))
    if "ByteLevel" in kinds:
        return "bytelevel"
    if kinds & {"ByteFallback", "Metaspace", "Replace"}:
        return "spm"
    return "text"


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(str(path), f"it is not valid JSON ({exc}).") from exc
    return data if isinstance(data, dict) else {}


def _token_content(value: Any) -> str | None:
    if isinstance(value, Mapping):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _ids(value: Any) -> list[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, int) and not isinstance(v, bool)]
    return []


def folder_chat_template(folder: Path, tokenizer_config: Mapping[str, Any]) -> str | None:
    """The chat template a Hugging Face folder ships, from any of the places one may lie."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    source = tokenizer_config.get("chat_template") or _read_json(folder / "chat_template.json").get(
        "chat_template"
    )
    if isinstance(source, list):  # named templates: use the default one
        named = {t.get("name"): t.get("template") for t in source if isinstance(t, Mapping)}
        source = named.get("default") or next(iter(named.values()), None)
    return source if isinstance(source, str) and source else None


def vocabulary_from_folder(folder: Path, *, allow_slow: bool = True) -> Vocabulary:
    """The vocabulary of a Hugging Face or MLX model folder.

    Args:
        folder: The model folder.
        allow_slow: Whether a folder without ``tokenizer.json`` may be converted through transformers.

    Raises:
        ModelLoadError: the folder has no tokenizer Hearth can read.
    """
    folder = Path(folder)
    tok_config = _read_json(folder / "tokenizer_config.json")
    if (folder / "tokenizer.json").is_file():
        try:
            tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        except Exception as exc:  # the Rust library raises plain Exceptions
            raise ModelLoadError(str(folder / "tokenizer.json"), f"the tokenizer could not be read ({exc}).") from exc
    elif not allow_slow:
        raise ModelLoadError(str(folder), "tokenizer.json is missing; this engine needs the fast tokenizer file.")
    else:
        try:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(folder)).backend_tokenizer
        except Exception as exc:  # transformers raises many types for folders it cannot read
            raise ModelLoadError(str(folder), f"it has no tokenizer Hearth can read ({exc}).") from exc
    specials = [i for i, t in tokenizer.get_added_tokens_decoder().items() if t.special]
    bos_text = _token_content(tok_config.get("bos_token"))
    eos_text = _token_content(tok_config.get("eos_token"))
    bos = tokenizer.token_to_id(bos_text) if bos_text else None
    eos = tokenizer.token_to_id(eos_text) if eos_text else None
    config = _read_json(folder / "config.json")
    config = config.get("text_config", config) if "model_type" not in config else config
    generation = _read_json(folder / "generation_config.json")
    if bos is None:
        bos = next(iter(_ids(config.get("bos_token_id"))), None)
    declared = [eos, *_ids(config.get("eos_token_id")), *_ids(generation.get("eos_token_id"))]
    if eos is None:
        eos = next((t for t in declared if t is not None), None)
    if "add_bos_token" in tok_config and tok_config["add_bos_token"] is not None:
        add_bos = bool(tok_config["add_bos_token"])
    else:  # no flag: does the tokenizer's own post-processor put BOS first?
        add_bos = bos is not None and tokenizer.encode("a", add_special_tokens=True).ids[:1] == [bos]
    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    names = [tokenizer.id_to_token(i) or "" for i in range(vocab_size)]
    return Vocabulary(
        tokenizer,
        bos_id=bos,
        eos_id=eos,
        eog_ids=_eog_ids(names, specials, declared),
        add_bos=add_bos,
        special_ids=specials,
        piece_style=piece_style_of(tokenizer),
        chat_template=folder_chat_template(folder, tok_config),
    )


__all__ = [
    "Vocabulary", "vocabulary_from_gguf", "vocabulary_from_folder", "folder_chat_template", "piece_style_of",
    "byte_alphabet", "spm_merges", "EOG_TEXTS", "PRE_TOKENIZER_RULES",
]  # fmt: skip

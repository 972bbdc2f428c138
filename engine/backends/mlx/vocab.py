"""A model's vocabulary for the MLX backend: text <-> token ids, token bytes, chat template.

Built on the ``tokenizers`` library, from a model folder's ``tokenizer.json`` or from the
vocabulary inside a GGUF file. A GGUF byte-level BPE vocabulary is rebuilt directly (fast,
with llama.cpp's pre-tokenizer rules); other GGUF vocabularies go through transformers.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from tokenizers import AddedToken, Regex, Tokenizer, decoders, pre_tokenizers
from tokenizers.models import BPE

from engine.chat_template import ChatTemplate
from engine.errors import ModelLoadError

log = logging.getLogger(__name__)

PieceStyle = Literal["bytelevel", "spm", "text"]

# GGUF token types (gguf-py's TokenType).
TOKEN_CONTROL = 3
TOKEN_USER_DEFINED = 4

# Texts llama.cpp treats as end-of-generation besides the declared EOS/EOT ids (llama-vocab.cpp).
EOG_TEXTS = frozenset(
    {
        "<|eot_id|>",
        "<|im_end|>",
        "<|end|>",
        "<|return|>",
        "<|call|>",
        "<end_of_turn>",
        "<|endoftext|>",
        "<|eom_id|>",
        "<EOT>",
        "_<EOT>",
        "<|end▁of▁sentence|>",
        "<end_of_utterance>",
        "<|fim_pad|>",
        "<|repo_name|>",
        "<reponame>",
        "<|file_sep|>",
    }
)

# llama.cpp's split rules for byte-level BPE vocabularies, by `tokenizer.ggml.pre`.
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3 = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2 = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
PRE_TOKENIZER_RULES: dict[str, tuple[str, ...]] = {
    "gpt2": (_GPT2,),
    "gpt-2": (_GPT2,),
    "mpt": (_GPT2,),
    "olmo": (_GPT2,),
    "jais": (_GPT2,),
    "smollm": (r"\p{N}", _GPT2),
    "starcoder": (r"\p{N}", _GPT2),
    "refact": (r"\p{N}", _GPT2),
    "command-r": (r"\p{N}", _GPT2),
    "codeshell": (r"\p{N}", _GPT2),
    "exaone": (r"\p{N}", _GPT2),
    "minerva-7b": (r"\p{N}", _GPT2),
    "llama3": (_LLAMA3,),
    "llama-v3": (_LLAMA3,),
    "llama-bpe": (_LLAMA3,),
    "falcon3": (_LLAMA3,),
    "falcon-h1": (_LLAMA3,),
    "pixtral": (_LLAMA3,),
    "qwen2": (_QWEN2,),
    "stablelm2": (_QWEN2,),
}
# Pre-tokenizers whose vocabularies match whole words before applying merges.
IGNORE_MERGES = frozenset({"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral"})

_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = list(keep)
    n = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(keep, chars, strict=True)}


BYTE_DECODER: dict[str, int] = {c: b for b, c in _bytes_to_unicode().items()}


def _decoder_kinds(node: Any) -> Iterable[str]:
    if isinstance(node, Mapping):
        if "type" in node:
            yield str(node["type"])
        for child in node.get("decoders") or ():
            yield from _decoder_kinds(child)


def piece_style_of(tokenizer: Tokenizer) -> PieceStyle:
    """How a token's text maps to bytes, read from the tokenizer's decoder."""
    decoder = json.loads(tokenizer.to_str()).get("decoder")
    kinds = set(_decoder_kinds(decoder))
    if "ByteLevel" in kinds:
        return "bytelevel"
    if kinds & {"ByteFallback", "Metaspace", "Replace"}:
        return "spm"
    return "text"


class Vocabulary:
    """Token ids for text, bytes for token ids, and the model's chat template.

    Args:
        tokenizer: The model's tokenizer.
        bos_id: The beginning-of-sequence token, or None.
        eos_id: The end-of-sequence token, or None.
        eog_ids: Every token that ends a generation.
        add_bos: Whether prompts start with ``bos_id``.
        special_ids: Control tokens, which stream as no text.
        piece_style: How token texts map to bytes.
        chat_template: The model's chat template source, or None for ChatML.
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
        chat_template: str | None,
    ) -> None:
        self.tokenizer = tokenizer
        self.bos_id = bos_id
        self.eos_id = eos_id
        self.eog_ids = frozenset(eog_ids)
        self.add_bos = add_bos
        self.special_ids = frozenset(special_ids)
        self.piece_style = piece_style
        self.n_vocab = tokenizer.get_vocab_size(with_added_tokens=True)
        self.chat_template = ChatTemplate(
            chat_template, bos_token=self.token_text(bos_id), eos_token=self.token_text(eos_id)
        )
        self._pieces: dict[int, bytes] = {}
        # `encode_special_tokens` is a switch on the shared tokenizer: flip it under a lock.
        self._lock = threading.Lock()

    def token_text(self, token: int | None) -> str:
        if token is None:
            return ""
        return self.tokenizer.id_to_token(token) or ""

    def encode(self, text: str, *, parse_special: bool = True) -> list[int]:
        """Token ids for ``text``; control-token texts become their ids when ``parse_special``."""
        with self._lock:
            self.tokenizer.encode_special_tokens = not parse_special
            try:
                return self.tokenizer.encode(text, add_special_tokens=False).ids
            finally:
                self.tokenizer.encode_special_tokens = False

    def encode_prompt(self, text: str) -> list[int]:
        """Tokens for a rendered prompt: special tokens parsed, BOS added once if the model wants it."""
        tokens = self.encode(text, parse_special=True)
        if self.add_bos and self.bos_id is not None and (not tokens or tokens[0] != self.bos_id):
            tokens.insert(0, self.bos_id)
        return tokens

    def piece(self, token: int) -> bytes:
        """The bytes one token stands for; control tokens stand for none (as in llama.cpp)."""
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

    def detokenize(self, tokens: Iterable[int]) -> str:
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", errors="replace")


def _eog_ids(tokens: list[str], specials: Iterable[int], declared: Iterable[int | None]) -> set[int]:
    out = {t for t in declared if t is not None and 0 <= t < len(tokens)}
    out.update(t for t in specials if tokens[t] in EOG_TEXTS)
    return out


def _meta_int(meta: Mapping[str, Any], key: str) -> int | None:
    value = meta.get(key)
    if value is None:
        return None
    return int(value.item() if hasattr(value, "item") else value)


def _meta_bool(meta: Mapping[str, Any], key: str, default: bool) -> bool:
    value = meta.get(key)
    if value is None:
        return default
    return bool(value.item() if hasattr(value, "item") else value)


def vocabulary_from_gguf(path: Path, meta: Mapping[str, Any]) -> Vocabulary:
    """The vocabulary stored in a GGUF file's metadata (as read by ``mx.load``).

    Raises:
        ModelLoadError: the file has no vocabulary, or one of a kind Hearth cannot rebuild.
    """
    kind = str(meta.get("tokenizer.ggml.model", ""))
    tokens = list(meta.get("tokenizer.ggml.tokens") or [])
    if not tokens:
        raise ModelLoadError(str(path), "the file holds no tokenizer vocabulary.")
    types = (
        [int(t) for t in meta["tokenizer.ggml.token_type"].tolist()]
        if "tokenizer.ggml.token_type" in meta
        else []
    )
    control = [i for i, t in enumerate(types) if t == TOKEN_CONTROL]
    user = [i for i, t in enumerate(types) if t == TOKEN_USER_DEFINED]
    bos = _meta_int(meta, "tokenizer.ggml.bos_token_id")
    eos = _meta_int(meta, "tokenizer.ggml.eos_token_id")
    declared = (
        eos,
        _meta_int(meta, "tokenizer.ggml.eot_token_id"),
        _meta_int(meta, "tokenizer.ggml.eom_token_id"),
    )
    template = meta.get("tokenizer.chat_template")
    template = str(template) if template else None
    if kind == "gpt2":
        tokenizer = _byte_level_bpe(
            tokens, list(meta.get("tokenizer.ggml.merges") or []), str(meta.get("tokenizer.ggml.pre", ""))
        )
        style: PieceStyle = "bytelevel"
        add_bos_default = False
    elif kind == "llama":
        tokenizer = _through_transformers(path)
        style = "spm"
        add_bos_default = True
    else:
        raise ModelLoadError(
            str(path),
            f"the mlx backend cannot read its '{kind}' tokenizer; use the llama.cpp backend for this file.",
        )
    if control:
        tokenizer.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False) for i in control])
    if user:
        tokenizer.add_tokens([AddedToken(tokens[i], special=False, normalized=False) for i in user])
    return Vocabulary(
        tokenizer,
        bos_id=bos,
        eos_id=eos,
        eog_ids=_eog_ids(tokens, control + user, declared),
        add_bos=_meta_bool(meta, "tokenizer.ggml.add_bos_token", add_bos_default),
        special_ids=control,
        piece_style=style,
        chat_template=template,
    )


def _byte_level_bpe(tokens: list[str], merges: list[str], pre: str) -> Tokenizer:
    rules = PRE_TOKENIZER_RULES.get(pre)
    if rules is None:
        log.warning("unknown GGUF pre-tokenizer '%s'; splitting words the GPT-2 way", pre)
        rules = (_GPT2,)
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    model = BPE(
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


def _through_transformers(path: Path) -> Tokenizer:
    """A SentencePiece-style GGUF vocabulary, converted by transformers (slower, but exact)."""
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name).backend_tokenizer
    except Exception as exc:  # transformers raises many types for files it cannot convert
        raise ModelLoadError(str(path), f"its tokenizer could not be read ({exc}).") from exc


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


def vocabulary_from_folder(folder: Path) -> Vocabulary:
    """The vocabulary of a Hugging Face or MLX model folder.

    Raises:
        ModelLoadError: the folder has no tokenizer Hearth can read.
    """
    tok_config = _read_json(folder / "tokenizer_config.json")
    if (folder / "tokenizer.json").is_file():
        try:
            tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        except Exception as exc:  # the Rust library raises plain Exceptions
            raise ModelLoadError(
                str(folder / "tokenizer.json"), f"the tokenizer could not be read ({exc})."
            ) from exc
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
    generation = _read_json(folder / "generation_config.json")
    if bos is None:
        bos = next(iter(_ids(config.get("bos_token_id"))), None)
    declared = [eos, *_ids(config.get("eos_token_id")), *_ids(generation.get("eos_token_id"))]
    if eos is None:
        eos = next((t for t in declared if t is not None), None)
    if "add_bos_token" in tok_config:
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


__all__ = ["Vocabulary", "vocabulary_from_gguf", "vocabulary_from_folder", "piece_style_of", "EOG_TEXTS"]

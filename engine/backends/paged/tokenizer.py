"""Text <-> token ids with the `tokenizers` library, from a Hugging Face tokenizer.json or a GGUF vocabulary.

Streaming needs the raw bytes of each token (a multi-byte character may span tokens), so the
tokenizer also maps every id to its byte piece: through the GPT-2 byte alphabet for byte-level
BPE vocabularies, or through SentencePiece's "▁" and ``<0xXX>`` conventions otherwise.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence

import tokenizers
from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers

# GGUF token types (llama.cpp's llama_token_type)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

# llama.cpp's pre-tokenizer regexes by `tokenizer.ggml.pre`
_LETTERS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+"
_TAIL = r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
PRE_REGEX = {
    "llama-bpe": _LETTERS + r"|\p{N}{1,3}" + _TAIL,
    "llama3": _LETTERS + r"|\p{N}{1,3}" + _TAIL,
    "qwen2": _LETTERS + r"|\p{N}" + _TAIL,
}


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


class Tokenizer:
    """A model's tokenizer plus what streaming and chat need (byte pieces, BOS, EOS).

    Args:
        backend: The `tokenizers` tokenizer.
        byte_level: Whether token strings are in GPT-2's byte alphabet (else SentencePiece style).
        bos_id: Beginning-of-sequence id, or None.
        eos_ids: Ids that end generation.
        add_bos: Whether prompts start with BOS.
    """

    def __init__(
        self, backend: tokenizers.Tokenizer, *, byte_level: bool, bos_id: int | None, eos_ids: Sequence[int], add_bos: bool
    ) -> None:
        self.backend = backend
        self.byte_level = byte_level
        self.bos_id = bos_id
        self.eos_ids = tuple(dict.fromkeys(int(e) for e in eos_ids))
        self.add_bos = add_bos and bos_id is not None
        self.vocab_size = backend.get_vocab_size(with_added_tokens=True)
        self._special = {t.content for t in backend.get_added_tokens_decoder().values() if t.special}
        self._bytes = byte_alphabet() if byte_level else {}
        self._pieces: dict[int, bytes] = {}
        self._lock = threading.Lock()

    def encode(self, text: str, *, parse_special: bool = True) -> list[int]:
        """Token ids of ``text`` (no BOS); special-token text is parsed as such only when asked."""
        with self._lock:  # encode_special_tokens is a flag on the shared tokenizer
            self.backend.encode_special_tokens = not parse_special
            return self.backend.encode(text, add_special_tokens=False).ids

    def encode_prompt(self, text: str) -> list[int]:
        """Tokens for a rendered prompt: special tokens parsed, BOS added once if the model wants it."""
        ids = self.encode(text, parse_special=True)
        if self.add_bos and (not ids or ids[0] != self.bos_id):
            ids.insert(0, self.bos_id)
        return ids

    def token_text(self, token: int) -> str:
        """The token as written in the vocabulary (special tokens included)."""
        return self.backend.id_to_token(token) or ""

    def piece(self, token: int) -> bytes:
        """The bytes ``token`` adds to the output text (b"" for control tokens)."""
        cached = self._pieces.get(token)
        if cached is not None:
            return cached
        text = self.backend.id_to_token(token) or ""
        if text in self._special:
            out = b""
        elif self.byte_level:
            out = bytes(self._bytes[c] for c in text) if all(c in self._bytes for c in text) else text.encode()
        elif len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
            out = bytes([int(text[3:5], 16)])
        else:
            out = text.replace("▁", " ").encode()
        self._pieces[token] = out
        return out

    def decode(self, tokens: Sequence[int]) -> str:
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", errors="replace")

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def from_hf_json(
        cls, path: str, *, bos_token: str | None, eos_tokens: Sequence[str | int], add_bos: bool | None = None
    ) -> Tokenizer:
        backend = tokenizers.Tokenizer.from_file(path)
        decoder = json.dumps(json.loads(backend.to_str()).get("decoder") or {})
        bos_id = backend.token_to_id(bos_token) if bos_token else None
        eos_ids = [e if isinstance(e, int) else backend.token_to_id(e) for e in eos_tokens]
        if add_bos is None and bos_id is not None:  # does the post-processor put BOS in front?
            add_bos = backend.encode("a", add_special_tokens=True).ids[:1] == [bos_id]
        return cls(
            backend, byte_level='"ByteLevel"' in decoder, bos_id=bos_id,
            eos_ids=[e for e in eos_ids if e is not None], add_bos=bool(add_bos),
        )  # fmt: skip

    @classmethod
    def from_gguf_vocab(
        cls,
        *,
        kind: str,
        tokens: list[str],
        token_types: list[int],
        merges: list[str],
        scores: list[float],
        pre: str,
        bos_id: int | None,
        eos_ids: Sequence[int],
        add_bos: bool,
        add_space_prefix: bool,
    ) -> Tokenizer:
        """Rebuild a GGUF file's tokenizer: ``gpt2`` (byte-level BPE) or ``llama`` (SentencePiece BPE)."""
        vocab = {t: i for i, t in enumerate(tokens)}
        if kind == "gpt2":
            pairs = [tuple(m.split(" ", 1)) for m in merges]
            backend = tokenizers.Tokenizer(models.BPE(vocab, pairs, ignore_merges=pre in ("llama-bpe", "llama3")))
            byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=pre not in PRE_REGEX)
            steps = [byte_level]
            if pre in PRE_REGEX:
                steps.insert(0, pre_tokenizers.Split(Regex(PRE_REGEX[pre]), behavior="isolated"))
            elif pre == "smollm":
                steps.insert(0, pre_tokenizers.Digits(individual_digits=True))
            backend.pre_tokenizer = pre_tokenizers.Sequence(steps)
            backend.decoder = decoders.ByteLevel()
        elif kind == "llama":
            backend = tokenizers.Tokenizer(
                models.BPE(vocab, spm_merges(tokens, scores), unk_token=tokens[0], byte_fallback=True, fuse_unk=True)
            )
            norm = [normalizers.Replace(" ", "▁")]
            if add_space_prefix:
                norm.insert(0, normalizers.Prepend("▁"))
            backend.normalizer = normalizers.Sequence(norm)
            backend.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
        else:
            raise ValueError(f"tokenizer model '{kind}' is not supported (only gpt2 and llama)")
        special = [i for i, t in enumerate(token_types) if t == CONTROL]
        user = [i for i, t in enumerate(token_types) if t == USER_DEFINED]
        backend.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False) for i in special])
        backend.add_tokens([AddedToken(tokens[i], special=False, normalized=False) for i in user])
        return cls(backend, byte_level=kind == "gpt2", bos_id=bos_id, eos_ids=eos_ids, add_bos=add_bos)


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


__all__ = ["Tokenizer", "byte_alphabet", "spm_merges"]

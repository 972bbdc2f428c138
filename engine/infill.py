"""Fill in the middle: the prompt a code model completes the text between a prefix and a suffix from.

A code model trained for it (Qwen2.5-Coder, CodeLlama, StarCoder2, DeepSeek-Coder, Codestral, Granite) reads
``[FIM_PRE] prefix [FIM_SUF] suffix [FIM_MID]`` and writes what goes between. Editors' completion plugins ask
for it through Ollama's ``/api/generate`` ``suffix``, OpenAI's ``/v1/completions`` ``suffix`` and
llama-server's ``/infill`` (with other files of the project as ``input_extra``). Every backend builds the prompt
here, from its vocabulary's markers found as llama.cpp finds them (the GGUF's ``tokenizer.ggml.fim_*`` ids,
else the tokens' texts), so one request gives one prompt on any backend:

    [BOS] [FIM_REP] myproject\\n ([FIM_SEP] filename\\n text)... [FIM_SEP] filename\\n
    [FIM_PRE] prefix prompt [FIM_SUF] suffix [FIM_MID]

(the repository part only where the vocabulary has those markers, and where the request gives other files or is
llama-server's ``/infill``, which always opens with it; without ``FIM_SEP`` each file follows a
``--- snippet ---`` line). The code's text is read as text: a marker written in
a file is not a control token. Long texts are cut where they matter least, as llama-server cuts them: the
prefix keeps its end, the suffix its start, and the other files what the context has left. Unlike llama-server,
BOS (where the model takes one) opens the prompt, before the other files, and the typed text is read as text.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from engine.errors import InvalidRequest

#: The texts of each marker, as llama.cpp recognises them (src/llama-vocab.cpp).
FIM_TEXTS: dict[str, tuple[str, ...]] = {
    "pre": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>",
            "<|prefix|>"),  # fmt: skip
    "suf": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>",
            "<|suffix|>"),  # fmt: skip
    "mid": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>",
            "<|middle|>"),  # fmt: skip
    "pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "sep": ("<|file_sep|>",),
}

#: GGUF metadata keys of each marker's id (the older names last).
FIM_KEYS: dict[str, tuple[str, ...]] = {
    "pre": ("tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id"),
    "suf": ("tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id"),
    "mid": ("tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id"),
    "pad": ("tokenizer.ggml.fim_pad_token_id",),
    "rep": ("tokenizer.ggml.fim_rep_token_id",),
    "sep": ("tokenizer.ggml.fim_sep_token_id",),
}

#: The tokens the prefix and suffix share (llama-server's default batch): three quarters for the prefix.
BATCH = 2048
#: The project's name after FIM_REP, as llama-server writes it.
REPO_NAME = "myproject\n"
#: What stands before each other file where the vocabulary has no FIM_SEP.
SNIPPET = "\n\n--- snippet ---\n\n"
#: The name of a file given without one (llama-server's), and of the file being completed.
DEFAULT_FILENAME = "tmp"
CURRENT_FILENAME = "filename"
#: Characters read of a long prefix's end (a suffix's start) per token kept: a text of megabytes is not
#: tokenized whole for the 1,536 tokens it gives (a cut that gives too few is read whole after all).
CHARS_PER_TOKEN = 16


@dataclass(frozen=True, slots=True)
class FimTokens:
    """A vocabulary's fill-in-the-middle markers (``rep``, ``sep``, ``pad``: None where it has none)."""

    pre: int
    suf: int
    mid: int
    pad: int | None = None
    rep: int | None = None
    sep: int | None = None

    @classmethod
    def find(cls, token_id: Callable[[str], int | None], n_vocab: int, meta: Mapping[str, object] | None = None
             ) -> FimTokens | None:  # fmt: skip
        """The markers of a vocabulary of ``n_vocab`` tokens whose ``token_id`` gives a text's id (None: not a
        token), the GGUF's declared ids (``meta``) first; None when it lacks any of prefix, suffix and middle."""
        found: dict[str, int | None] = {}
        for kind, texts in FIM_TEXTS.items():
            declared = next((meta[k] for k in FIM_KEYS[kind] if meta is not None and meta.get(k) is not None), None)
            if isinstance(declared, int) and 0 <= declared < n_vocab:
                found[kind] = declared
                continue
            found[kind] = next((i for t in texts if (i := token_id(t)) is not None), None)
        pre, suf, mid = found["pre"], found["suf"], found["mid"]
        if pre is None or suf is None or mid is None:
            return None
        return cls(pre, suf, mid, pad=found["pad"], rep=found["rep"], sep=found["sep"])


@dataclass(frozen=True, slots=True)
class Infill:
    """What to fill in: the text before the gap and after it, other files of the project as context
    (``(filename, text)`` pairs, the most relevant last), and whether the prompt opens with the repository frame
    (``project``: as llama-server's ``/infill`` writes it, even without other files; Ollama's and OpenAI's
    ``suffix`` prompt is the plain one)."""

    prefix: str
    suffix: str
    extra: tuple[tuple[str, str], ...] = ()
    project: bool = False


#: How much of a GGUF file :func:`file_has_markers` reads: its header with the vocabulary (Qwen's 151k tokens and
#: their merges are about 6 MB).
HEADER_BYTES = 32 << 20


def file_has_markers(path: Path) -> bool:
    """Whether the model at ``path`` (a GGUF file, or a folder with tokenizer.json) has the prefix, suffix and
    middle markers, read from its bytes without building its vocabulary (Ollama's ``insert`` capability); read
    once per version of the file (``/api/show`` and an editor's ``/infill`` ask often)."""
    try:
        st = (path / "tokenizer.json").stat() if path.is_dir() and (path / "tokenizer.json").exists() else path.stat()
    except OSError:
        return False
    return _read_markers(path, st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=128)
def _read_markers(path: Path, size: int, mtime_ns: int) -> bool:
    try:
        if path.is_dir():
            data = b"".join((path / n).read_bytes() for n in ("tokenizer.json", "tokenizer_config.json") if (path / n).is_file())
            spell = lambda text: json.dumps(text, ensure_ascii=False).encode()  # noqa: E731 - a JSON string, quotes and all
        elif path.is_file():  # a regular file: a pipe or device put in its place is never read
            with open(path, "rb") as f:
                data = f.read(HEADER_BYTES)
            spell = lambda text: struct.pack("<Q", len(text.encode())) + text.encode()  # noqa: E731 - a GGUF string
        else:
            return False
    except OSError:
        return False
    escaped = lambda text: json.dumps(text).encode()  # noqa: E731 - as a writer that escapes non-ASCII spells it
    return all(
        any(key.encode() in data for key in FIM_KEYS[kind])
        or any(spell(t) in data or (path.is_dir() and escaped(t) in data) for t in FIM_TEXTS[kind])
        for kind in ("pre", "suf", "mid")
    )


def no_infill(model: str) -> InvalidRequest:
    """The refusal for a model without the markers (Ollama's words first: "does not support insert")."""
    return InvalidRequest(
        f"Model '{model}' does not support insert (fill in the middle): its vocabulary has no prefix, suffix and "
        "middle markers; name a code model trained for it in 'model', such as Qwen2.5-Coder, CodeLlama, StarCoder2 "
        "or DeepSeek-Coder.",
        param="suffix",
    )


def _cut(text: str, n: int, encode: Callable[[str], list[int]], *, end: bool) -> list[int]:
    """The last (``end``) or first ``n`` tokens of ``text``, read from that end only when that gives them with
    room to spare (the tokens at a cut may differ from the whole text's: they are left well outside the ``n``)."""
    if n <= 0 or not text:
        return []
    reach = (n + 64) * CHARS_PER_TOKEN
    if len(text) > reach:
        ids = encode(text[-reach:] if end else text[:reach])
        if len(ids) >= n + 64:
            return ids[-n:] if end else ids[:n]
    ids = encode(text)
    return ids[-n:] if end else ids[:n]


def infill_tokens(
    infill: Infill,
    prompt: str,
    *,
    fim: FimTokens,
    encode: Callable[[str], list[int]],
    bos: int | None,
    n_ctx: int,
) -> list[int]:
    """The token ids of the infill prompt (see the module). ``encode`` reads text as text (no control tokens,
    no BOS); ``prompt`` is text typed at the gap, after the prefix (read as text too).

    A quarter of the context is left to the answer. The prefix keeps its last three quarters of a budget of
    ``BATCH`` tokens (less on a small context), the suffix its first quarter less 2 and the typed text, as
    llama-server cuts them; the other files fill the rest of the context whatever the prefix's and suffix's
    lengths, the nearest to the gap kept, so that the prompt's start (the files) stays the same from one
    keystroke to the next and is read from the prefix cache."""
    head = [bos] if bos is not None else []
    typed = encode(prompt) if prompt else []
    fixed = len(head) + 3
    batch = max(0, min(BATCH, n_ctx - n_ctx // 4 - fixed))
    take_prefix, take_suffix = 3 * (batch // 4), max(0, batch // 4 - 2 - len(typed))
    prefix = _cut(infill.prefix, take_prefix, encode, end=True)
    suffix = _cut(infill.suffix, take_suffix, encode, end=False)
    extra: list[int] = []
    if infill.extra or infill.project:
        if fim.rep is not None:
            extra += [fim.rep, *encode(REPO_NAME)]
        for filename, text in infill.extra:
            extra += [fim.sep, *encode(filename + "\n")] if fim.sep is not None else encode(SNIPPET)
            extra += encode(text) if text else []
        if fim.sep is not None:
            extra += [fim.sep, *encode(CURRENT_FILENAME + "\n")]
    room = max(0, n_ctx - n_ctx // 4 - fixed - batch)
    extra = extra[len(extra) - room :] if room < len(extra) else extra  # the files nearest the gap stay
    return [*head, *extra, fim.pre, *prefix, *typed, fim.suf, *suffix, fim.mid]


__all__ = ["FIM_KEYS", "FIM_TEXTS", "FimTokens", "Infill", "file_has_markers", "infill_tokens", "no_infill"]

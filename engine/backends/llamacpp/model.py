"""A GGUF model loaded through llama.cpp's C API: weights, vocabulary and metadata."""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from collections.abc import Sequence
from functools import cache, cached_property
from pathlib import Path

import llama_cpp
import numpy as np

from engine.backends.llamacpp.overrides import cpu_moe_overrides
from engine.chat_template import ChatTemplate
from engine.errors import ModelLoadError
from engine.infill import FimTokens
from engine.literal_text import SpecialTexts, encode_marked, special_pieces

log = logging.getLogger(__name__)

GGUF_MAGIC = b"GGUF"
_backend_ready = False


# ggml's log levels (ggml.h: 1 debug, 2 info, 3 warn, 4 error, 5 the previous message goes on) as logging's.
# llama.cpp's own messages go to the "llama.cpp" logger: its warnings (a tokenizer config it doubts, a context
# past the trained one) are details for the log, never lines in a terminal chat; Hearth says what matters to
# the user in its own sentences. llama-cpp-python's logger reads these levels as those of an older ggml (its
# warnings printed as errors, its errors hidden), so it is not used.
_GGML_LEVELS = {1: logging.DEBUG, 2: logging.DEBUG, 3: logging.INFO, 4: logging.WARNING}
llama_log = logging.getLogger("llama.cpp")
_last_level = logging.DEBUG


@llama_cpp.llama_log_callback
def route_llama_log(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
    """llama.cpp's (and mtmd's) messages into the "llama.cpp" logger; all of them on stderr with
    HEARTH_LLAMA_VERBOSE=1."""
    global _last_level
    py_level = _last_level if level == 5 else _GGML_LEVELS.get(level, logging.DEBUG)
    _last_level = py_level
    if _VERBOSE:
        os.write(2, text)
    elif llama_log.isEnabledFor(py_level):
        message = text.decode("utf-8", errors="replace").rstrip()
        if message:
            llama_log.log(py_level, "%s", message)


_VERBOSE = os.environ.get("HEARTH_LLAMA_VERBOSE") == "1"


def _init_llama_backend() -> None:
    global _backend_ready
    if not _backend_ready:
        llama_cpp.llama_log_set(route_llama_log, ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()
        _backend_ready = True


def weight_repacking_is_safe(system_info: str) -> bool:
    """Whether llama.cpp may move weights into its extra CPU buffer types (repacked layouts, AMX tiles).

    Builds with the AMX kernels (their system info reads ``AMX_INT8 = 1``, as a native build on a recent
    Xeon does) crash in the first matrix product on some machines (ggml-org/llama.cpp#20824), so there the
    weights stay in plain CPU buffers: slower prompts, but answers. Hearth's own build leaves AMX out.
    """
    return "AMX_INT8 = 1" not in system_info


@cache
def _extra_buffers_allowed() -> bool:
    """``weight_repacking_is_safe`` for the installed llama.cpp, said once in the log when it is not."""
    safe = weight_repacking_is_safe(llama_cpp.llama_print_system_info().decode(errors="replace"))
    if not safe:
        log.warning("This llama.cpp build has AMX kernels, which crash on some CPUs; weights stay unpacked.")
    return safe


def check_gguf_file(path: Path) -> None:
    """Refuse what llama.cpp would crash or hang on: a missing, empty or non-GGUF file.

    Raises:
        ModelLoadError: the file is missing or is not GGUF.
    """
    if not path.is_file():
        raise ModelLoadError(str(path), "the file does not exist; check the path or pull the model again.")
    with path.open("rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        raise ModelLoadError(str(path), "it is not a GGUF file; Hearth's llama.cpp backend loads only GGUF models.")


class GGUFModel:
    """Weights and vocabulary of one GGUF file, shared by every context made from it.

    Args:
        path: The .gguf file (the first part, for split files).
        n_gpu_layers: Layers to offload to a GPU when llama.cpp was built with one.
        tensor_split: Layers per GPU on a machine with several (empty: llama.cpp's own split).
        chat_template: A Jinja template used instead of the file's own (an Ollama model's, translated).
        cpu_moe: MoE experts kept in CPU memory: those of the first N layers, -1 for all (None: none).
    """

    def __init__(
        self, path: Path, *, n_gpu_layers: int = 0, tensor_split: Sequence[float] = (), chat_template: str | None = None,
        cpu_moe: int | None = None,
    ) -> None:
        _init_llama_backend()
        check_gguf_file(path)
        self.path = path
        self._template_source = chat_template
        params = llama_cpp.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        params.use_extra_bufts = _extra_buffers_allowed()
        if tensor_split:
            count = max(len(tensor_split), int(llama_cpp.llama_max_devices()))
            self._split = (ctypes.c_float * count)(*tensor_split)  # kept alive as long as the model
            params.tensor_split = self._split
        self._overrides = cpu_moe_overrides(cpu_moe)  # kept alive as long as the model, as the split
        if self._overrides is not None:
            # the field is a void pointer in llama-cpp-python's struct, though its annotation says an array
            params.tensor_buft_overrides = ctypes.cast(self._overrides, ctypes.c_void_p)  # pyright: ignore[reportAttributeAccessIssue]
        ptr = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        if not ptr:
            raise ModelLoadError(
                str(path), "llama.cpp could not read it (truncated, corrupt, or an unsupported architecture)."
            )
        vocab = llama_cpp.llama_model_get_vocab(ptr)
        if not vocab:
            llama_cpp.llama_model_free(ptr)
            raise ModelLoadError(str(path), "llama.cpp found no vocabulary in it; pull the model again.")
        self.ptr: llama_cpp.llama_model_p | None = ptr
        self.vocab: llama_cpp.llama_vocab_p = vocab
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        self._pieces: dict[int, bytes] = {}
        # Request threads tokenize at once (ctypes releases the GIL): one buffer per thread.
        self._local = threading.local()

    @property
    def model_ptr(self) -> llama_cpp.llama_model_p:
        """The llama.cpp model, while it is loaded.

        Raises:
            ModelLoadError: the model was closed.
        """
        if self.ptr is None:
            raise ModelLoadError(str(self.path), "the model was unloaded; load it again.")
        return self.ptr

    # -- metadata -------------------------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(1 << 16)
        # llama_cpp annotates buf as bytes; the C function writes into a char buffer, as passed here.
        n = llama_cpp.llama_model_meta_val_str(self.model_ptr, key.encode(), buf, len(buf))  # pyright: ignore[reportArgumentType]
        if n < 0:
            return None
        if n >= len(buf):  # the value (a long chat template) did not fit: ask again with room
            buf = ctypes.create_string_buffer(n + 1)
            llama_cpp.llama_model_meta_val_str(self.model_ptr, key.encode(), buf, len(buf))  # pyright: ignore[reportArgumentType]
        return buf.value.decode("utf-8", errors="replace")

    @cached_property
    def architecture(self) -> str:
        return self.meta("general.architecture") or ""

    @cached_property
    def n_ctx_train(self) -> int:
        return int(llama_cpp.llama_model_n_ctx_train(self.model_ptr))

    @cached_property
    def n_params(self) -> int:
        return int(llama_cpp.llama_model_n_params(self.model_ptr))

    @cached_property
    def n_layer(self) -> int:
        return int(llama_cpp.llama_model_n_layer(self.model_ptr))

    @cached_property
    def n_embd(self) -> int:
        return int(llama_cpp.llama_model_n_embd(self.model_ptr))

    @cached_property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token takes at f16 (keys and values, every layer)."""
        n_head = max(1, int(llama_cpp.llama_model_n_head(self.model_ptr)))
        n_head_kv = max(1, int(llama_cpp.llama_model_n_head_kv(self.model_ptr)))
        head_dim = self.n_embd // n_head
        return 2 * self.n_layer * n_head_kv * head_dim * 2

    @cached_property
    def bos_id(self) -> int:
        return int(llama_cpp.llama_vocab_bos(self.vocab))

    @cached_property
    def eos_id(self) -> int:
        return int(llama_cpp.llama_vocab_eos(self.vocab))

    @cached_property
    def add_bos(self) -> bool:
        return bool(llama_cpp.llama_vocab_get_add_bos(self.vocab))

    @cached_property
    def fim(self) -> FimTokens | None:
        """The fill-in-the-middle markers llama.cpp found in the vocabulary (None: it has no prefix, suffix and middle)."""
        ids = {kind: int(getattr(llama_cpp, f"llama_vocab_fim_{kind}")(self.vocab)) for kind in ("pre", "suf", "mid", "pad", "rep", "sep")}
        if min(ids["pre"], ids["suf"], ids["mid"]) < 0:
            return None
        return FimTokens(**{kind: (i if i >= 0 else None) for kind, i in ids.items()})  # pyright: ignore[reportArgumentType]

    def token_text(self, token: int) -> str:
        return self.piece(token, special=True).decode("utf-8", errors="replace")

    @cached_property
    def chat_template(self) -> ChatTemplate:
        source = self._template_source or self.meta("tokenizer.chat_template")
        bos = self.token_text(self.bos_id) if self.bos_id >= 0 else ""
        eos = self.token_text(self.eos_id) if self.eos_id >= 0 else ""
        return ChatTemplate(source, bos_token=bos, eos_token=eos, specials=self.special_texts)

    @cached_property
    def special_texts(self) -> SpecialTexts:
        """The texts llama.cpp reads as tokens only when parsing special tokens (control and unknown tokens)."""
        unparsed = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN
        ids = [t for t in range(self.n_vocab) if llama_cpp.llama_vocab_get_attr(self.vocab, t) & unparsed]
        return SpecialTexts((llama_cpp.llama_vocab_get_text(self.vocab, t) or b"").decode("utf-8", "replace") for t in ids)

    @cached_property
    def _splits(self) -> tuple[SpecialTexts, SpecialTexts, frozenset[str], frozenset[str]]:
        """What llama.cpp's tokenizer splits a text at before it tokenizes the runs between: every special token's
        text with special tokens parsed, the user-defined ones' without; and the texts that strip whitespace on
        their left and on their right."""
        attrs = {t: llama_cpp.llama_vocab_get_attr(self.vocab, t) for t in range(self.n_vocab)}
        texts = {t: (llama_cpp.llama_vocab_get_text(self.vocab, t) or b"").decode("utf-8", "replace") for t, a in attrs.items()
                 if a & (llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN | llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED)}  # fmt: skip
        user = SpecialTexts(text for t, text in texts.items() if attrs[t] & llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED)
        lstrip = frozenset(text for t, text in texts.items() if attrs[t] & llama_cpp.LLAMA_TOKEN_ATTR_LSTRIP)
        rstrip = frozenset(text for t, text in texts.items() if attrs[t] & llama_cpp.LLAMA_TOKEN_ATTR_RSTRIP)
        return SpecialTexts(texts.values()), user, lstrip, rstrip

    def is_eog(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self.vocab, token))

    @cached_property
    def eog_ids(self) -> np.ndarray:
        """Every end-of-generation token's id (read once, by the first request that bans them all)."""
        return np.array([t for t in range(self.n_vocab) if llama_cpp.llama_vocab_is_eog(self.vocab, t)], dtype=np.int64)

    # -- text <-> tokens -------------------------------------------------------------------------
    def tokenize(self, text: str, *, add_special: bool = False, parse_special: bool = True) -> list[int]:
        """The ids of ``text``, tokenized in pieces of a bounded number of the texts llama.cpp splits it at (its pass
        over them is quadratic in their number: 20,000 chat turns took 5 s in one call), the same ids as in one."""
        parsed, user, lstrip, rstrip = self._splits
        pieces = special_pieces(text, parsed if parse_special else user, lstrip, rstrip)
        if len(pieces) == 1:
            return self._tokenize(text, add_special, parse_special)
        ids = [t for piece in pieces for t in self._tokenize(piece, False, parse_special)]
        if not add_special:
            return ids
        front, back = self._special_ends
        return [*front, *ids, *back]

    @cached_property
    def _special_ends(self) -> tuple[list[int], list[int]]:
        """What ``add_special`` puts before a text and after it (BOS, EOS; BERT's CLS and SEP), found around a probe."""
        plain, whole = self._tokenize("a", False, False), self._tokenize("a", True, False)
        at = next((i for i in range(len(whole) - len(plain) + 1) if whole[i : i + len(plain)] == plain), 0)
        return whole[:at], whole[at + len(plain) :]

    def _tokenize(self, text: str, add_special: bool, parse_special: bool) -> list[int]:
        # A lone surrogate (JSON allows "\ud800") has no UTF-8 form: it becomes "?" rather than an error.
        data = text.encode("utf-8", errors="replace")
        buf = getattr(self._local, "buf", None)
        if buf is None:
            buf = self._local.buf = (llama_cpp.llama_token * 8192)()
        if len(data) + 8 > len(buf):
            buf = (llama_cpp.llama_token * (len(data) + 8))()
        n = llama_cpp.llama_tokenize(self.vocab, data, len(data), buf, len(buf), add_special, parse_special)
        if n < 0:
            buf = (llama_cpp.llama_token * (-n))()
            n = llama_cpp.llama_tokenize(self.vocab, data, len(data), buf, len(buf), add_special, parse_special)
        return list(buf[:n])

    def tokenize_prompt(self, text: str, literal: Sequence[tuple[int, int]] = ()) -> list[int]:
        """Tokens for a rendered prompt: special tokens parsed except in the ``literal`` spans (content's text), BOS
        added once if the model wants it."""
        tokens = encode_marked(text, literal, self.special_texts, self._encode)
        if self.add_bos and self.bos_id >= 0 and (not tokens or tokens[0] != self.bos_id):
            tokens.insert(0, self.bos_id)
        return tokens

    def _encode(self, text: str, parse_special: bool) -> list[int]:
        return self.tokenize(text, add_special=False, parse_special=parse_special)

    def piece(self, token: int, *, special: bool = False) -> bytes:
        """The bytes of one token (cached: called once per generated token)."""
        key = token if not special else -token - 1
        cached = self._pieces.get(key)
        if cached is not None:
            return cached
        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        out = buf.raw[:n]
        self._pieces[key] = out
        return out

    def detokenize(self, tokens: list[int]) -> str:
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", errors="replace")

    def close(self) -> None:
        if self.ptr:
            llama_cpp.llama_model_free(self.ptr)
            self.ptr = None

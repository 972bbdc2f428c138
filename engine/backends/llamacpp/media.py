"""Pictures and sounds in a llama.cpp prompt, through libmtmd (llama.cpp's multimodal library).

A model that sees comes as two GGUFs: the text model and its ``mmproj`` projector. :class:`Projector` holds the
projector's mtmd context. A request's rendered prompt holds one :data:`~engine.types.MEDIA_MARKER` per picture or
sound; :meth:`Projector.tokenize` turns it into one token list for the decode loop, where each media chunk's
positions hold placeholder ids derived from the file's content hash (as llama-server keys its cache by the
image's hash). Two prompts with the same picture at the same place share those ids, so the loop's prefix cache
reuses the picture's KV instead of encoding it again; a different picture differs at its first position.
The chunks themselves (what mtmd encodes) travel beside the tokens in a :class:`MediaPrompt`.
"""

# llama-cpp-python types mtmd handles as classes and pointers; at run time they are ints passed through ctypes.
# pyright: reportArgumentType=false, reportCallIssue=false, reportOptionalSubscript=false

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import logging
import threading
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import llama_cpp
from llama_cpp import mtmd_cpp as mtmd

from engine.backends.llamacpp.picture_cache import KnownPicture, PictureCache
from engine.errors import InvalidRequest, ModelLoadError
from engine.images import readable_image
from engine.literal_text import encode_marked
from engine.types import MEDIA_MARKER, MediaInput

if TYPE_CHECKING:
    from engine.backends.llamacpp.model import GGUFModel

log = logging.getLogger(__name__)

_PLACEHOLDER_SPACE = 1 << 60
# The side of the picture laid out (no pixels) to learn how many tokens a picture takes with a projector whose
# pictures are decoded non-causally: Gemma 3 resizes every picture to one size; a projector that sizes tokens by
# the picture's is asked for a large one.
_PROBE_SIDE = 1536
_NO_CALLBACK = mtmd.mtmd_helper_post_decode_callback()  # a null function pointer
_logs_routed = False


def _route_logs() -> None:
    """mtmd's and its helper's messages into the log as llama.cpp's are (on stderr with HEARTH_LLAMA_VERBOSE)."""
    global _logs_routed
    if not _logs_routed:
        from engine.backends.llamacpp.model import route_llama_log

        mtmd.mtmd_log_set(route_llama_log, ctypes.c_void_p(0))
        mtmd.mtmd_helper_log_set(route_llama_log, ctypes.c_void_p(0))
        _logs_routed = True


@dataclass(frozen=True, slots=True)
class MediaChunk:
    """One picture (or one slice of it) or one sound of a prompt: ``n_tokens`` positions from ``start``.

    ``chunk`` is the mtmd chunk (owned by the :class:`MediaPrompt`), ``where`` the request part it came from.
    """

    start: int
    n_tokens: int
    kind: str
    chunk: int
    where: str
    non_causal: bool = False  # its tokens attend to each other both ways (Gemma 3): decoded in one batch
    n_pos: int = 0  # positions it takes (fewer than its tokens with M-RoPE; 0: as many as its tokens)
    digest: str = ""  # the file's content hash

    @property
    def end(self) -> int:
        return self.start + self.n_tokens


class MediaPrompt(list[int]):
    """A prompt's token ids, placeholders at the media positions, with the media chunks beside them.

    The mtmd chunks are freed by :meth:`close` (the decode loop calls it when the request ends), or when the
    prompt is dropped unused (one only counted, never generated).
    """

    def __init__(self, tokens: Sequence[int], media: dict[int, MediaChunk], handle: int, owned: Sequence[int] = ()) -> None:
        super().__init__(tokens)
        self.media = media
        self._finalizer = weakref.finalize(self, _free_chunks, handle, tuple(owned))

    def close(self) -> None:
        self._finalizer()

    def pos(self, i: int) -> int:
        """The position of token ``i`` (not inside a picture): its index, less the positions the pictures before it
        save (an M-RoPE model's picture of 64 tokens takes 8 positions)."""
        return i - sum(m.n_tokens - m.n_pos for m in self.media.values() if m.end <= i and m.n_pos)

    def cut(self, n: int) -> int:
        """``n`` moved back to the start of the media chunk it falls inside (a cached prefix never ends
        half-way through a picture: its KV was computed as a whole)."""
        for m in self.media.values():
            if m.start < n < m.end:
                return m.start
        return n


def _free_chunks(handle: int, owned: tuple[int, ...]) -> None:
    """Free a prompt's mtmd chunk list and the chunks it holds beside it (copies from the picture cache)."""
    mtmd.mtmd_input_chunks_free(ctypes.c_void_p(handle))
    for chunk in owned:
        mtmd.mtmd_input_chunk_free(chunk)


@dataclass(frozen=True, slots=True)
class TextRewrite:
    """The tokens of one text part of a media prompt as mtmd makes them (special texts parsed) and as they must be
    (content's special texts as plain text)."""

    parsed: tuple[int, ...]
    marked: tuple[int, ...]


def literal_rewrites(text: str, literal: Sequence[tuple[int, int]], model: GGUFModel) -> list[TextRewrite]:
    """For each text part of ``text`` (between media markers) holding literal spans, its tokens as mtmd parses
    them and as :meth:`GGUFModel.tokenize_prompt` would give them."""
    out: list[TextRewrite] = []
    start = 0
    for part in text.split(MEDIA_MARKER):
        end = start + len(part)
        inside = [(s - start, e - start) for s, e in literal if start <= s and e <= end]
        if inside:
            parsed = model.tokenize(part, add_special=False, parse_special=True)
            marked = encode_marked(
                part, inside, model.special_texts, lambda t, special: model.tokenize(t, parse_special=special)
            )
            if parsed != marked:
                out.append(TextRewrite(tuple(parsed), tuple(marked)))
        start = end + len(MEDIA_MARKER)
    return out


def _rewritten(tokens: list[int], rewrites: list[TextRewrite]) -> list[int]:
    """``tokens`` (one mtmd text chunk: a part's tokens, with mtmd's own markup around a picture) with the
    parts of ``rewrites`` found in it, in order, replaced; those applied leave the list."""
    pos = 0
    while rewrites:
        old, new = rewrites[0].parsed, rewrites[0].marked
        first = old[0] if old else None
        at = next(
            (i for i in range(pos, len(tokens) - len(old) + 1) if tokens[i] == first and tuple(tokens[i : i + len(old)]) == old),
            -1,
        )
        if at < 0:
            break
        tokens[at : at + len(old)] = new
        pos = at + len(new)
        rewrites.pop(0)
    return tokens


def _placeholders(digest: str, ordinal: int, n: int) -> list[int]:
    """Negative ids for ``n`` positions of the ``ordinal``-th chunk of the file with hash ``digest``."""
    base = (int(digest[:15], 16) * 1_000_003 + ordinal * 7_919) % _PLACEHOLDER_SPACE
    return [-(1 + (base + j) % _PLACEHOLDER_SPACE) for j in range(n)]


class Projector:
    """The mtmd context of a model's projector: what it takes in, and prompts turned into chunks.

    Args:
        path: The ``mmproj`` GGUF.
        model: The text model's llama.cpp handle.
        n_threads: CPU threads for encoding.
        use_gpu: Encode on the GPU where llama.cpp has one.

    Raises:
        ModelLoadError: mtmd could not read the projector (missing, corrupt, or not this model's).
    """

    def __init__(self, path: Path, model: llama_cpp.llama_model_p, *, n_threads: int, use_gpu: bool) -> None:
        if not path.is_file():
            raise ModelLoadError(str(path), "the projector (mmproj) file does not exist; check the path.")
        _route_logs()
        params = mtmd.mtmd_context_params_default()
        params.use_gpu = use_gpu
        params.n_threads = n_threads
        params.print_timings = False
        params.warmup = False
        params.media_marker = MEDIA_MARKER.encode()
        ctx = mtmd.mtmd_init_from_file(str(path).encode(), model, params)
        if not ctx:
            raise ModelLoadError(
                str(path), "llama.cpp could not read this projector (mmproj); it must be the one made for this model."
            )
        self.path = path
        self.ctx = ctx
        self.vision = bool(mtmd.mtmd_support_vision(ctx))
        self.audio = bool(mtmd.mtmd_support_audio(ctx))
        self.mrope = bool(mtmd.mtmd_decode_use_mrope(ctx))
        # llama.cpp decodes such a picture in one micro-batch, which the decode loop's context must hold
        self.non_causal_tokens = self._non_causal_tokens()
        self.encoded = 0  # chunks encoded since loading (a cached picture is not encoded again)
        self.pictures = PictureCache()  # pictures read lately: sent again, they are not decoded again
        self._reading = 0
        self._reading_lock = threading.Lock()

    def _non_causal_tokens(self) -> int:
        """The tokens of a large picture (:data:`_PROBE_SIDE` square, laid out without pixels) where this projector's
        pictures are decoded with non-causal attention; 0 where they are not (or mtmd cannot lay one out)."""
        if not self.vision or not mtmd.mtmd_decode_use_non_causal(self.ctx, None):
            return 0
        bitmap = mtmd.mtmd_bitmap_init(_PROBE_SIDE, _PROBE_SIDE, None)
        chunks = mtmd.mtmd_input_chunks_init()
        try:
            data = MEDIA_MARKER.encode()
            inp = mtmd.mtmd_input_text(text=data, text_len=len(data), add_special=False, parse_special=True)
            if mtmd.mtmd_tokenize(self.ctx, chunks, ctypes.byref(inp), (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap), 1) != 0:
                return 0
            parts = [mtmd.mtmd_input_chunks_get(chunks, i) for i in range(mtmd.mtmd_input_chunks_size(chunks))]
            images = [c for c in parts if mtmd.mtmd_input_chunk_get_type(c) == mtmd.MTMD_INPUT_CHUNK_TYPE_IMAGE]
            return max((int(mtmd.mtmd_input_chunk_get_n_tokens(c)) for c in images), default=0)
        finally:
            mtmd.mtmd_input_chunks_free(chunks)
            mtmd.mtmd_bitmap_free(bitmap)

    @property
    def reading(self) -> int:
        """How many prompts' pictures or sounds request threads are reading into chunks now (decoding the
        file, resizing and slicing it: tens of milliseconds of a core each)."""
        return self._reading

    @contextlib.contextmanager
    def reading_media(self) -> Iterator[None]:
        """Count a prompt's media as being read (:attr:`reading`) while the block runs."""
        with self._reading_lock:
            self._reading += 1
        try:
            yield
        finally:
            with self._reading_lock:
                self._reading -= 1

    def check(self, media: Sequence[MediaInput], model_name: str) -> None:
        """Refuse media this projector cannot take in, with one sentence naming the part.

        Raises:
            InvalidRequest: a picture for a model without a vision encoder, or a sound without an audio one.
        """
        for m in media:
            if m.kind == "image" and not self.vision:
                raise InvalidRequest(f"Model '{model_name}' cannot read images; send {m.where} as text.", param=m.where)
            if m.kind == "audio" and not self.audio:
                raise InvalidRequest(f"Model '{model_name}' cannot hear audio; send {m.where} as text.", param=m.where)

    def tokenize(
        self, text: str, media: Sequence[MediaInput], *, bos: int | None, rewrites: Sequence[TextRewrite] = ()
    ) -> MediaPrompt:
        """``text`` (one :data:`MEDIA_MARKER` per item of ``media``) as tokens and media chunks; ``bos`` is put
        first unless the text starts with it (None: the model wants none).

        mtmd tokenizes the text between markers with special texts parsed; ``rewrites`` (from
        :func:`literal_rewrites`) put back, in order, the tokens of the parts where content wrote them.

        Raises:
            InvalidRequest: a file mtmd cannot read, markers and media that do not pair up, or media at the end.
        """
        if text.count(MEDIA_MARKER) != len(media):
            raise InvalidRequest(
                f"The prompt has {text.count(MEDIA_MARKER)} media markers ({MEDIA_MARKER}) for {len(media)} "
                f"pictures or sounds; do not write {MEDIA_MARKER} in a message's text.", param="messages"
            )  # fmt: skip
        with self.reading_media():
            return self._read(text, media, bos, list(rewrites))

    def _read(self, text: str, media: Sequence[MediaInput], bos: int | None, rewrites: list[TextRewrite]) -> MediaPrompt:
        bitmaps = (mtmd.mtmd_bitmap_p_ctypes * max(1, len(media)))()
        made: list[int] = []
        chunks = None
        known: dict[str, KnownPicture] = {}
        try:
            digests: list[str] = []
            for i, m in enumerate(media):
                digest = hashlib.sha256(m.data).hexdigest()
                picture = known.get(digest) or (self.pictures.take(digest) if m.kind == "image" else None)
                if picture is not None:  # laid out from its size alone: no decode, no resize
                    known[digest] = picture
                    bitmap = mtmd.mtmd_bitmap_init(picture.width, picture.height, None)
                else:
                    data = readable_image(m.data, m.where) if m.kind == "image" else m.data  # decoded once it is needed
                    buf = ctypes.cast(ctypes.c_char_p(data), ctypes.POINTER(ctypes.c_uint8))  # the bytes, not a copy
                    bitmap = mtmd.mtmd_helper_bitmap_init_from_buf(self.ctx, buf, len(data), False)
                if not bitmap:
                    what = "image" if m.kind == "image" else "audio file (WAV, MP3 or FLAC)"
                    raise InvalidRequest(f"{m.where} is not an {what} llama.cpp can read.", param=m.where)
                made.append(bitmap)
                digests.append(digest)
                mtmd.mtmd_bitmap_set_id(bitmap, digest.encode())
                bitmaps[i] = bitmap
            chunks = mtmd.mtmd_input_chunks_init()
            data = text.encode("utf-8", errors="replace")
            inp = mtmd.mtmd_input_text(text=data, text_len=len(data), add_special=False, parse_special=True)
            rc = mtmd.mtmd_tokenize(self.ctx, chunks, ctypes.byref(inp), bitmaps, len(media))
            if rc != 0:
                raise InvalidRequest(f"llama.cpp could not preprocess the media (error {rc}); send other files.")
            sizes = {d: (mtmd.mtmd_bitmap_get_nx(b), mtmd.mtmd_bitmap_get_ny(b)) for d, b in zip(digests, made, strict=True)}
            prompt = self._flatten(chunks, media, digests, bos, known, rewrites)
        except BaseException:
            if chunks:
                mtmd.mtmd_input_chunks_free(chunks)
            for picture in known.values():
                for c in picture.chunks:
                    mtmd.mtmd_input_chunk_free(c)
            raise
        finally:
            for bitmap in made:  # the chunks hold what they need of them
                mtmd.mtmd_bitmap_free(bitmap)
        self._keep_pictures(prompt, media, digests, sizes, known)
        return prompt

    def _keep_pictures(self, prompt: MediaPrompt, media, digests: list[str], sizes, known) -> None:
        """Keep each picture this prompt read from its file in :attr:`pictures`: one occurrence's chunks."""
        for digest, m in dict(zip(digests, media, strict=True)).items():
            if m.kind != "image" or digest in known:
                continue
            own = [c.chunk for c in prompt.media.values() if c.digest == digest]
            self.pictures.keep(digest, *sizes[digest], own[: len(own) // digests.count(digest)])

    def _flatten(
        self, chunks, media: Sequence[MediaInput], digests: list[str], bos: int | None, known: dict[str, KnownPicture],
        rewrites: list[TextRewrite],
    ) -> MediaPrompt:
        tokens: list[int] = []
        spans: dict[int, MediaChunk] = {}
        seen: dict[str, int] = {}
        wheres = {d: m.where for d, m in zip(digests, media, strict=True)}
        n = mtmd.mtmd_input_chunks_size(chunks)
        for i in range(n):
            chunk = mtmd.mtmd_input_chunks_get(chunks, i)
            kind = mtmd.mtmd_input_chunk_get_type(chunk)
            if kind == mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
                count = ctypes.c_size_t(0)
                ptr = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(count))
                part = _rewritten([int(ptr[j]) for j in range(count.value)], rewrites)
                if not tokens and bos is not None and (not part or part[0] != bos):
                    part.insert(0, bos)
                tokens.extend(part)
                continue
            if not tokens and bos is not None:
                tokens.append(bos)
            digest = (mtmd.mtmd_input_chunk_get_id(chunk) or b"").decode()
            ordinal = seen.get(digest, 0)
            seen[digest] = ordinal + 1
            n_tokens = int(mtmd.mtmd_input_chunk_get_n_tokens(chunk))
            if digest in known:  # a placeholder: encode the kept copy of the real chunk, should it come to that
                copies = known[digest].chunks
                chunk = copies[ordinal % len(copies)]
            spans[len(tokens)] = MediaChunk(
                start=len(tokens), n_tokens=n_tokens, chunk=chunk, digest=digest,
                kind="image" if kind == mtmd.MTMD_INPUT_CHUNK_TYPE_IMAGE else "audio", where=wheres.get(digest, ""),
                non_causal=bool(mtmd.mtmd_decode_use_non_causal(self.ctx, chunk)),
                n_pos=int(mtmd.mtmd_input_chunk_get_n_pos(chunk)),
            )  # fmt: skip
            tokens.extend(_placeholders(digest, ordinal, n_tokens))
        if rewrites:  # never expected: mtmd tokenizes the text between markers as llama_tokenize does
            raise InvalidRequest(
                "A message next to a picture or sound holds a control token's text that could not be kept as text; "
                "remove it from the message.", param="messages",
            )  # fmt: skip
        if not tokens or tokens[-1] < 0:
            where = next(iter(spans.values())).where if spans else "messages"
            raise InvalidRequest("The prompt ends with a picture or sound; put some text after it.", param=where)
        return MediaPrompt(tokens, spans, chunks, [c for p in known.values() for c in p.chunks])

    def encode_and_decode(self, lctx, m: MediaChunk, *, seq_id: int, n_past: int, n_batch: int) -> None:
        """Encode ``m`` and decode its embeddings into ``seq_id``'s KV from position ``n_past``.

        Raises:
            RuntimeError: mtmd or llama.cpp failed.
        """
        rc = mtmd.mtmd_encode_chunk(self.ctx, m.chunk)
        if rc != 0:
            raise RuntimeError(f"mtmd could not encode {m.where or 'a picture'} (error {rc})")
        self.encoded += 1
        embd = mtmd.mtmd_get_output_embd(self.ctx)
        new_n_past = llama_cpp.llama_pos(0)
        rc = mtmd.mtmd_helper_decode_image_chunk(
            self.ctx, lctx, m.chunk, embd, n_past, seq_id, n_batch, ctypes.byref(new_n_past), _NO_CALLBACK, None
        )
        if rc != 0:
            raise RuntimeError(f"llama.cpp could not decode the embeddings of {m.where or 'a picture'} (error {rc})")

    def close(self) -> None:
        self.pictures.close()
        if self.ctx:
            mtmd.mtmd_free(self.ctx)
            self.ctx = None




@functools.lru_cache(maxsize=64)
def _caps(path: str, mtime: float) -> tuple[bool, bool]:
    _route_logs()
    caps = mtmd.mtmd_get_cap_from_file(path.encode())
    return bool(caps.inp_vision), bool(caps.inp_audio)


def projector_capabilities(path: Path) -> tuple[bool, bool]:
    """Whether the projector at ``path`` has a vision encoder and an audio one (read from its header, cached
    while the file is unchanged); (False, False) for a file that is missing or not a projector."""
    try:
        mtime = path.stat().st_mtime
    except OSError:
        return False, False
    return _caps(str(path), mtime)


__all__ = ["MediaChunk", "MediaPrompt", "Projector", "TextRewrite", "literal_rewrites", "projector_capabilities"]

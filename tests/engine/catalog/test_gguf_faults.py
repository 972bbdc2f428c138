"""GGUF files that are truncated or whose header lies: refused at import with one sentence naming
the problem, quickly and without a crash (the worker refuses them at load the same way)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from engine.catalog.gguf_header import (
    GGML_BLOCK_SIZES,
    check_gguf_layout,
    read_gguf_file,
    read_gguf_vocabulary,
)
from engine.catalog.metadata import verify_gguf
from engine.cli import main
from engine.errors import ModelLoadError
from tests.engine.catalog.conftest import make_gguf


def header(n_tensors: int, n_kv: int) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv)


def gstr(text: str) -> bytes:
    return struct.pack("<Q", len(text)) + text.encode()


def tensor_info(name: str, dims: tuple[int, ...], ggml_type: int, offset: int, *, n_dims: int | None = None) -> bytes:
    n = len(dims) if n_dims is None else n_dims
    return gstr(name) + struct.pack("<I", n) + struct.pack(f"<{len(dims)}Q", *dims) + struct.pack("<IQ", ggml_type, offset)


@pytest.fixture
def good(tmp_path) -> Path:
    path = tmp_path / "good.gguf"
    make_gguf(path, label="Q8_0", n_floats=4096)
    return path


def hostile_files(tmp_path: Path, good: Path) -> dict[str, tuple[Path, str]]:
    """name -> (file, words the refusal must contain)."""
    data = good.read_bytes()
    files: dict[str, tuple[bytes, str]] = {
        "truncated": (data[: len(data) - 1000], "lies past the end of the file"),
        "cut in the header": (data[:200], "runs past the end of the file"),
        "2**62 tensors": (data[:8] + struct.pack("<Q", 1 << 62) + data[16:], "declares 4611686018427387904 tensors"),
        "2**60 metadata entries": (data[:16] + struct.pack("<Q", 1 << 60) + data[24:], "metadata entries"),
        "a key longer than the file": (data[:24] + struct.pack("<Q", 1 << 60) + data[32:], "runs past the end"),
        "arrays nested 100000 deep": (
            header(0, 1) + gstr("x") + struct.pack("<I", 9) + struct.pack("<IQ", 9, 1) * 100_000,
            "nest more than",
        ),
        "a string array longer than the file": (
            header(0, 1) + gstr("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 1 << 61),
            "array of 2305843009213693952 entries",
        ),
        "a vocabulary entry longer than the file": (
            header(0, 1) + gstr("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 2) + gstr("a") + struct.pack("<Q", 1 << 60),
            "runs past the end",
        ),
        "a vocabulary that ends mid-entry": (
            header(0, 1) + gstr("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 3) + gstr("a") + gstr("b") + struct.pack("<Q", 5) + b"cd",
            "runs past the end",
        ),
        "2**31 dimensions": (header(1, 0) + tensor_info("t", (32,), 0, 0, n_dims=1 << 31), "dimensions"),
        "data offset past the end": (header(1, 0) + tensor_info("t", (32,), 0, 1 << 40) + b"\0" * 200, "lies past the end"),
        "an impossible shape": (header(1, 0) + tensor_info("t", (1 << 40, 1 << 40), 0, 0), "impossible size"),
    }
    out = {}
    for i, (name, (content, words)) in enumerate(files.items()):
        path = tmp_path / f"hostile-{i}.gguf"
        path.write_bytes(content)
        out[name] = (path, words)
    return out


def test_truncated_and_hostile_files_are_refused_at_import_with_the_reason(tmp_path, good, registry):
    for name, (path, words) in hostile_files(tmp_path, good).items():
        with pytest.raises(ModelLoadError) as caught:
            registry.register(path, name=f"m{path.stem}")
        message = str(caught.value)
        assert words in message and "download or copy it again" in message, (name, message)
        assert str(path) in message, name
        with pytest.raises(ModelLoadError):
            verify_gguf(path)  # what the worker runs before a backend sees the file
    assert registry.list() == []  # nothing registered


def test_the_cli_refuses_a_truncated_file_in_one_sentence(tmp_path, good, capsys):
    path = tmp_path / "cut.gguf"
    path.write_bytes(good.read_bytes()[:-4096])
    assert main(["import", str(path), "--name", "cut"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("hearth: Could not load the model at") and "truncated" in err and "Traceback" not in err


def test_sound_files_pass_every_check(good, starter_path):
    for path in (good, starter_path):
        check_gguf_layout(path)
        verify_gguf(path)
    kv, params = read_gguf_file(starter_path)
    assert kv["general.architecture"] == "llama" and 100_000_000 < params < 200_000_000


def test_a_vocabulary_whose_header_lies_is_a_clear_error_not_a_long_read(tmp_path, good):
    """What a draft model's vocabulary check reads (engine.fit.draft): the same bounds as the rest of the header."""
    lying = {
        "a token list longer than the file": header(0, 1) + gstr("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 1 << 61),
        "a token longer than the file": header(0, 1) + gstr("tokenizer.ggml.tokens") + struct.pack("<IIQQ", 9, 8, 1, 1 << 60),
        "token types longer than the file": header(0, 1) + gstr("tokenizer.ggml.token_type") + struct.pack("<IIQ", 9, 5, 1 << 60),
        "tokens that are numbers": header(0, 1) + gstr("tokenizer.ggml.tokens") + struct.pack("<IIQi", 9, 5, 1, 7),
    }
    for i, (name, content) in enumerate(lying.items()):
        path = tmp_path / f"lying-{i}.gguf"
        path.write_bytes(content)
        with pytest.raises(ValueError, match="runs past|not a list of strings"):
            read_gguf_vocabulary(path)
            pytest.fail(name)
    no_tokenizer = tmp_path / "no-tokenizer.gguf"
    no_tokenizer.write_bytes(header(0, 1) + gstr("general.architecture") + struct.pack("<I", 8) + gstr("llama"))
    with pytest.raises(ValueError, match="has no vocabulary"):
        read_gguf_vocabulary(no_tokenizer)
    vocabulary = read_gguf_vocabulary(good)
    assert vocabulary.kind == "llama" and vocabulary.tokens[:2] == [b"t0", b"t1"] and not any(vocabulary.unused)


def test_block_sizes_match_ggml():
    from gguf.constants import GGML_QUANT_SIZES

    known = {int(t): sizes for t, sizes in GGML_QUANT_SIZES.items()}
    assert {t: known[t] for t in GGML_BLOCK_SIZES if t in known} == {t: s for t, s in GGML_BLOCK_SIZES.items() if t in known}
    assert len([t for t in GGML_BLOCK_SIZES if t in known]) >= 25

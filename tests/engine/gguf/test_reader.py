"""Hearth's GGUF reader reads what the gguf library's own reader reads, from a plain view of the map."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from engine.errors import ModelLoadError
from engine.gguf import metadata, open_gguf


def test_fields_and_tensors_are_the_librarys(starter_path):
    ours, theirs = open_gguf(starter_path), gguf.GGUFReader(starter_path)
    assert metadata(ours) == metadata(theirs)
    assert len(ours.fields) == len(theirs.fields) and ours.data_offset == theirs.data_offset
    for key, field in theirs.fields.items():
        mine = ours.fields[key]
        assert mine.types == field.types and mine.data == field.data and mine.offset == field.offset
        assert [(a.dtype, a.nbytes) for a in mine.parts] == [(b.dtype, b.nbytes) for b in field.parts]
    assert [t.name for t in ours.tensors] == [t.name for t in theirs.tensors]
    for a, b in zip(ours.tensors, theirs.tensors, strict=True):
        assert (a.tensor_type, list(a.shape), a.data_offset) == (b.tensor_type, list(b.shape), b.data_offset)
        assert np.array_equal(a.data, b.data)
    assert not ours.tensors[0].data.flags.writeable  # a view of the read-only map, not a copy


def test_a_truncated_file_is_one_clear_error(starter_path, tmp_path):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(starter_path.read_bytes()[:200_000])
    with pytest.raises(ModelLoadError, match="damaged or truncated"):
        open_gguf(cut)

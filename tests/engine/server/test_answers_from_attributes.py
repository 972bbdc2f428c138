"""The answers the routes validate from an engine object's attributes (issue #43): each answer's fields are the
engine type's fields (and the properties named here), so a field added to one and not the other fails, and the
answer holds the same values the engine object's own JSON did."""

from __future__ import annotations

from dataclasses import fields

import pytest

import engine.server.api_models as am
from engine.catalog.variants import RemoteFile
from engine.documents.prompt import DocsContext, Source
from engine.documents.types import SearchHit
from engine.hardware import CpuInfo, GpuInfo, HardwareInfo
from engine.load_settings import ModelLoadSettings

GIB = 1024**3

# engine type, its answer, and the engine's properties the answer reads besides its fields
PAIRS = [
    (CpuInfo, am.CpuInfo, set()),
    (GpuInfo, am.GpuInfo, set()),
    (HardwareInfo, am.HardwareInfo, {"has_gpu", "apple_silicon", "gpu_summary"}),
    (RemoteFile, am.RemoteFileInfo, set()),
    (SearchHit, am.SearchHit, set()),
    (Source, am.DocSource, {"place", "label", "uri"}),
    (DocsContext, am.DocsContext, set()),
    (ModelLoadSettings, am.LoadSettings, set()),
]


@pytest.mark.parametrize(("engine_type", "answer", "properties"), PAIRS, ids=lambda x: getattr(x, "__qualname__", ""))
def test_an_answer_has_its_engine_types_fields(engine_type, answer, properties):
    assert set(answer.model_fields) == {f.name for f in fields(engine_type)} | properties
    for name in properties:
        assert isinstance(getattr(engine_type, name), property), name


HARDWARE = HardwareInfo(
    os="linux",
    cpu=CpuInfo("Xeon", "x86_64", 8, 16, ("avx2", "avx512")),
    ram_total=64 * GIB,
    ram_available=40 * GIB,
    gpus=(GpuInfo(0, "NVIDIA H200", "nvidia", 140 * GIB, 130 * GIB, "9.0", "560"),),
    disk_free=10**12,
    models_dir="/models",
    notes=("a note",),
)


@pytest.mark.parametrize("hw", [HARDWARE, HardwareInfo("darwin", CpuInfo("M3", "arm64", 8, 8, ("neon",)), 16 * GIB, 8 * GIB,
                                                        (GpuInfo(0, "Apple M3", "apple", 16 * GIB, unified_memory=True),))])  # fmt: skip
def test_the_hardware_answer_is_what_hw_json_prints(hw):
    assert am.HardwareInfo.model_validate(hw).model_dump_json() == am.HardwareInfo.model_validate(hw.to_dict()).model_dump_json()


def test_a_remote_file_and_a_search_hit_answer_their_own_json():
    for f in (RemoteFile("a.gguf", 10, "ab" * 32, "cd" * 20), RemoteFile("config.json", 2)):
        assert am.RemoteFileInfo.model_validate(f).model_dump() == f.to_dict()
    hit = SearchHit(7, "text", "/docs/a.pdf", 3, "Intro", 0.5, keyword_rank=1, vector_score=0.25)
    assert am.SearchHit.model_validate(hit).model_dump() == hit.as_dict()


def test_the_settings_answer_holds_every_setting():
    every = ModelLoadSettings(n_ctx=4096, n_seq_max=2, kv_type="q8_0", flash_attn=True, rope_scale=2.0, speculative="ngram")
    assert am.LoadSettings.model_validate(every).model_dump() == every.to_dict()
    assert am.LoadSettings.model_validate(ModelLoadSettings()).model_dump() == ModelLoadSettings().to_dict()


def test_the_context_answer_numbers_and_labels_its_sources():
    sources = (Source(1, "/docs/bees.md", None, "Bees", "Bees dance.", 0.9), Source(2, "/docs/manual.pdf", 2, None, "Reset it."))
    ctx = DocsContext("Use these sources.", sources, whole_documents=True)
    answer = am.DocsContext.model_validate(ctx).model_dump()
    assert answer == {"system": "Use these sources.", "sources": [s.as_dict() for s in sources], "whole_documents": True}
    assert [s["label"] for s in answer["sources"]] == ["[1] bees.md, Bees", "[2] manual.pdf, page 2"]
    assert answer["sources"][1]["uri"] == "file:///docs/manual.pdf#page=2"

"""Files to sections with their pages and headings, and sections to chunks."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.documents.chunking import chunk_sections
from engine.documents.errors import DocumentParseError, UnsupportedDocument
from engine.documents.parsing import parse_file
from engine.documents.types import Section


def test_a_pdf_keeps_its_pages(corpus: Path):
    doc = parse_file(corpus / "manual.pdf")
    assert doc.kind == "pdf"
    assert [s.page for s in doc.sections] == [1, 2, 3]
    assert "seven years" in doc.sections[0].text
    assert "mode button" in doc.sections[1].text
    assert "air filter" in doc.sections[2].text
    assert doc.title == "Heat pump manual"


def test_markdown_sections_carry_their_heading_path(corpus: Path):
    doc = parse_file(corpus / "garden.md")
    by_heading = {s.heading: s.text for s in doc.sections}
    assert "soapy water" in by_heading["Garden notes > Tomatoes > Pests"]
    assert "late winter" in by_heading["Garden notes > Roses"]
    assert "at the base" in by_heading["Garden notes > Tomatoes"]
    assert doc.title == "Garden notes"


def test_html_keeps_headings_and_drops_scripts(corpus: Path):
    doc = parse_file(corpus / "kitchen.html")
    assert doc.title == "Kitchen handbook"
    by_heading = {s.heading: s.text for s in doc.sections}
    assert "220 degrees" in by_heading["Kitchen handbook > Baking"]
    text = " ".join(s.text for s in doc.sections)
    assert "tracking" not in text and "color: red" not in text and "About" not in text


def test_word_documents_keep_their_headings(tmp_path: Path):
    import docx

    d = docx.Document()
    d.add_heading("Travel", level=1)
    d.add_paragraph("Pack a raincoat.")
    d.add_heading("Trains", level=2)
    d.add_paragraph("The night train leaves at eleven.")
    d.save(str(tmp_path / "trip.docx"))
    doc = parse_file(tmp_path / "trip.docx")
    assert {s.heading: s.text for s in doc.sections}["Travel > Trains"] == "The night train leaves at eleven."


def test_a_corrupt_pdf_is_refused_with_a_reason(corpus: Path):
    with pytest.raises(DocumentParseError) as err:
        parse_file(corpus / "broken.pdf")
    assert "PDF" in err.value.reason
    assert str(corpus / "broken.pdf") in str(err.value)


def test_empty_binary_and_unknown_files_are_refused(tmp_path: Path):
    (tmp_path / "empty.md").write_text("  \n")
    (tmp_path / "blob.txt").write_bytes(b"\x00\x01\x02binary")
    (tmp_path / "photo.jpg").write_bytes(b"\xff\xd8\xff")
    with pytest.raises(DocumentParseError, match="no text"):
        parse_file(tmp_path / "empty.md")
    with pytest.raises(DocumentParseError, match="binary"):
        parse_file(tmp_path / "blob.txt")
    with pytest.raises(UnsupportedDocument):
        parse_file(tmp_path / "photo.jpg")


def test_chunks_stay_within_a_section_and_a_size():
    long = " ".join(f"Sentence number {i} talks about item {i}." for i in range(200))
    sections = [Section("Short intro.", page=1), Section(long + "\n\nA last paragraph.", page=2)]
    chunks = chunk_sections(sections, max_chars=300)
    assert chunks[0].text == "Short intro." and chunks[0].page == 1
    assert all(len(c.text) <= 300 for c in chunks)
    assert {c.page for c in chunks[1:]} == {2}
    assert "Sentence number 199" in " ".join(c.text for c in chunks)
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))
    # cut at sentence ends: no chunk starts in the middle of a sentence
    assert all(c.text.startswith(("Sentence", "A last", "Short")) for c in chunks)


def test_a_word_file_that_unpacks_to_too_much_text_is_refused_before_it_is_read(tmp_path: Path):
    """A few hundred KiB of .docx can unpack to gigabytes of XML (a zip bomb): refused from the archive's own sizes."""
    import zipfile

    import docx

    from engine.documents.parsing import MAX_DOCX_XML_BYTES

    d = docx.Document()
    d.add_paragraph("A real paragraph.")
    d.save(str(tmp_path / "small.docx"))
    with zipfile.ZipFile(tmp_path / "small.docx") as src, zipfile.ZipFile(tmp_path / "bomb.docx", "w", zipfile.ZIP_DEFLATED) as out:
        for item in src.infolist():
            data = src.read(item)
            if item.filename == "word/document.xml":  # the same document with a million empty paragraphs
                data = data.replace(b"</w:body>", b"<w:p/>" * (MAX_DOCX_XML_BYTES // 6 + 1) + b"</w:body>")
            out.writestr(item, data)
    assert (tmp_path / "bomb.docx").stat().st_size < 200_000
    with pytest.raises(DocumentParseError, match="unpacks to more than 16 MiB"):
        parse_file(tmp_path / "bomb.docx")
    assert parse_file(tmp_path / "small.docx").sections[0].text == "A real paragraph."


def test_a_collection_skips_pipes_and_devices_that_would_never_end(tmp_path: Path):
    import os

    from engine.documents.indexer import scan_sources

    (tmp_path / "notes.txt").write_text("Real notes.")
    (tmp_path / "empty.txt").write_text("")
    os.mkfifo(tmp_path / "pipe.txt")
    os.symlink("/dev/zero", tmp_path / "zero.txt")
    found, failed = scan_sources([str(tmp_path)])
    assert [Path(p).name for p in found] == ["notes.txt"] and not failed
    found, failed = scan_sources([str(tmp_path / "pipe.txt"), str(tmp_path / "zero.txt")])
    assert not found and [f.reason for f in failed] == ["it is not a file or a folder (a pipe or a device); remove it."] * 2


def test_a_long_paragraph_without_sentence_ends_is_cut_in_one_pass():
    """Cutting a long run of words reads it once: no cut copies the rest of the paragraph.

    The string methods the chunker calls are watched, and the characters of the strings they are called on are
    summed; copying the rest of the text after each cut makes that sum grow with the square of the length.
    """
    import sys

    text = "word " * 40_000  # 200,000 characters, no sentence ends
    touched = 0

    def watch(frame, event, arg):
        nonlocal touched
        if event == "c_call" and isinstance(getattr(arg, "__self__", None), str):
            touched += len(arg.__self__)

    sys.setprofile(watch)
    try:
        chunks = chunk_sections([Section(text)], max_chars=1000)
    finally:
        sys.setprofile(None)
    assert all(len(c.text) <= 1000 for c in chunks)
    assert " ".join(c.text.replace("\n\n", " ") for c in chunks) == text.strip()
    assert touched < 10 * len(text)

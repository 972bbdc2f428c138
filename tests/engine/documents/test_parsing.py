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


_W = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'


def _word_file(path: Path, body: str) -> Path:
    """A minimal .docx whose document body is ``body`` (WordprocessingML), written with zipfile."""
    import zipfile

    types = (
        '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
        '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
        '<Default Extension="xml" ContentType="application/xml"/>'
        '<Override PartName="/word/document.xml" ContentType='
        '"application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>'
    )
    rels = (
        '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
        '<Relationship Id="rId1" Target="word/document.xml" Type='
        '"http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument"/></Relationships>'
    )
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", types)
        z.writestr("_rels/.rels", rels)
        z.writestr("word/document.xml", f"<w:document {_W}><w:body>{body}</w:body></w:document>")
    return path


def _p(text: str) -> str:
    return f"<w:p><w:r><w:t>{text}</w:t></w:r></w:p>"


def _table_text(path: Path) -> str:
    return parse_file(path).sections[-1].text


def test_a_word_cell_spanning_many_columns_gives_its_text_once(tmp_path: Path):
    """A cell's gridSpan is a number in the file: a 1 KB file can claim a cell two billion columns wide."""

    def spanning(name: str, columns: int) -> Path:
        cell = f'<w:tc><w:tcPr><w:gridSpan w:val="{columns}"/></w:tcPr>{_p("cell text")}</w:tc>'
        return _word_file(tmp_path / name, _p("Intro.") + f"<w:tbl><w:tr>{cell}<w:tc>{_p('next')}</w:tc></w:tr></w:tbl>")

    assert _table_text(spanning("five.docx", 5)) == "cell text | next"
    assert _table_text(spanning("huge.docx", 2**31 - 1)) == "cell text | next"


def test_a_word_cell_merged_down_the_rows_is_read_once(tmp_path: Path):
    """A vMerge continuation cell has no text of its own; it is not resolved to the cell it continues."""

    def merged(name: str, rows: int) -> Path:
        first = f'<w:tr><w:tc><w:tcPr><w:vMerge w:val="restart"/></w:tcPr>{_p("merged")}</w:tc><w:tc>{_p("r0")}</w:tc></w:tr>'
        rest = "".join(
            f"<w:tr><w:tc><w:tcPr><w:vMerge/></w:tcPr><w:p/></w:tc><w:tc>{_p(f'r{i}')}</w:tc></w:tr>" for i in range(1, rows)
        )
        return _word_file(tmp_path / name, _p("Intro.") + f"<w:tbl>{first}{rest}</w:tbl>")

    assert _table_text(merged("three.docx", 3)) == "merged | r0\n | r1\n | r2"
    text = _table_text(merged("long.docx", 5000))  # one merged cell down 5,000 rows
    assert text.count("merged") == 1 and text.endswith(" | r4999")


def test_a_word_part_that_inflates_past_its_declared_size_is_read_in_bounded_memory(tmp_path: Path):
    """A zip member's headers can declare 100 bytes for a stream that inflates to 64 MiB: the member is read in
    blocks that stop at the declared size, so the file is refused without inflating the whole stream."""
    import struct
    import tracemalloc
    import zipfile
    import zlib

    from engine.documents.parsing import MAX_DOCX_XML_BYTES

    head = f"<w:document {_W}><w:body>".encode()
    block = b"<w:p/>" * (1024 * 1024 // 6)
    packed = zlib.compressobj(1, zlib.DEFLATED, -15)
    stream = packed.compress(head) + b"".join(packed.compress(block) for _ in range(64)) + packed.flush()
    declared = (head + block)[:100]  # the size and CRC the headers declare hold for the stream's first 100 bytes
    with zipfile.ZipFile(_word_file(tmp_path / "small.docx", "")) as src:
        members = [(i.filename, i.compress_type, src.read(i)) for i in src.infolist() if i.filename != "word/document.xml"]
    local, central = b"", b""
    for name, method, data in [(n, zipfile.ZIP_STORED, d) for n, _, d in members] + [("word/document.xml", 8, b"")]:
        body, size = (stream, len(declared)) if name == "word/document.xml" else (data, len(data))
        crc = zlib.crc32(declared if name == "word/document.xml" else data)
        fields = (method, 0, 0, crc, len(body), size, len(name))
        central += struct.pack("<4s4H2H3I5H2I", b"PK\x01\x02", 20, 20, 0, *fields, 0, 0, 0, 0, 0, len(local))
        central += name.encode()
        local += struct.pack("<4s3H2H3I2H", b"PK\x03\x04", 20, 0, *fields, 0) + name.encode() + body
    end = struct.pack("<4s4H2IH", b"PK\x05\x06", 0, 0, len(members) + 1, len(members) + 1, len(central), len(local), 0)
    path = tmp_path / "lying.docx"
    path.write_bytes(local + central + end)
    with zipfile.ZipFile(path) as z:
        assert z.getinfo("word/document.xml").file_size == 100
        assert z.read("word/document.xml") == declared

    tracemalloc.start()
    try:
        with pytest.raises(DocumentParseError):
            parse_file(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < MAX_DOCX_XML_BYTES


def _pdf_file(path: Path, kids: list[int], pages: int) -> Path:
    """A PDF of ``pages`` page objects (object 10 onwards), each with its own line of text, whose page tree lists
    them in the order ``kids`` gives (indexes into the pages, repeats allowed), written by hand."""
    objects = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        2: b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(b"%d 0 R" % (10 + k) for k in kids), len(kids)),
        3: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    }
    for n in range(pages):
        content = b"BT /F1 12 Tf 72 700 Td (Page %d talks about the boiler.) Tj ET" % n
        objects[1000 + n] = b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content)
        objects[10 + n] = (
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
            b"/Contents %d 0 R >>" % (1000 + n)
        )
    out, offsets = b"%PDF-1.7\n", {}
    for number in sorted(objects):
        offsets[number] = len(out)
        out += b"%d 0 obj\n%s\nendobj\n" % (number, objects[number])
    size = max(objects) + 1
    xref = len(out)
    out += b"xref\n0 %d\n" % size
    out += b"".join(b"%010d 00000 n \n" % offsets[n] if n in offsets else b"0000000000 65535 f \n" for n in range(size))
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (size, xref)
    path.write_bytes(out)
    return path


def test_a_pdf_page_listed_many_times_in_the_page_tree_is_read_once(tmp_path: Path):
    doc = parse_file(_pdf_file(tmp_path / "repeats.pdf", [0] * 100 + [1], pages=2))
    assert [(s.page, s.text) for s in doc.sections] == [
        (1, "Page 0 talks about the boiler."),
        (101, "Page 1 talks about the boiler."),
    ]


def test_a_file_past_the_text_budget_is_refused_and_reading_stops_there(tmp_path: Path, monkeypatch):
    from pypdf import PageObject

    import engine.documents.parsing as parsing

    monkeypatch.setattr(parsing, "MAX_TEXT_CHARS", 100)
    read = []
    extract = PageObject.extract_text
    monkeypatch.setattr(PageObject, "extract_text", lambda page, *a, **k: read.append(page) or extract(page, *a, **k))
    with pytest.raises(DocumentParseError) as err:  # each page gives 30 characters: the fourth is one too many
        parse_file(_pdf_file(tmp_path / "long.pdf", list(range(20)), pages=20))
    assert err.value.reason == "it holds more than 100 characters of text; split it into smaller files."
    assert len(read) == 4
    (tmp_path / "long.txt").write_text("word " * 21)
    with pytest.raises(DocumentParseError, match="more than 100 characters"):
        parse_file(tmp_path / "long.txt")
    (tmp_path / "short.txt").write_text("word " * 20)
    assert parse_file(tmp_path / "short.txt").sections[0].text == "word " * 20


def test_a_pdf_of_too_many_pages_is_refused_before_its_pages_are_read(tmp_path: Path, monkeypatch):
    import engine.documents.parsing as parsing

    monkeypatch.setattr(parsing, "MAX_PDF_PAGES", 5)
    with pytest.raises(DocumentParseError) as err:
        parse_file(_pdf_file(tmp_path / "thick.pdf", list(range(6)), pages=6))
    assert err.value.reason == "it has more than 5 pages; split it into smaller files."
    assert len(parse_file(_pdf_file(tmp_path / "thin.pdf", list(range(5)), pages=5)).sections) == 5


def test_html_and_markdown_past_their_own_size_cap_are_refused(tmp_path: Path):
    """Their parsers hold an object per tag and per token, hundreds of times the file's size; plain text is not capped."""
    from engine.documents.parsing import MAX_MARKUP_BYTES

    for name in ("page.html", "notes.md", "notes.txt"):
        (tmp_path / name).write_bytes(b"Tea. " * (MAX_MARKUP_BYTES // 5 + 1))
    for name in ("page.html", "notes.md"):
        with pytest.raises(DocumentParseError) as err:
            parse_file(tmp_path / name)
        assert err.value.reason == "it is larger than 4 MiB, the most Hearth reads of an HTML or Markdown file."
    assert parse_file(tmp_path / "notes.txt").sections[0].text.startswith("Tea. Tea.")


def _word_file_with_parts(path: Path, extra: int) -> Path:
    """A real Word file (python-docx) with ``extra`` more tiny parts in its zip."""
    import zipfile

    import docx

    d = docx.Document()
    d.add_paragraph("The otter holt is under the willow.")
    d.save(str(path))
    with zipfile.ZipFile(path, "a", zipfile.ZIP_STORED) as z:
        for i in range(extra):
            z.writestr(f"extra/part{i}.xml", b"<a/>")
    return path


def test_a_zip_of_too_many_parts_is_refused_from_its_directory_before_it_is_read(tmp_path: Path, index):
    """A 60 MB zip of 600,000 empty members took 24 s and 1 GB before any part was looked at."""
    from engine.documents import Indexer
    from engine.documents.archives import MAX_ZIP_MEMBERS, TOO_MANY_MEMBERS

    assert parse_file(_word_file_with_parts(tmp_path / "some.docx", 500)).sections[0].text.startswith("The otter")
    many = _word_file_with_parts(tmp_path / "many.docx", MAX_ZIP_MEMBERS)
    with pytest.raises(DocumentParseError) as err:
        parse_file(many)
    assert err.value.reason == TOO_MANY_MEMBERS
    # a directory that declares fewer members than it lists is refused all the same
    data = bytearray(many.read_bytes())
    end = data.rfind(b"PK\x05\x06")
    data[end + 8 : end + 12] = (100).to_bytes(2, "little") * 2
    (tmp_path / "lying.docx").write_bytes(bytes(data))
    with pytest.raises(DocumentParseError, match="more than 10,000 parts"):
        parse_file(tmp_path / "lying.docx")
    # the reason is the file's skip reason in its collection
    index.create("home", "m")
    index.add_sources("home", [tmp_path])
    assert Indexer(index).run("home").phase == "done"
    reasons = {Path(f.path).name: f.reason for f in index.info("home").failed}
    assert reasons == {"many.docx": TOO_MANY_MEMBERS, "lying.docx": TOO_MANY_MEMBERS}


def _large_page(path: Path) -> Path:
    from engine.documents.turns import LARGE_MARKUP_BYTES

    paragraph = "<p>" + "The otter holt is under the willow. " * 300 + "</p>\n"
    path.write_text("<h1>River notes</h1>\n" + paragraph * (LARGE_MARKUP_BYTES // len(paragraph) + 2))
    return path


def test_large_html_files_are_parsed_one_at_a_time_and_a_waiting_one_can_be_cancelled(tmp_path: Path):
    """Each collection parses in its own thread: four 2 MiB pages at once peaked at 1.5 GB (465 MB one at a time)."""
    import threading

    from engine.documents.errors import IndexCancelled

    first, second = _large_page(tmp_path / "first.html"), _large_page(tmp_path / "second.html")
    holding, go_on = threading.Event(), threading.Event()

    def hold() -> None:  # the first file holds its turn until told to go on
        holding.set()
        go_on.wait(30)

    checks = []

    def cancel_after_waiting() -> None:  # the second file's run: cancelled after it has waited a while
        checks.append(1)
        if len(checks) == 5:
            raise IndexCancelled()

    results: dict[str, object] = {}

    def read(name: str, path: Path, checkpoint) -> None:
        try:
            results[name] = parse_file(path, checkpoint=checkpoint)
        except IndexCancelled:
            results[name] = "cancelled"

    reading = threading.Thread(target=read, args=("first", first, hold))
    reading.start()
    assert holding.wait(30)
    waiting = threading.Thread(target=read, args=("second", second, cancel_after_waiting))
    waiting.start()
    waiting.join(30)
    assert results["second"] == "cancelled"  # it waited for the turn, and its run's cancel was heard meanwhile
    go_on.set()
    reading.join(30)
    assert results["first"].sections[0].heading == "River notes"


def test_a_large_html_file_paused_in_its_turn_gives_the_turn_up(tmp_path: Path):
    import threading

    from engine.documents import IndexControl

    first, second = _large_page(tmp_path / "first.html"), _large_page(tmp_path / "second.html")
    control = IndexControl()
    control.pause()
    results = {}
    paused = threading.Thread(
        target=lambda: results.update(first=parse_file(first, checkpoint=control.checkpoint, paused=lambda: control.paused))
    )
    paused.start()
    # another collection's large file is read while the first one's run stays paused
    assert parse_file(second).sections[0].heading == "River notes"
    assert paused.is_alive() and "first" not in results
    control.resume()
    paused.join(30)
    assert results["first"].sections[0].heading == "River notes"  # read again from its start after the pause

"""Real documents written by the tests (a PDF with pages, Markdown and HTML with headings, text, a corrupt
PDF) and the default embedding model on llama.cpp."""

from __future__ import annotations

from pathlib import Path

import pytest

PDF_PAGES = [
    ("Warranty", "The heat pump is covered by a warranty for seven years from the day of installation. "
     "Keep the receipt with the serial number."),
    ("Thermostat", "To reset the thermostat, hold the mode button down for ten seconds until the display "
     "blinks twice. The schedule returns to the factory settings."),
    ("Maintenance", "Replace the air filter every three months, or every month in dusty homes. A clogged "
     "filter makes the compressor work harder."),
]

MARKDOWN = """# Garden notes

A notebook for the allotment.

## Tomatoes

Water tomatoes at the base every morning, never on the leaves.

### Pests

Aphids and whitefly are washed off with a spray of soapy water; ladybirds eat them too.

## Roses

Prune roses in late winter, just above an outward-facing bud.
"""

HTML = """<!doctype html><html><head><title>Kitchen handbook</title><style>p { color: red }</style>
<script>var tracking = "do not index me";</script></head><body>
<nav>Home | About</nav>
<h1>Kitchen handbook</h1><p>Sharpen knives on a whetstone held at twenty degrees.</p>
<h2>Baking</h2><p>Preheat the oven to 220 degrees Celsius before the loaf goes in; sourdough bakes for forty minutes.</p>
</body></html>
"""

TEXT = "The village library opens at nine on weekdays.\n\nOn Sundays the library is closed all day.\n"


def write_pdf(path: Path, pages: list[tuple[str, str]]) -> Path:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_title("Heat pump manual")
    for title, body in pages:
        pdf.add_page()
        pdf.set_font("Helvetica", "B", 16)
        pdf.cell(0, 10, title, new_x="LMARGIN", new_y="NEXT")
        pdf.set_font("Helvetica", size=12)
        pdf.multi_cell(0, 7, body)
    pdf.output(str(path))
    return path


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """A folder of documents of every kind, and one corrupt PDF."""
    root = tmp_path / "docs"
    root.mkdir()
    write_pdf(root / "manual.pdf", PDF_PAGES)
    (root / "garden.md").write_text(MARKDOWN)
    (root / "kitchen.html").write_text(HTML)
    (root / "library.txt").write_text(TEXT)
    (root / "broken.pdf").write_bytes(b"%PDF-1.7\n1 0 obj << /Type /Catalog >> garbage with no xref\n")
    (root / "picture.png").write_bytes(b"\x89PNG\r\n\x1a\n")  # not a document: skipped in a folder
    return root


@pytest.fixture
def index(tmp_path: Path):
    from engine.documents import DocumentIndex

    idx = DocumentIndex(tmp_path / "documents.db")
    yield idx
    idx.close()


@pytest.fixture(scope="session")
def embedder():
    """all-MiniLM-L6-v2, converted to GGUF on first use, embedding through the llama.cpp backend."""
    from engine.documents import BackendEmbedder

    e = BackendEmbedder.open()
    yield e
    e.close()


def name_of(hit) -> str:
    return Path(hit.path).name


def write_long_pdf(path: Path, pages: int, text: str = "Page {n} of the long manual about kestrel {n}.") -> Path:
    """A PDF of ``pages`` pages, each its own page object and content stream with one line of ``text`` (``{n}``:
    its number), written directly: fpdf takes about 15 ms a page, and a test needs thousands of them."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"", b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    kids = []
    for n in range(1, pages + 1):
        line = text.format(n=n).encode("latin-1")
        stream = b"BT /F1 12 Tf 72 720 Td (" + line + b") Tj ET"
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >>"
            b" /Contents %d 0 R >>" % len(objects)
        )
        kids.append(b"%d 0 R" % len(objects))
    objects[1] = b"<< /Type /Pages /Count %d /Kids [%s] >>" % (pages, b" ".join(kids))
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    path.write_bytes(bytes(out))
    return path

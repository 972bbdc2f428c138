"""Files to text with their structure: PDF pages, Markdown and HTML headings, Word headings, plain text.

Each format is read by a library made for it (pypdf, markdown-it-py, markdownify, python-docx); the result
is a list of sections that keep the page or heading path every passage came from.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from engine.documents.archives import open_zip, unzip_bounded
from engine.documents.errors import DocumentParseError, IndexCancelled, UnsupportedDocument
from engine.documents.turns import MARKUP_TURNS, Checkpoint
from engine.documents.types import ParsedDocument, Section

log = logging.getLogger(__name__)

MARKDOWN = {".md", ".markdown", ".mdown", ".mkd", ".rst"}
HTML = {".html", ".htm", ".xhtml"}
TEXT = {".txt", ".text", ".log", ".csv", ".tsv", ".json", ".yaml", ".yml", ".toml", ".ini", ".cfg", ".tex"}
SOURCE = {
    ".py", ".pyi", ".c", ".h", ".cc", ".cpp", ".hpp", ".rs", ".go", ".java", ".kt", ".js", ".jsx", ".ts",
    ".tsx", ".rb", ".php", ".swift", ".cs", ".scala", ".sh", ".bash", ".zsh", ".sql", ".lua", ".r", ".m",
    ".css", ".scss", ".xml", ".vue", ".svelte", ".zig", ".dart", ".ex", ".exs", ".hs", ".ml", ".clj",
}
WORD = {".docx"}
PDF = {".pdf"}
SUPPORTED = MARKDOWN | HTML | TEXT | SOURCE | WORD | PDF
NAMED_TEXT = {"readme", "license", "copying", "makefile", "dockerfile", "changelog", "notes"}
# Bigger files are listed as failed rather than read: an index is for reading material, not dumps.
MAX_FILE_BYTES = 64 * 1024 * 1024
# The most XML a Word file may unpack to (a book of a thousand pages holds a few MiB): a file of a few hundred KiB
# can unpack to gigabytes, and python-docx holds every paragraph of it in memory.
MAX_DOCX_XML_BYTES = 16 * 1024 * 1024
# The largest HTML or Markdown file read: their parsers keep an object for every tag and every Markdown token,
# about 200 times the file's size at worst (when this was set, a 4 MB file of "<p>a</p>" peaked at 770 MB and a
# 12 MB one at 5.6 GB; 4 MB of "a\n\n" Markdown at 750 MB). A long web page or README is well under 4 MiB.
MAX_MARKUP_BYTES = 4 * 1024 * 1024
# The most text one file may give: a long novel is about 3 million characters and a 3,000-page manual about
# 10 million, so no book or manual comes near 32 million (32,000 chunks to embed). A file of a few KiB can still
# claim more (a PDF whose pages all draw the same long content stream), and such a file is refused at this bound.
MAX_TEXT_CHARS = 32_000_000
# The most pages one PDF may have: thicker reference manuals stop at a few thousand pages.
MAX_PDF_PAGES = 10_000


def document_kind(path: Path) -> str | None:
    """The kind of document ``path`` names ("pdf", "markdown", ...), or None when Hearth skips it."""
    suffix = path.suffix.lower()
    if suffix in PDF:
        return "pdf"
    if suffix in MARKDOWN:
        return "markdown"
    if suffix in HTML:
        return "html"
    if suffix in WORD:
        return "docx"
    if suffix in SOURCE:
        return "source"
    if suffix in TEXT or (not suffix and path.name.lower() in NAMED_TEXT):
        return "text"
    return None


def parse_file(
    path: Path, *, checkpoint: Checkpoint | None = None, paused: Callable[[], bool] | None = None
) -> ParsedDocument:
    """Read ``path`` into sections that keep its pages and headings.

    A file is read whole or not at all: one that gives more than ``MAX_TEXT_CHARS`` characters of text, or a PDF
    of more than ``MAX_PDF_PAGES`` pages, is refused with a reason rather than indexed in part, and reading stops
    as soon as the bound is passed. ``checkpoint`` is called between pages (a PDF), paragraphs (a Word file) and
    stages (HTML), so a run's cancel or pause takes effect inside a long file, not after it. A large HTML or
    Markdown file waits for its turn (one at a time in the process, see ``engine.documents.turns``); ``paused``
    says whether the run is paused, so that a paused file gives its turn up.

    Raises:
        IndexCancelled: ``checkpoint`` raised it (the run was cancelled while the file was read).
        UnsupportedDocument: Hearth does not index this kind of file.
        DocumentParseError: the file is unreadable, corrupt, encrypted, too large or holds no text.
    """
    kind = document_kind(path)
    if kind is None:
        raise UnsupportedDocument(str(path), f"'{path.suffix or path.name}' files are not indexed.")
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise DocumentParseError(str(path), f"it cannot be opened ({exc.strerror or exc}).") from exc
    if size > MAX_FILE_BYTES:
        raise DocumentParseError(str(path), f"it is larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB.")
    if kind in ("markdown", "html") and size > MAX_MARKUP_BYTES:
        limit = MAX_MARKUP_BYTES // (1024 * 1024)
        reason = f"it is larger than {limit} MiB, the most Hearth reads of an HTML or Markdown file."
        raise DocumentParseError(str(path), reason)
    reader = {"pdf": _pdf, "markdown": _markdown_file, "html": _html, "docx": _docx}.get(kind, _text)
    try:
        check = checkpoint or _no_checkpoint
        if kind in ("markdown", "html"):
            sections, title = MARKUP_TURNS.read(size, lambda c: reader(path, c), check, paused or _not_paused)
        else:
            sections, title = reader(path, check)
    except (DocumentParseError, IndexCancelled):
        raise
    except OSError as exc:
        raise DocumentParseError(str(path), f"it cannot be opened ({exc.strerror or exc}).") from exc
    except Exception as exc:  # a library's own error for a malformed file: the file is the problem
        log.info("could not parse %s", path, exc_info=True)
        raise DocumentParseError(str(path), f"it is not a readable {kind} file ({type(exc).__name__}: {exc}).") from exc
    _check_text_budget(path, sum(len(s.text) for s in sections))
    sections = tuple(s for s in sections if s.text.strip())
    if not sections:
        hint = " (a scanned PDF needs OCR first)" if kind == "pdf" else ""
        raise DocumentParseError(str(path), f"it holds no text{hint}.")
    return ParsedDocument(path=str(path), kind=kind, sections=sections, title=title)


def _no_checkpoint() -> None:
    pass


def _not_paused() -> bool:
    return False


def _check_text_budget(path: Path, chars: int) -> None:
    if chars > MAX_TEXT_CHARS:
        reason = f"it holds more than {MAX_TEXT_CHARS:,} characters of text; split it into smaller files."
        raise DocumentParseError(str(path), reason)


def _read_text(path: Path) -> str:
    data = path.read_bytes()
    if b"\x00" in data[:8192]:
        raise DocumentParseError(str(path), "it is a binary file, not text.")
    for encoding in ("utf-8-sig", "utf-16") if data[:2] in (b"\xff\xfe", b"\xfe\xff") else ("utf-8-sig",):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    return data.decode("latin-1")


def _text(path: Path, checkpoint: Checkpoint) -> tuple[list[Section], str | None]:
    return [Section(_read_text(path))], None


def _pdf(path: Path, checkpoint: Checkpoint) -> tuple[list[Section], str | None]:
    from pypdf import PdfReader
    from pypdf.errors import FileNotDecryptedError, PdfReadError

    # pypdf logs what it repairs in a damaged file; the file's failure, if any, is reported as its reason
    logging.getLogger("pypdf").setLevel(logging.ERROR)

    try:
        reader = PdfReader(path, strict=False)
        if reader.is_encrypted:
            try:
                reader.decrypt("")
            except Exception as exc:
                raise DocumentParseError(str(path), "it is encrypted; save an unprotected copy.") from exc
        if len(reader.pages) > MAX_PDF_PAGES:
            raise DocumentParseError(str(path), f"it has more than {MAX_PDF_PAGES:,} pages; split it into smaller files.")
        sections = []
        seen: set[tuple[int, int]] = set()  # pages already read, by object number and generation
        chars = 0
        for number, page in enumerate(reader.pages, start=1):
            checkpoint()  # a page takes a few milliseconds; ten thousand of them, most of a minute
            # A page tree may list one page object many times; a real document never does, so it is read once.
            ref = page.indirect_reference
            if ref is not None:
                if (ref.idnum, ref.generation) in seen:
                    continue
                seen.add((ref.idnum, ref.generation))
            text = _pdf_paragraphs(page.extract_text() or "")
            chars += len(text)
            _check_text_budget(path, chars)
            sections.append(Section(text, page=number))
        title = None
        meta = reader.metadata
        if meta is not None and meta.title:
            title = str(meta.title)
    except FileNotDecryptedError as exc:
        raise DocumentParseError(str(path), "it is encrypted; save an unprotected copy.") from exc
    except PdfReadError as exc:
        raise DocumentParseError(str(path), f"it is not a valid PDF ({exc}).") from exc
    return sections, title


def _pdf_paragraphs(text: str) -> str:
    """PDF text keeps its line breaks; join lines into paragraphs, keeping blank-line breaks."""
    paragraphs, current = [], []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            if current:
                paragraphs.append(" ".join(current))
                current = []
            continue
        if current and current[-1].endswith("-") and line[:1].islower():
            current[-1] = current[-1][:-1] + line  # a word hyphenated across lines
        else:
            current.append(line)
    if current:
        paragraphs.append(" ".join(current))
    return "\n\n".join(paragraphs)


def _markdown_file(path: Path, checkpoint: Checkpoint) -> tuple[list[Section], str | None]:
    source = _read_text(path)
    checkpoint()
    return markdown_sections(source)


def markdown_sections(source: str) -> tuple[list[Section], str | None]:
    """Sections of a Markdown text, one per heading, each with its heading path ("A > B")."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark")
    tokens = md.parse(source)
    lines = source.splitlines()
    # Headings by the line they start on; the text between headings is taken from the source as written.
    headings: list[tuple[int, int, int, str]] = []  # (start line, end line, level, text)
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open" and tok.map is not None:
            inline = tokens[i + 1]
            headings.append((tok.map[0], tok.map[1], int(tok.tag[1]), inline.content.strip()))
    sections: list[Section] = []
    path: list[tuple[int, str]] = []
    title = next((h[3] for h in headings if h[2] == 1), None)
    start = 0
    heading_text: str | None = None
    for line_start, line_end, level, text in headings:
        body = "\n".join(lines[start:line_start]).strip()
        if body:
            sections.append(Section(body, heading=heading_text))
        while path and path[-1][0] >= level:
            path.pop()
        path.append((level, text))
        heading_text = " > ".join(t for _, t in path)
        start = line_end
    body = "\n".join(lines[start:]).strip()
    if body:
        sections.append(Section(body, heading=heading_text))
    return sections, title


def _html(path: Path, checkpoint: Checkpoint) -> tuple[list[Section], str | None]:
    from bs4 import BeautifulSoup
    from markdownify import MarkdownConverter

    soup = BeautifulSoup(_read_text(path), "html.parser")
    checkpoint()  # each stage of a large page takes seconds, and none of them can be stopped inside
    title = soup.title.get_text(strip=True) if soup.title else None
    for tag in soup(["script", "style", "noscript", "template", "head", "nav"]):
        tag.decompose()
    markdown = MarkdownConverter(heading_style="ATX", strip=["img"]).convert_soup(soup)
    soup.decompose()  # the tree is let go before the Markdown is parsed, so the two are not held at once
    del soup
    checkpoint()
    sections, md_title = markdown_sections(markdown)
    return sections, title or md_title


def _docx(path: Path, checkpoint: Checkpoint) -> tuple[list[Section], str | None]:
    import io
    import zipfile

    import docx

    with open_zip(path) as zf:  # each part's size as the archive declares it: no part reads past its own
        xml = sum(i.file_size for i in zf.infolist() if _docx_is_xml(i.filename))
    if xml > MAX_DOCX_XML_BYTES:
        raise DocumentParseError(str(path), _DOCX_TOO_BIG)
    # The declared sizes can lie, so the parts are inflated again here under the same bound, and python-docx reads
    # this copy of them rather than the file.
    parts = unzip_bounded(path, _docx_is_xml, MAX_DOCX_XML_BYTES, _DOCX_TOO_BIG)
    package = io.BytesIO()
    with zipfile.ZipFile(package, "w", zipfile.ZIP_STORED) as out:
        for name, data in parts.items():
            out.writestr(name, data)
    package.seek(0)
    document = docx.Document(package)
    sections: list[Section] = []
    path_stack: list[tuple[int, str]] = []
    heading: str | None = None
    body: list[str] = []
    title = document.core_properties.title or None
    checkpoint()
    for number, para in enumerate(document.paragraphs):
        if number % 256 == 0:
            checkpoint()
        style = (para.style.name or "") if para.style is not None else ""
        text = para.text.strip()
        level = _docx_heading_level(style)
        if level is not None and text:
            if body:
                sections.append(Section("\n\n".join(body), heading=heading))
                body = []
            while path_stack and path_stack[-1][0] >= level:
                path_stack.pop()
            path_stack.append((level, text))
            heading = " > ".join(t for _, t in path_stack)
            title = title or (text if level <= 1 else None)
        elif text:
            body.append(text)
    if body:
        sections.append(Section("\n\n".join(body), heading=heading))
    for table in document.tables:
        checkpoint()
        rows = _docx_table_rows(table._tbl)
        if rows:
            sections.append(Section("\n".join(rows), heading=heading))
    return sections, title


_DOCX_TOO_BIG = f"its text unpacks to more than {MAX_DOCX_XML_BYTES // (1024 * 1024)} MiB; split it into smaller files."


def _docx_is_xml(name: str) -> bool:
    return name.lower().endswith((".xml", ".rels"))


def _docx_table_rows(tbl) -> list[str]:
    """A Word table's rows as text, its cells joined by " | ", each cell as the file writes it.

    The ``w:tc`` elements of each ``w:tr`` are read directly, so each cell gives its text once: a cell that spans
    many grid columns (``w:gridSpan``) is not repeated for each column, and a cell that continues the merged cell
    above it (``w:vMerge``) gives its own (empty) text instead of a search up the rows for the cell it continues.
    A table thus gives one entry per cell element, and its text is no larger than the XML it came from.
    """
    from docx.oxml.ns import qn

    rows = []
    for tr in tbl.iterchildren(qn("w:tr")):
        cells = ["\n".join(p.text for p in tc.iterchildren(qn("w:p"))).strip() for tc in tr.iterchildren(qn("w:tc"))]
        if any(cells):
            rows.append(" | ".join(cells))
    return rows


def _docx_heading_level(style: str) -> int | None:
    if style == "Title":
        return 1
    if style.startswith("Heading"):
        rest = style[len("Heading"):].strip()
        return int(rest) if rest.isdigit() else 1
    return None

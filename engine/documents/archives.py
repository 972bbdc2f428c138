"""Zip-based documents (a Word file is a zip of XML parts) opened within bounds.

Python's zipfile reads a whole central directory into objects when it opens an archive, one per member: a file of
60 MB can list 600,000 empty members, which took 24 s and 1 GB here before a single part was looked at. The
directory's own size and member count are read from its end record first, and an archive past the bounds is
refused before zipfile sees it; the parts that are read are then inflated a block at a time under a byte budget.
"""

from __future__ import annotations

import struct
import zipfile
from collections.abc import Callable
from pathlib import Path

from engine.documents.errors import DocumentParseError

# The most members a document's zip may have: a Word file holds a few dozen parts, one with many pictures a few
# hundred, an EPUB of a long book a few thousand.
MAX_ZIP_MEMBERS = 10_000
# The largest central directory read: an entry is 46 bytes and its name, so 10,000 members with names of a few
# hundred characters each.
MAX_ZIP_DIRECTORY_BYTES = MAX_ZIP_MEMBERS * 512
TOO_MANY_MEMBERS = (
    f"it is a zip of more than {MAX_ZIP_MEMBERS:,} parts, which no real document has; save it again from the"
    " program that made it to index it."
)
# Members are inflated this many bytes at a time, so one read never holds more than this of a member.
_BLOCK = 64 * 1024
_END = struct.Struct("<4s4H2LH")  # end of central directory record
_END64_LOCATOR = struct.Struct("<4sLQL")
_END64 = struct.Struct("<4sQ2H2L4Q")


def directory_size(path: Path) -> tuple[int, int] | None:
    """The member count and central directory bytes the archive's end record declares (its Zip64 record where
    there is one), or None when it has no end record (zipfile then refuses it as it always did)."""
    with open(path, "rb") as f:
        f.seek(0, 2)
        size = f.tell()
        tail_start = max(0, size - _END.size - 0xFFFF)  # the record, after it a comment of up to 64 KiB
        f.seek(tail_start)
        tail = f.read()
        # where zipfile looks: a record with no comment at the very end, else the last one before a comment
        at = len(tail) - _END.size if tail[-_END.size:].startswith(b"PK\x05\x06") else -1
        if at < 0:
            at = tail.rfind(b"PK\x05\x06", 0, len(tail) - _END.size + 4)
        if at < 0:
            return None
        _, _, _, _, members, cd_bytes, _, _ = _END.unpack_from(tail, at)
        locator = tail_start + at - _END64_LOCATOR.size
        if locator >= 0:
            f.seek(locator)
            sig, _, end64, _ = _END64_LOCATOR.unpack(f.read(_END64_LOCATOR.size))
            if sig == b"PK\x06\x07" and end64 + _END64.size <= size:
                f.seek(end64)
                record = _END64.unpack(f.read(_END64.size))
                if record[0] == b"PK\x06\x06":
                    members, cd_bytes = max(members, record[7]), max(cd_bytes, record[8])
    return members, cd_bytes


def open_zip(path: Path) -> zipfile.ZipFile:
    """The archive at ``path``, once its central directory is known to be within the bounds.

    Raises:
        DocumentParseError: it declares more than ``MAX_ZIP_MEMBERS`` members or a directory larger than
            ``MAX_ZIP_DIRECTORY_BYTES`` (the reason is the file's skip reason), or lists more members than it
            declared.
        zipfile.BadZipFile: it is not a zip archive.
    """
    declared = directory_size(path)
    if declared is not None and (declared[0] > MAX_ZIP_MEMBERS or declared[1] > MAX_ZIP_DIRECTORY_BYTES):
        raise DocumentParseError(str(path), TOO_MANY_MEMBERS)
    zf = zipfile.ZipFile(path)
    if len(zf.filelist) > MAX_ZIP_MEMBERS:  # a count that lied: the directory it was read from was small all the same
        zf.close()
        raise DocumentParseError(str(path), TOO_MANY_MEMBERS)
    return zf


def unzip_bounded(path: Path, wanted: Callable[[str], bool], limit: int, reason: str) -> dict[str, bytes]:
    """Every member of the zip archive at ``path``, the ones ``wanted`` accepts inflated, the others left empty.

    The wanted members are inflated a block at a time and reading stops once they add up to more than ``limit``
    bytes, whatever sizes the archive declares: a member that claims a few bytes and inflates to gigabytes costs
    no more memory than ``limit``. The other members (pictures, fonts) are not inflated at all.

    Raises:
        DocumentParseError: the wanted members unpack to more than ``limit`` bytes, with ``reason``; or the archive
            has too many members (see ``open_zip``).
    """
    parts: dict[str, bytes] = {}
    total = 0
    with open_zip(path) as zf:
        for info in zf.infolist():
            if info.is_dir():
                continue
            if not wanted(info.filename):
                parts[info.filename] = b""
                continue
            blocks = []
            with zf.open(info) as member:
                while block := member.read(_BLOCK):
                    total += len(block)
                    if total > limit:
                        raise DocumentParseError(str(path), reason)
                    blocks.append(block)
            parts[info.filename] = b"".join(blocks)
    return parts

"""Server-sent events: bytes in, ``data:`` payloads out (one per event)."""

from __future__ import annotations

DONE = "[DONE]"


class SseParser:
    """Incremental parser: :meth:`feed` takes whatever arrived and returns the complete events.

    Lines may end in LF, CRLF or CR and may be split anywhere between two reads. Multi-line
    ``data:`` fields join with a newline; comments (``:``) and other fields are skipped.
    """

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[str]:
        self._buffer += chunk
        events: list[str] = []
        while True:
            cut = self._line_end()
            if cut is None:
                return events
            end, skip = cut
            line = self._buffer[:end].decode("utf-8", errors="replace")
            self._buffer = self._buffer[end + skip :]
            if not line:
                if self._data:
                    events.append("\n".join(self._data))
                    self._data = []
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            if name == "data":
                self._data.append(value[1:] if value.startswith(" ") else value)

    def _line_end(self) -> tuple[int, int] | None:
        buf = self._buffer
        lf = buf.find(b"\n")
        cr = buf.find(b"\r")
        if cr != -1 and (lf == -1 or cr < lf):
            if cr == len(buf) - 1:
                return None  # a CR at the end may be the first half of CRLF
            return cr, 2 if buf[cr + 1 : cr + 2] == b"\n" else 1
        if lf != -1:
            return lf, 1
        return None

    def close(self) -> list[str]:
        """Events still pending when the stream ended without a blank line."""
        events = self.feed(b"\n\n") if self._buffer or self._data else []
        self._buffer = b""
        return events

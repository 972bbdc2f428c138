"""MemoryBar: how a model and its context fill a memory (VRAM or RAM), drawn as one bar.

:func:`estimate_memory` is a rough local estimate for the picture: the file's bytes, the KV
cache for the chosen context and a runtime overhead. The worker's advisor is the authority on
whether a variant fits; this bar shows the proportions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPainterPath
from PySide6.QtWidgets import QSizePolicy, QWidget

from app.net.types import ModelInfo
from app.theme import ThemeColors

RUNTIME_BASE = 32 * 1024**2
RUNTIME_SHARE = 0.04
KV_PER_SQRT_PARAM = 1.4  # bytes per token per sqrt(parameters): GQA models of 0.1-70B land near this


@dataclass(frozen=True, slots=True)
class MemoryNeed:
    weights: int
    kv_cache: int
    overhead: int
    kv_estimated: bool

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.overhead


def estimate_memory(model: ModelInfo, context: int) -> MemoryNeed:
    """Bytes ``model`` takes loaded with ``context`` tokens of context (the KV cache estimated from its
    parameters: the worker's plan, ``GET /api/fit``, has the file's own figure)."""
    params = model.parameters or model.size_bytes * 2
    per_token = int(KV_PER_SQRT_PARAM * math.sqrt(max(params, 1)))
    weights = model.size_bytes
    return MemoryNeed(
        weights=weights,
        kv_cache=per_token * context,
        overhead=RUNTIME_BASE + int(weights * RUNTIME_SHARE),
        kv_estimated=True,
    )


class MemoryBar(QWidget):
    """A capacity bar with the need's parts stacked from the left; red past the end."""

    def __init__(self, colors: ThemeColors, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.colors = colors
        self.need: MemoryNeed | None = None
        self.capacity = 0
        self.setMinimumHeight(22)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return QSize(400, 22)

    def set_values(self, need: MemoryNeed | None, capacity: int) -> None:
        self.need = need
        self.capacity = capacity
        self.update()

    def set_colors(self, colors: ThemeColors) -> None:
        self.colors = colors
        self.update()

    @property
    def fits(self) -> bool:
        return self.need is not None and self.capacity > 0 and self.need.total <= self.capacity

    def paintEvent(self, _event) -> None:  # noqa: N802 - Qt override
        c = self.colors
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        rect = QRectF(self.rect()).adjusted(0.5, 0.5, -0.5, -0.5)
        clip = QPainterPath()
        clip.addRoundedRect(rect, 7, 7)
        painter.setClipPath(clip)
        painter.fillRect(rect, QColor(c.raised))
        if self.need is not None and self.capacity > 0:
            scale = rect.width() / max(self.capacity, self.need.total)
            x = rect.left()
            weights = QColor(c.accent)
            kv = QColor(c.accent)
            kv.setAlpha(150)
            overhead = QColor(c.muted)
            for part, color in ((self.need.weights, weights), (self.need.kv_cache, kv), (self.need.overhead, overhead)):
                width = part * scale
                painter.fillRect(QRectF(x, rect.top(), width, rect.height()), color)
                x += width
            if self.need.total > self.capacity:
                edge = rect.left() + self.capacity * scale
                painter.fillRect(QRectF(edge, rect.top(), x - edge, rect.height()), QColor(c.error_text))
        painter.setClipping(False)
        painter.setPen(QColor(c.border))
        painter.setBrush(Qt.BrushStyle.NoBrush)
        painter.drawRoundedRect(rect, 7, 7)
        painter.end()

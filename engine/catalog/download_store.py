"""Download state in the registry's SQLite database (table ``downloads``), so it survives a crash.

One row per download: what is fetched (repo, variant, the pinned commit, the files with their
sizes and hashes), how far it got, and how it ended.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import DateTime, Integer, String, Text, delete, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Mapped, Session, mapped_column

from engine.catalog.registry import Base
from engine.catalog.variants import RemoteFile


class DownloadRow(Base):
    __tablename__ = "downloads"

    id: Mapped[str] = mapped_column(String, primary_key=True)
    repo: Mapped[str] = mapped_column(String, index=True)
    variant: Mapped[str] = mapped_column(String)
    revision: Mapped[str] = mapped_column(String)
    format: Mapped[str] = mapped_column(String)
    files: Mapped[str] = mapped_column(Text)  # JSON: [{path, size, sha256, blob_id}]
    done_files: Mapped[str] = mapped_column(Text, default="[]")  # JSON: paths fetched and verified
    state: Mapped[str] = mapped_column(String)
    bytes_total: Mapped[int] = mapped_column(Integer, default=0)
    bytes_done: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    model_name: Mapped[str | None] = mapped_column(String, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=lambda: datetime.now(UTC))
    updated_at: Mapped[datetime] = mapped_column(DateTime, default=lambda: datetime.now(UTC))


@dataclass(frozen=True, slots=True)
class DownloadPlan:
    """What one download fetches: a variant of a repo at a pinned commit."""

    id: str
    repo: str
    variant: str
    revision: str
    format: str
    files: tuple[RemoteFile, ...]

    @property
    def name(self) -> str:
        """The registry name the model gets: ``REPO:VARIANT``."""
        return f"{self.repo}:{self.variant}"

    @property
    def bytes_total(self) -> int:
        return sum(f.size for f in self.files)


@dataclass(frozen=True, slots=True)
class StoredDownload:
    plan: DownloadPlan
    state: str
    done_files: frozenset[str]
    bytes_done: int
    error: str | None
    model_name: str | None
    created_at: datetime


class DownloadStore:
    """Reads and writes download rows; safe to use from several threads."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        Base.metadata.create_all(engine, tables=[Base.metadata.tables[DownloadRow.__tablename__]])
        self._lock = threading.Lock()

    def save(
        self,
        plan: DownloadPlan,
        *,
        state: str,
        done_files: frozenset[str] | set[str],
        bytes_done: int,
        error: str | None = None,
        model_name: str | None = None,
    ) -> None:
        with self._lock, Session(self.engine) as s:
            row = s.get(DownloadRow, plan.id)
            if row is None:
                row = DownloadRow(
                    id=plan.id,
                    repo=plan.repo,
                    variant=plan.variant,
                    revision=plan.revision,
                    format=plan.format,
                    files=json.dumps([f.to_dict() for f in plan.files]),
                    bytes_total=plan.bytes_total,
                )
                s.add(row)
            row.state = state
            row.done_files = json.dumps(sorted(done_files))
            row.bytes_done = bytes_done
            row.error = error
            row.model_name = model_name
            row.updated_at = datetime.now(UTC)
            s.commit()

    def load_all(self) -> list[StoredDownload]:
        with Session(self.engine) as s:
            rows = list(s.scalars(select(DownloadRow).order_by(DownloadRow.created_at)))
            return [
                StoredDownload(
                    plan=DownloadPlan(
                        id=r.id,
                        repo=r.repo,
                        variant=r.variant,
                        revision=r.revision,
                        format=r.format,
                        files=tuple(RemoteFile(**f) for f in json.loads(r.files)),
                    ),
                    state=r.state,
                    done_files=frozenset(json.loads(r.done_files or "[]")),
                    bytes_done=r.bytes_done,
                    error=r.error,
                    model_name=r.model_name,
                    created_at=r.created_at,
                )
                for r in rows
            ]

    def any_to_resume(self) -> bool:
        """Whether a download was queued or running when the process that ran it stopped (what a new manager
        resumes: engine.catalog.downloads, ``DownloadState.active``)."""
        with Session(self.engine) as s:
            found = s.scalar(select(DownloadRow.id).where(DownloadRow.state.in_(("queued", "running"))).limit(1))
            return found is not None

    def delete(self, download_id: str) -> None:
        with self._lock, Session(self.engine) as s:
            s.execute(delete(DownloadRow).where(DownloadRow.id == download_id))
            s.commit()

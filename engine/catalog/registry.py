"""The local model registry: every model Hearth can run, in SQLite through SQLAlchemy.

Names are the one way to refer to a model everywhere (CLI, API ``model`` field, app):
``REPO:VARIANT`` for Hub downloads (plain ``REPO`` when only one variant is local),
and short names for the starter model and imported files.
"""

from __future__ import annotations

import json
import logging
import re
import sqlite3
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import (
    Boolean,
    DateTime,
    Engine,
    Integer,
    String,
    Text,
    create_engine,
    func,
    inspect,
    select,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from engine.errors import AmbiguousModel, InvalidRequest, ModelLoadError, ModelNotFound
from engine.paths import hearth_home, private_file
from engine.starter import STARTER_NAME, STARTER_REPO, starter_model_path
from engine.types import ModelSpec

log = logging.getLogger(__name__)


class Base(DeclarativeBase):
    pass


class ModelRow(Base):
    __tablename__ = "models"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String, unique=True, index=True)
    repo: Mapped[str | None] = mapped_column(String, nullable=True, index=True)
    variant: Mapped[str | None] = mapped_column(String, nullable=True)
    path: Mapped[str] = mapped_column(String)
    format: Mapped[str] = mapped_column(String, default="gguf")
    source: Mapped[str] = mapped_column(String, default="import")  # starter | hub | import | upload | other-app
    size_bytes: Mapped[int] = mapped_column(Integer, default=0)
    quantization: Mapped[str | None] = mapped_column(String, nullable=True)
    architecture: Mapped[str | None] = mapped_column(String, nullable=True)
    parameters: Mapped[int | None] = mapped_column(Integer, nullable=True)
    context_length: Mapped[int | None] = mapped_column(Integer, nullable=True)
    has_chat_template: Mapped[bool] = mapped_column(Boolean, default=False)
    sha256: Mapped[str | None] = mapped_column(String, nullable=True)
    added_at: Mapped[datetime] = mapped_column(DateTime, default=lambda: datetime.now(UTC))
    # Another app's model, read in place (engine.catalog.other_apps): ollama | lmstudio | jan | gpt4all | hf-cache
    origin: Mapped[str | None] = mapped_column(String, nullable=True, index=True)
    # JSON: what its owner says about it (Ollama's manifest, params, system, translated template; the mmproj)
    origin_info: Mapped[str | None] = mapped_column(Text, nullable=True)


#: Where a model's files are Hearth's own, deleted with the model: Hub downloads, and GGUF files sent to Hearth's
#: port to build a model from (Ollama's ``/api/blobs`` and ``/api/create``).
OWN_FILES = ("hub", "upload")

# Columns added after the first release: an older registry.db gets them on open (create_all adds no columns).
_ADDED_COLUMNS = {"origin": "VARCHAR", "origin_info": "TEXT"}


def _add_missing_columns(engine: Engine) -> None:
    present = {c["name"] for c in inspect(engine).get_columns("models")}
    with engine.begin() as conn:
        for name, sql_type in _ADDED_COLUMNS.items():
            if name not in present:
                conn.execute(text(f"ALTER TABLE models ADD COLUMN {name} {sql_type}"))
                log.info("registry: added the column %s", name)


@dataclass(frozen=True, slots=True)
class LocalModel:
    """A registered model, as the CLI, the API and the app show it."""

    name: str
    path: Path
    format: str
    source: str
    size_bytes: int
    repo: str | None = None
    variant: str | None = None
    quantization: str | None = None
    architecture: str | None = None
    parameters: int | None = None
    context_length: int | None = None
    has_chat_template: bool = False
    sha256: str | None = None
    added_at: datetime | None = None
    origin: str | None = None
    origin_info: Mapping[str, object] | None = None

    @property
    def since(self) -> datetime | None:
        """When the model came: its registration, else (a model served from a path) its file's or folder's last
        change; None when neither can be read."""
        if self.added_at is not None:
            return self.added_at if self.added_at.tzinfo is not None else self.added_at.replace(tzinfo=UTC)
        try:
            return datetime.fromtimestamp(self.path.stat().st_mtime, UTC)
        except OSError:
            return None

    @property
    def chat_template(self) -> str | None:
        """A chat template that replaces the file's own: an Ollama model's translated template."""
        info = self.origin_info or {}
        template = info.get("template")
        return template if info.get("template_source") == "ollama" and isinstance(template, str) else None

    @property
    def derived_from(self) -> str | None:
        """The model this one was made from with other defaults (Ollama's ``create`` from a model, or ``copy``)."""
        found = (self.origin_info or {}).get("derived_from")
        return found if isinstance(found, str) and found else None

    @property
    def created(self) -> bool:
        """Whether the entry was made by Ollama's ``create`` or ``copy`` (or ``hearth create``): such a name is
        replaced when it is made again, as Ollama replaces it."""
        return bool((self.origin_info or {}).get("created")) or self.derived_from is not None or self.source == "upload"

    @property
    def owns_files(self) -> bool:
        """Whether removing the model deletes its files (Hearth's own download or upload, never another app's)."""
        return self.source in OWN_FILES and not self.origin

    @property
    def mmproj(self) -> Path | None:
        """The multimodal projector paired with the model (another app's beside it, or one named at import)."""
        found = (self.origin_info or {}).get("mmproj")
        return Path(found) if isinstance(found, str) and found else None

    @property
    def spec(self) -> ModelSpec:
        return ModelSpec(
            name=self.name, path=self.path, format=self.format, chat_template=self.chat_template,  # type: ignore[arg-type]
            mmproj=self.mmproj,
        )

    @classmethod
    def from_row(cls, row: ModelRow) -> LocalModel:
        return cls(
            name=row.name,
            path=Path(row.path),
            format=row.format,
            source=row.source,
            size_bytes=row.size_bytes,
            repo=row.repo,
            variant=row.variant,
            quantization=row.quantization,
            architecture=row.architecture,
            parameters=row.parameters,
            context_length=row.context_length,
            has_chat_template=row.has_chat_template,
            sha256=row.sha256,
            added_at=row.added_at,
            origin=row.origin,
            origin_info=json.loads(row.origin_info) if row.origin_info else None,
        )


_SPLIT_PART = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


def check_importable(path: Path) -> None:
    """Refuse what must never be registered: unfinished downloads and later parts of split GGUF files.

    Raises:
        ModelLoadError: naming the path and what to do instead.
    """
    if ".partial" in path.parts or path.name.endswith(".part"):
        raise ModelLoadError(str(path), "it is an unfinished download; resume it with `hearth pull` instead.")
    m = _SPLIT_PART.search(path.name)
    if m and int(m.group(1)) != 1:
        first = path.with_name(_SPLIT_PART.sub(f"-00001-of-{m.group(2)}.gguf", path.name))
        raise ModelLoadError(str(path), f"it is part {int(m.group(1))} of a split model; import the first part, {first.name}.")


def overlaps(a: Path, b: Path) -> bool:
    """Whether deleting one of two models' paths touches the other's: the same file or folder, or one inside the other."""
    return a == b or a in b.parents or b in a.parents


def delete_model_files(path: Path, *, stop_at: Path) -> None:
    """Delete a downloaded model: its folder, or its GGUF file with every split part beside it,
    then the folders left empty up to ``stop_at``."""
    import shutil

    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        m = _SPLIT_PART.search(path.name)
        if m:
            prefix = path.name[: m.start()]
            for part in path.parent.glob(f"{prefix}-*-of-{m.group(2)}.gguf"):
                part.unlink(missing_ok=True)
        path.unlink(missing_ok=True)
    parent = path.parent
    stop_at = stop_at.resolve()
    while parent.resolve() != stop_at and stop_at in parent.resolve().parents:
        try:
            parent.rmdir()
        except OSError:
            break
        parent = parent.parent


def short_name(text: str) -> str:
    """A lower-case, dash-separated name made from a file or repo name."""
    stem = re.sub(r"\.gguf$", "", text, flags=re.IGNORECASE)
    return re.sub(r"[^a-z0-9._-]+", "-", stem.lower()).strip("-") or "model"


_MOST_REMEMBERED = 1024  # lookups a registry keeps answers for


class ModelRegistry:
    """The registry database in ``home`` (HEARTH_HOME or the platform data folder).

    Args:
        home: The data folder; defaults to :func:`engine.paths.hearth_home`.
        register_starter: Register the bundled starter model if it is missing.
    """

    def __init__(self, home: Path | None = None, *, register_starter: bool = True) -> None:
        self.home = home or hearth_home()
        self.home.mkdir(parents=True, exist_ok=True)
        database = private_file(self.home / "registry.db")
        self.engine = create_engine(f"sqlite:///{database}", future=True)
        Base.metadata.create_all(self.engine)
        _add_missing_columns(self.engine)
        self._lock = threading.Lock()
        # Every request names its model: a lookup through the ORM took 0.27 ms of the worker's CPU (about 2 ms in a
        # burst). Answers are kept until the database changes, as told by a connection of its own that never writes:
        # SQLite changes its data_version whenever another connection, in any process, commits.
        self._watch = sqlite3.connect(database, check_same_thread=False)
        self._watch_lock = threading.Lock()
        self._found: dict[str, tuple[int, LocalModel | None]] = {}
        if register_starter:
            self.ensure_starter()

    def ensure_starter(self) -> LocalModel | None:
        """Register the bundled starter model (or repair its path after a reinstall)."""
        path = starter_model_path()
        if path is None:
            return None
        with self._lock, Session(self.engine) as s:
            row = s.scalar(select(ModelRow).where(ModelRow.name == STARTER_NAME))
            if row is not None and row.path == str(path):
                return LocalModel.from_row(row)
        return self.register(
            path,
            name=STARTER_NAME,
            source="starter",
            repo=STARTER_REPO,
            variant="Q4_1",
            replace=True,
        )

    def register(
        self,
        path: Path,
        *,
        name: str | None = None,
        source: str = "import",
        repo: str | None = None,
        variant: str | None = None,
        sha256: str | None = None,
        replace: bool = False,
        origin: str | None = None,
        origin_info: Mapping[str, object] | None = None,
    ) -> LocalModel:
        """Add a model file or folder; metadata is read from its GGUF header or config.json.

        ``origin`` marks another app's model, registered where it lies: its path is kept as found (the
        Hugging Face cache's snapshot links are not resolved to their blobs).

        Raises:
            ModelLoadError: the path is missing or not a model Hearth can read.
            InvalidRequest: the name is taken and ``replace`` is false.
        """
        from engine.catalog.metadata import read_model_metadata

        path = Path(path).expanduser()
        path = path.absolute() if origin else path.resolve()
        check_importable(path)
        meta = read_model_metadata(path)
        if name is None:
            name = f"{repo}:{variant}" if repo and variant else short_name(path.name)
        with self._lock, Session(self.engine) as s:
            row = s.scalar(select(ModelRow).where(ModelRow.name == name))
            if row is not None and not replace:
                raise InvalidRequest(f"A model named '{name}' is already registered; remove it first or pick another name.")
            if row is None:
                row = ModelRow(name=name)
                s.add(row)
            row.path = str(path)
            row.repo = repo
            row.variant = variant
            row.source = source
            row.format = meta.format
            row.size_bytes = meta.size_bytes
            row.quantization = meta.quantization or variant
            row.architecture = meta.architecture
            row.parameters = meta.parameters
            row.context_length = meta.context_length
            row.has_chat_template = meta.has_chat_template
            row.sha256 = sha256
            row.origin = origin
            row.origin_info = json.dumps(dict(origin_info)) if origin_info else None
            if origin_info and origin_info.get("template_source") == "ollama":
                row.has_chat_template = True
            s.commit()
            return LocalModel.from_row(row)

    def derive(self, base: LocalModel, name: str, info: Mapping[str, object]) -> LocalModel:
        """Register ``name`` as ``base``'s files with ``info`` for its ``origin_info`` (its own defaults and
        template): Ollama's ``create`` from a model and ``copy``. The files are shared and stay ``base``'s: the
        new entry keeps its source (a Hub download's files go with the last entry that uses them) and its origin
        (another app's files are never deleted), not its repo (the repo's name keeps naming the download). ``name``
        may be ``base``'s own (new defaults for it) or that of a model made so before (:attr:`LocalModel.created`),
        which it replaces; files that one alone used go with it.

        Raises:
            InvalidRequest: ``name`` is another model's, ``base`` is another app's and ``name`` its own, or ``base``
                is served from a path and ``name`` its own.
        """
        info = dict(info)
        replaced: LocalModel | None = None
        with self._lock, Session(self.engine) as s:
            row = s.scalar(select(ModelRow).where(ModelRow.name == name))
            if name == base.name:
                if row is None:
                    raise InvalidRequest(f"'{name}' is served from a path, not registered; create the model under another name.")
                if base.origin and base.derived_from is None:
                    raise InvalidRequest(
                        f"'{name}' is read in place from another app, which owns its settings; create the model under another name."
                    )
            elif row is not None:
                replaced = LocalModel.from_row(row)
                if not replaced.created:
                    raise InvalidRequest(f"A model named '{name}' is already registered; remove it first or pick another name.")
            else:
                self._refuse_case_twin(s, name)
                row = ModelRow(name=name)
                s.add(row)
            if name != base.name:
                info["derived_from"] = base.name
                info["created"] = True
                if base.origin and (base.origin_info or {}).get("manifest"):  # it goes when its app deletes the model
                    info["manifest"] = (base.origin_info or {})["manifest"]
                row.path = str(base.path)
                row.repo, row.variant, row.format = None, None, base.format
                row.source = "import" if base.source in ("starter", "path") else base.source
                row.size_bytes, row.quantization, row.architecture = base.size_bytes, base.quantization, base.architecture
                row.parameters, row.context_length, row.sha256 = base.parameters, base.context_length, base.sha256
                row.origin = base.origin
                row.added_at = datetime.now(UTC)
            row.has_chat_template = base.has_chat_template or info.get("template_source") == "ollama"
            row.origin_info = json.dumps(info) if info else None
            s.commit()
            made = LocalModel.from_row(row)
        if replaced is not None:
            self.release_files(replaced)
        return made

    @staticmethod
    def _refuse_case_twin(s: Session, name: str) -> None:
        twin = s.scalar(select(ModelRow.name).where(func.lower(ModelRow.name) == name.lower(), ModelRow.name != name))
        if twin is not None:
            raise InvalidRequest(f"'{name}' differs from the model '{twin}' only in case; use that name, or another.")

    def made_again(self, name: str) -> LocalModel | None:
        """The entry a model made under ``name`` (Ollama's ``create``, ``hearth create``) replaces: one made so before,
        or None for a new name.

        Raises:
            InvalidRequest: ``name`` is another model's, or matches another's but for case (Ollama refuses it too:
                names are looked up in any case).
        """
        existing = self.get(name)
        if existing is not None and not existing.created:
            raise InvalidRequest(f"A model named '{name}' is already registered; remove it first or pick another name.")
        if existing is None:
            with Session(self.engine) as s:
                self._refuse_case_twin(s, name)
        return existing

    def shares_files(self, model: LocalModel) -> bool:
        """Whether another entry uses ``model``'s files (one made from it by Ollama's create or copy, or a variant whose
        file lies in the folder ``model`` is, a repo's safetensors beside its GGUF files): removing ``model`` then
        leaves them."""
        return any(overlaps(m.path, model.path) and m.name != model.name for m in self.list())

    def release_files(self, model: LocalModel) -> None:
        """Delete the files of ``model``, an entry removed or replaced, when they are Hearth's own (a download or an
        upload) and no entry uses them now: the model's file (with its split parts) and its projector, unless
        another entry is paired with that."""
        if not model.owns_files or not model.path.exists():
            return
        others = self.list()
        if any(overlaps(m.path, model.path) for m in others):
            return
        projector = model.mmproj
        if projector is not None and not any(m.mmproj == projector for m in others):
            projector.unlink(missing_ok=True)  # pulled or sent with it, and no other entry is paired with it
        delete_model_files(model.path, stop_at=self.home / "models")

    def list(self) -> list[LocalModel]:
        with Session(self.engine) as s:
            return [LocalModel.from_row(r) for r in s.scalars(select(ModelRow).order_by(ModelRow.added_at))]

    def _data_version(self) -> int:
        with self._watch_lock:
            return self._watch.execute("PRAGMA data_version").fetchone()[0]

    def get(self, name: str) -> LocalModel | None:
        version = self._data_version()  # read before the row: a change after it is seen at the next lookup
        known = self._found.get(name)
        if known is not None and known[0] == version:
            return known[1]
        with Session(self.engine) as s:
            row = s.scalar(select(ModelRow).where(ModelRow.name == name))
            found = LocalModel.from_row(row) if row else None
        if len(self._found) >= _MOST_REMEMBERED:  # names a client made up are remembered too: bounded
            self._found.clear()
        self._found[name] = (version, found)
        return found

    def resolve(self, name: str, *, fold_case: bool = True) -> LocalModel:
        """The model called ``name``: an exact name (or, without a tag, that name's ``:latest``, as Ollama's models
        are named), or a repo with a single local variant; else (``fold_case``)
        the same in another case, where one model alone matches so (``SmolLM2-135M-Instruct``: names are matched
        as Ollama and the Hub match them).

        Raises:
            ModelNotFound: nothing local matches.
        """
        found = self.get(name)
        if found is None and name and ":" not in name.rsplit("/", 1)[-1]:
            found = self.get(f"{name}:latest")  # as Ollama reads a name without a tag (its models keep theirs)
        if found is not None:
            return found
        with Session(self.engine) as s:
            rows = list(s.scalars(select(ModelRow).where(ModelRow.repo == name)))
            if not rows and fold_case:
                folded = name.lower()
                named = list(s.scalars(select(ModelRow).where(func.lower(ModelRow.name) == folded)))
                rows = named or list(s.scalars(select(ModelRow).where(func.lower(ModelRow.repo) == folded)))
                if len(named) > 1:
                    names = ", ".join(sorted(r.name for r in named))
                    raise AmbiguousModel(name, f"'{name}' matches several local models but for case; name one of: {names}.")
        if len(rows) == 1:
            return LocalModel.from_row(rows[0])
        if len(rows) > 1:
            variants = ", ".join(sorted(r.name for r in rows))
            raise AmbiguousModel(name, f"'{name}' has several local variants; name one of: {variants}.")
        pulled = self._pulled_as(name)
        if pulled is not None:
            return pulled
        raise ModelNotFound(name)

    def _pulled_as(self, name: str) -> LocalModel | None:
        """The model a pull of Ollama's library name ``name`` fetched (``llama3.2``: the listed repo Hearth pulls for
        it, :func:`engine.catalog.recommended.ollama_library_repo`), where it is here, so a client that pulled
        ``llama3.2`` chats with ``llama3.2`` as it would on Ollama.

        Raises:
            AmbiguousModel: several variants of that repo are here and the name's tag names none of them.
        """
        if "/" in name.removeprefix("registry.ollama.ai/library/").removeprefix("library/"):
            return None
        from engine.catalog.recommended import ollama_library_repo

        found = ollama_library_repo(name)
        if found is None:
            return None
        repo, variant = found
        if variant is not None:
            return self.get(f"{repo}:{variant}")
        try:
            return self.resolve(repo, fold_case=False)
        except AmbiguousModel as exc:
            raise AmbiguousModel(name, f"'{name}' is {repo}, which has several local variants; name one of them.") from exc
        except ModelNotFound:
            return None

    def remove(self, name: str, *, delete_files: bool = False) -> LocalModel:
        """Unregister ``name`` (and delete its files when they are Hearth's own, a download or an upload, and no
        other entry uses them). Another app's model is only forgotten, and stays forgotten when that app's models
        are looked at again.

        Raises:
            ModelNotFound: nothing local has that name.
        """
        model = self.resolve(name, fold_case=False)  # what is removed is named exactly
        with self._lock, Session(self.engine) as s:
            row = s.scalar(select(ModelRow).where(ModelRow.name == model.name))
            if row is not None:
                s.delete(row)
                s.commit()
        if model.origin:
            from engine.catalog.other_apps_sync import dismiss

            if model.derived_from is None:  # (a model made from it is Hearth's alone: nothing for the app to forget)
                dismiss(self, model.origin, model.name)
            return model  # another app's files: never deleted
        if delete_files:
            self.release_files(model)
        return model

    def close(self) -> None:
        self.engine.dispose()
        with self._watch_lock:
            self._watch.close()


def resolve_model(name: str | None, registry: ModelRegistry | None = None) -> LocalModel:
    """A model by name, a path to a model file (the registered model of that file, where there is one), or the
    starter model when ``name`` is None.

    Raises:
        ModelNotFound: the name is unknown and is not a path to a model.
    """
    registry = registry or ModelRegistry()
    if name is None:
        name = STARTER_NAME
    try:
        return registry.resolve(name, fold_case=False)  # a path beside a name in another case is that path
    except ModelNotFound:
        path = Path(name)
        try:
            path = path.expanduser()
            found = path.exists() and (path.suffix.lower() == ".gguf" or path.is_dir())
        except (RuntimeError, ValueError, OSError):  # "~name" naming no user, a NUL, too long: no such file
            found = False
        if found:
            from engine.catalog.metadata import read_model_metadata

            same = next((m for m in registry.list() if m.path == path.resolve()), None)
            if same is not None:  # a file that is registered already is that model, under its name
                return same
            try:
                meta = read_model_metadata(path.resolve())
            except ModelLoadError:
                # Let the backend report what is wrong with the file, naming its path.
                return LocalModel(name=short_name(path.name), path=path.resolve(), format="gguf", source="path", size_bytes=0)
            return LocalModel(
                name=short_name(path.name),
                path=path.resolve(),
                format=meta.format,
                source="path",
                size_bytes=meta.size_bytes,
                quantization=meta.quantization,
                architecture=meta.architecture,
                context_length=meta.context_length,
                has_chat_template=meta.has_chat_template,
            )
        return registry.resolve(name)  # no such file: a name in another case, or ModelNotFound

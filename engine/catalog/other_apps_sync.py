"""Other apps' models in Hearth's registry: registered in place when the user accepts them, kept in step
with their owners (a model the other app pulls appears, one it deletes disappears), and forgotten for good
when the user removes one from Hearth.

The state lives beside the registry's table in registry.db: which apps' models the user accepted
(``other_app_watched``) and which of their models the user removed (``other_app_dismissed``).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import String, delete, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from engine.catalog.model_folders import ORIGIN as FOLDER_ORIGIN
from engine.catalog.other_apps import ORIGINS, FoundModel, OtherAppRoots, scan_other_apps
from engine.catalog.registry import LocalModel, ModelRegistry, ModelRow
from engine.errors import HearthError

log = logging.getLogger(__name__)
sync_lock = threading.Lock()  # two model listings at once must not register the same model twice


class _Base(DeclarativeBase):
    pass


class WatchedOrigin(_Base):
    __tablename__ = "other_app_watched"

    origin: Mapped[str] = mapped_column(String, primary_key=True)


class DismissedModel(_Base):
    __tablename__ = "other_app_dismissed"

    origin: Mapped[str] = mapped_column(String, primary_key=True)
    name: Mapped[str] = mapped_column(String, primary_key=True)


def _session(registry: ModelRegistry) -> Session:
    _Base.metadata.create_all(registry.engine)
    return Session(registry.engine)


def owner_sentence(model: LocalModel) -> str:
    """What `hearth rm` and the API say after forgetting another app's model."""
    if model.origin == FOLDER_ORIGIN:  # a file found in one of the user's model folders, not another app's
        return (f"Removed {model.name} from Hearth; its file {model.path} is in one of your model folders and was "
                "left in place.")  # fmt: skip
    label = ORIGINS.get(model.origin or "", model.origin or "another app")
    return f"Removed {model.name} from Hearth; its files at {model.path} belong to {label} and were left in place."


def dismiss(registry: ModelRegistry, origin: str, name: str) -> None:
    """Remember that the user removed ``name``: later scans leave it out."""
    with _session(registry) as s:
        if s.get(DismissedModel, (origin, name)) is None:
            s.add(DismissedModel(origin=origin, name=name))
            s.commit()


def dismissed_names(registry: ModelRegistry, origin: str) -> set[str]:
    """The names of ``origin``'s models the user removed from Hearth (later scans leave them out)."""
    with _session(registry) as s:
        return set(s.scalars(select(DismissedModel.name).where(DismissedModel.origin == origin)))


def watched_origins(registry: ModelRegistry) -> set[str]:
    with _session(registry) as s:
        return set(s.scalars(select(WatchedOrigin.origin)))


def origin_info(found: FoundModel) -> dict[str, object]:
    """What the registry keeps of a found model: its owner's name, the mmproj, and for Ollama the manifest,
    the defaults and the chat template (translated, or the GGUF's own, saying which)."""
    info: dict[str, object] = {"owner_name": found.name}
    if found.mmproj is not None:
        info["mmproj"] = str(found.mmproj)
    if found.origin != "ollama":
        return info
    info["manifest"] = str(found.manifest) if found.manifest else None
    defaults = dict(found.params)
    if found.system:
        defaults["system"] = found.system
    info["defaults"] = defaults
    info["template_source"] = "gguf"
    if found.template:
        from engine.catalog.go_template import UnsupportedTemplate
        from engine.chat_template import ChatTemplateError

        try:
            info.update(template_info(found.template, found.system))
        except (UnsupportedTemplate, ChatTemplateError) as exc:
            info["template_note"] = f"Ollama's template was not translated ({exc}); the GGUF's own template is used."
    return info


def template_info(template: str, system: str | None) -> dict[str, object]:
    """What the registry keeps of an Ollama (Go) chat template: its Jinja translation, which Hearth renders
    (with ``system`` for a conversation without a system message), and the template as given.

    Raises:
        UnsupportedTemplate: the translator does not know a form the template uses.
        ChatTemplateError: the translation cannot render a conversation.
    """
    from engine.catalog.go_template import translate
    from engine.chat_template import ChatTemplate

    jinja = translate(template, default_system=system).jinja
    ChatTemplate(jinja).render(_PROBE)  # a translation that cannot render is no use
    return {"template_source": "ollama", "template": jinja, "ollama_template": template}


def _probe():
    from engine.types import ChatMessage

    return (ChatMessage("system", "s"), ChatMessage("user", "u"), ChatMessage("assistant", "a"), ChatMessage("user", "v"))


_PROBE = _probe()


def register_found(registry: ModelRegistry, found: FoundModel) -> LocalModel:
    """Register ``found`` in place under its owner's name (its entry is refreshed if already there).

    Raises:
        InvalidRequest: a model of Hearth's own (or of another app) already has that name.
        ModelLoadError: the file is not a model Hearth can read.
        HearthError: the scan found it broken (``found.problem``).
    """
    from engine.errors import InvalidRequest

    if found.problem:
        raise HearthError(found.problem)
    existing = registry.get(found.name)
    info = origin_info(found)
    if existing is not None:
        if existing.origin != found.origin or existing.created:
            raise InvalidRequest(f"A model named '{found.name}' is already registered; remove it to use the {found.label} one.")
        if existing.path == found.path.absolute() and dict(existing.origin_info or {}) == info:
            return existing
    return registry.register(
        found.path,
        name=found.name,
        source="other-app",
        origin=found.origin,
        origin_info=info,
        replace=existing is not None,
    )


@dataclass(slots=True)
class SyncResult:
    """What a scan did to the registry."""

    registered: list[LocalModel] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    skipped: list[tuple[FoundModel, str]] = field(default_factory=list)  # with the reason, one sentence


def accept(registry: ModelRegistry, found: list[FoundModel], *, watch: bool = True) -> SyncResult:
    """Register ``found`` (the user said yes); their apps are watched from now on and models removed
    earlier are taken back."""
    result = SyncResult()
    with sync_lock:
        with _session(registry) as s:
            for f in found:
                s.execute(delete(DismissedModel).where(DismissedModel.origin == f.origin, DismissedModel.name == f.name))
            if watch:
                for origin in {f.origin for f in found}:
                    s.merge(WatchedOrigin(origin=origin))
            s.commit()
        for f in found:
            try:
                result.registered.append(register_found(registry, f))
            except HearthError as exc:
                result.skipped.append((f, str(exc)))
    return result


def _gone(model: LocalModel) -> bool:
    manifest = (model.origin_info or {}).get("manifest")
    return not model.path.exists() or (isinstance(manifest, str) and not Path(manifest).exists())


def refresh(registry: ModelRegistry, roots: OtherAppRoots | None = None) -> SyncResult:
    """Keep the registry in step with the other apps: forget models their owners deleted, and register
    the new models of the apps the user accepted (those the user removed from Hearth stay out).

    Cheap when nothing changed: the manifests and folders are listed, and only a new model's header is read.
    """
    result = SyncResult()
    with sync_lock:
        foreign = [m for m in registry.list() if m.origin]
        made = [m for m in foreign if m.derived_from is not None and _gone(m)]  # followed to their model, below
        gone = [m.name for m in foreign if m.derived_from is None and _gone(m)]
        try:
            _register_new(registry, roots, result, gone)
        finally:
            _follow(registry, made, result)
    return result


def _unplugged(m: LocalModel) -> bool:
    """Whether ``m``'s files are out of reach rather than deleted: the folder that held them is gone as a whole (an
    unmounted drive or store), not just the file in it."""
    return not m.path.parent.exists()


def _follow(registry: ModelRegistry, made: list[LocalModel], result: SyncResult) -> None:
    """Models made from another app's models (``create``, ``copy``) whose files are gone. One whose model that app
    pulled again follows it to the new files (its own settings kept, the model's projector taken); one whose
    files are out of reach (a drive not mounted) stays, for when they come back; one whose model the app deleted goes.
    Each is looked at after the one it was made from (a chain of them), and read again before it is changed."""
    pending = {m.name: m for m in made}
    while pending:
        ready = [m for m in pending.values() if m.derived_from not in pending]
        for m in ready or list(pending.values()):  # a cycle (no model to start from): each on its own
            del pending[m.name]
            try:
                _follow_one(registry, m, result)
            except HearthError as exc:  # one that cannot follow never stops the others, nor the scan
                log.info("left %s as it was: %s", m.name, exc)


def _follow_one(registry: ModelRegistry, m: LocalModel, result: SyncResult) -> None:
    now = registry.get(m.name)
    if now is None or not now.created or not _gone(now):
        return
    base = registry.get(now.derived_from or "")
    if base is not None and not _gone(base):
        own = dict(now.origin_info or {})
        for key in ("manifest", "mmproj"):
            value = (base.origin_info or {}).get(key)
            if value is None:
                own.pop(key, None)
            else:
                own[key] = value
        registry.derive(base, now.name, own)
        return
    if _unplugged(now):
        return
    with Session(registry.engine) as s:
        s.execute(delete(ModelRow).where(ModelRow.name == now.name))
        s.commit()
    result.removed.append(now.name)


def _register_new(registry: ModelRegistry, roots: OtherAppRoots | None, result: SyncResult, gone: list[str]) -> None:
    """Forget ``gone``, then register the new models of the watched apps (see :func:`refresh`)."""
    if gone:
        with Session(registry.engine) as s:
            s.execute(delete(ModelRow).where(ModelRow.name.in_(gone)))
            s.commit()
        log.info("forgot %d models their apps deleted: %s", len(gone), ", ".join(gone))
        result.removed = gone
    origins = watched_origins(registry)
    if not origins:
        return
    with _session(registry) as s:
        dismissed = {(d.origin, d.name) for d in s.scalars(select(DismissedModel))}
    known = {m.name: m for m in registry.list()}
    for f in scan_other_apps(roots, origins=tuple(sorted(origins))):
        if (f.origin, f.name) in dismissed:
            continue
        mine = known.get(f.name)
        if mine is not None and (mine.origin != f.origin or mine.path == f.path.absolute() or mine.created):
            continue  # a name of Hearth's own, or one the user made (`create`): never taken over
        try:
            result.registered.append(register_found(registry, f))
        except HearthError as exc:
            log.info("skipped %s from %s: %s", f.name, f.label, exc)
            result.skipped.append((f, str(exc)))


def new_models(registry: ModelRegistry, found: list[FoundModel]) -> list[FoundModel]:
    """Those of ``found`` not registered yet (by name and origin)."""
    known = {(m.origin, m.name) for m in registry.list() if m.origin}
    return [f for f in found if (f.origin, f.name) not in known]


__all__ = [
    "SyncResult", "accept", "dismiss", "dismissed_names", "new_models", "origin_info", "owner_sentence", "refresh", "register_found",
    "template_info",
    "watched_origins",
]  # fmt: skip

"""Several model folders: where downloads go (the first one online) and where models are found in place.

The list lives in the data folder (``model-folders.json``); without one it is Hearth's own ``models`` folder.
The models in a folder a person added are registered where they lie (origin ``folder``: `hearth rm` forgets
one and never deletes its files), laid out as LM Studio lays them (``publisher/repo/file.gguf``) or flat. A
folder whose path is missing (a drive taken out) is *offline*: listed as such, never an error; its models leave
the list while it is away (the registry forgets models whose files are gone) and come back with it, at the next
listing, without a restart.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import dataclass, replace
from pathlib import Path

from sqlalchemy import delete
from sqlalchemy.orm import Session

from engine.errors import InvalidRequest
from engine.paths import private_dir, private_file, user_path

log = logging.getLogger(__name__)

FOLDERS_FILE = "model-folders.json"
ORIGIN = "folder"
_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class ModelFolder:
    """One folder of the list: its path, whether it is there now, and whether downloads go to it."""

    path: Path
    online: bool
    downloads: bool = False


def _own(home: Path) -> Path:
    return home / "models"


class FolderList:
    """The model folders of the data folder ``home``, in order (downloads go to the first one online).

    Args:
        home: The data folder (the registry's).
    """

    def __init__(self, home: Path) -> None:
        self.home = home
        self.file = home / FOLDERS_FILE

    def paths(self) -> list[Path]:
        try:
            saved = json.loads(self.file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return [_own(self.home)]
        except (OSError, ValueError) as exc:
            log.warning("cannot read %s (%s); only Hearth's own models folder is used", self.file, exc)
            return [_own(self.home)]
        paths = [Path(p) for p in saved if isinstance(p, str)] if isinstance(saved, list) else []
        return paths or [_own(self.home)]

    def folders(self) -> list[ModelFolder]:
        """Every folder with whether it is online; the first online one takes the downloads."""
        out, first = [], True
        for path in self.paths():
            if path == _own(self.home):  # Hearth's own, in the data folder: made when first needed
                private_dir(path)
            online = path.is_dir()
            out.append(ModelFolder(path, online, downloads=online and first))
            first = first and not online
        return out

    def downloads_folder(self) -> Path:
        """Where downloads go: the first folder online (Hearth's own when none is)."""
        for folder in self.folders():
            if folder.downloads:
                return folder.path
        return private_dir(_own(self.home))

    def _save(self, paths: list[Path]) -> None:
        tmp = self.file.with_suffix(".tmp")
        private_file(tmp)
        tmp.write_text(json.dumps([str(p) for p in paths], indent=1), encoding="utf-8")
        os.replace(tmp, self.file)

    def add(self, text: str, *, first: bool = False) -> Path:
        """Add the folder ``text`` (last, or ``first``: downloads go to it).

        Raises:
            InvalidRequest: it is not a folder, or it is listed already.
        """
        path = user_path(text).absolute()
        if not path.is_dir():
            raise InvalidRequest(f"{path} is not a folder; give the path of an existing folder.", param="path")
        with _lock:
            paths = self.paths()
            if path in paths:
                raise InvalidRequest(f"{path} is already a model folder.", param="path")
            self._save([path, *paths] if first else [*paths, path])
        return path

    def remove(self, text: str) -> Path:
        """Take the folder ``text`` off the list (its files stay where they are).

        Raises:
            InvalidRequest: it is not on the list, or it is the only folder.
        """
        path = user_path(text).absolute()
        with _lock:
            paths = self.paths()
            if path not in paths:
                raise InvalidRequest(f"{path} is not a model folder; list them with `hearth folders list`.", param="path")
            if len(paths) == 1:
                raise InvalidRequest("Hearth needs one model folder at least; add another before removing this one.", param="path")
            self._save([p for p in paths if p != path])
        return path


def _inside(path: Path, folder: Path) -> bool:
    return folder == path or folder in path.parents


def sync_folders(registry) -> list[str]:
    """Register the models found in the added folders that are online (not those `hearth rm` forgot), and
    forget the models of folders taken off the list. Returns the names registered now.

    Under the registry sync lock: a listing that read the folders before another request added one must not
    forget the models that request has just registered."""
    from engine.catalog.other_apps_sync import sync_lock

    with sync_lock:
        return _sync(registry, FolderList(registry.home).folders())


def _sync(registry, folders: list[ModelFolder]) -> list[str]:
    from engine.catalog.other_apps import scan_lmstudio
    from engine.catalog.other_apps_sync import dismissed_names, register_found
    from engine.catalog.registry import ModelRow
    from engine.errors import HearthError

    own = _own(registry.home)
    listed = [f.path for f in folders]
    known = registry.list()
    stale = [m.name for m in known if m.origin == ORIGIN and not any(_inside(m.path, p) for p in listed)]
    if stale:
        with Session(registry.engine) as s:
            s.execute(delete(ModelRow).where(ModelRow.name.in_(stale)))
            s.commit()
    added = []
    paths = {m.path for m in known}
    names = {m.name for m in known}
    skip = dismissed_names(registry, ORIGIN)
    for folder in folders:
        if not folder.online or folder.path == own:  # Hearth's own downloads register themselves
            continue
        for found in scan_lmstudio((folder.path,)):
            if found.path.absolute() in paths or found.name in names or found.name in skip:
                continue
            try:
                register_found(registry, replace(found, origin=ORIGIN))
            except HearthError as exc:
                log.info("skipped %s in %s: %s", found.path, folder.path, exc)
                continue
            added.append(found.name)
    return added


def count_models(registry, folder: Path) -> int:
    """Registered models whose files lie in ``folder``."""
    return sum(1 for m in registry.list() if _inside(m.path, folder))


def folder_rows(registry, *, sync: bool = False) -> list[dict]:
    """Each folder as `hearth folders list --json` and ``GET /api/folders`` show it (``api_models.ModelFolder``).

    ``sync``: first register the folders' models (`sync_folders`), from the same read of the folder list and
    under the same lock, so a folder another request adds meanwhile is never counted before its models are
    registered (it showed "0 models" until the next listing)."""
    from engine.catalog.other_apps_sync import sync_lock

    with sync_lock:
        folders = FolderList(registry.home).folders()
        if sync:
            _sync(registry, folders)
        return [
            {"path": str(f.path), "online": f.online, "downloads": f.downloads,
             "models": count_models(registry, f.path) if f.online else 0}  # fmt: skip
            for f in folders
        ]


__all__ = ["FolderList", "ModelFolder", "ORIGIN", "count_models", "folder_rows", "sync_folders"]

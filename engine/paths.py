"""Where Hearth keeps its data: HEARTH_HOME, or the platform's user data folder.

The data folder holds chats, document indexes and keys, so only its owner may enter it: it is made
with mode 0700, and Hearth's own databases and files in it with 0600 (its folders of models and
embeddings 0700 too). A folder and files that an older Hearth made readable to others are tightened
on the first use in a process. Model files are never touched (imported ones belong to other apps),
nor anything on Windows, whose folders in the user's profile are private already.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import stat
from pathlib import Path

log = logging.getLogger(__name__)

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
# The files Hearth writes at the top of its data folder (with SQLite's companions), and only those:
# HEARTH_HOME may name a folder that holds other files too.
OWN_FILES = (
    "chats.db", "chats.damaged-*.db", "chats-unsaved-*.db", "registry.db", "documents.db", "agent-steps.db",
    "remotes.json", "remote-keys.json", "mcp-servers.json", "mcp-secrets.json", "app-secrets.json", "app.lock",
    "daemon.json", "load-settings.json", "model-folders.json", "history",
)  # fmt: skip
SQLITE_COMPANIONS = ("-wal", "-shm", "-journal")
# Folders of Hearth's own files: the folder is made 0700 and the files in it 0600.
OWN_FOLDERS = ("logs", "embeddings")
# Folders of model files: only the folder is made 0700 (which hides what is in it); the files are left as
# they are, since imported ones may belong to other apps.
MODEL_FOLDERS = ("models",)
_tightened: set[Path] = set()  # data folders already checked by this process


def _posix() -> bool:
    return os.name != "nt"


def _tighten(path: Path, mode: int) -> None:
    """Take group and other permissions away from ``path`` (never adds any)."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode) or not st.st_mode & 0o077:
        return
    try:
        os.chmod(path, stat.S_IMODE(st.st_mode) & mode)
        log.info("made %s private to its owner", path)
    except OSError as exc:  # another user's file, a read-only mount: say so, and go on
        log.warning("could not make %s private: %s", path, exc)


def _own_file(name: str) -> bool:
    for companion in SQLITE_COMPANIONS:
        name = name.removesuffix(companion)
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in OWN_FILES)


def tighten_data_folder(home: Path) -> None:
    """Make ``home`` 0700 and Hearth's own files in it 0600 (see :data:`OWN_FILES`); a no-op on Windows."""
    if not _posix():
        return
    _tighten(home, PRIVATE_DIR_MODE)
    try:
        entries = list(home.iterdir())
    except OSError:
        return
    for entry in entries:
        if entry.name in MODEL_FOLDERS and entry.is_dir() and not entry.is_symlink():
            _tighten(entry, PRIVATE_DIR_MODE)
        elif entry.name in OWN_FOLDERS and entry.is_dir() and not entry.is_symlink():
            _tighten(entry, PRIVATE_DIR_MODE)
            for inner in entry.iterdir():
                if inner.is_file() and not inner.is_symlink():
                    _tighten(inner, PRIVATE_FILE_MODE)
        elif _own_file(entry.name) and entry.is_file():
            _tighten(entry, PRIVATE_FILE_MODE)


def private_dir(path: Path) -> Path:
    """``path`` as a folder only its owner may enter: made 0700, or tightened to it."""
    path.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    if _posix():
        _tighten(path, PRIVATE_DIR_MODE)
    return path


def private_file(path: Path) -> Path:
    """``path`` as a file only its owner may read: made empty with mode 0600 when missing (SQLite takes
    an empty file for a new database, and gives its -wal and -shm files the same mode), else tightened."""
    if not _posix():
        return path
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    except FileExistsError:
        _tighten(path, PRIVATE_FILE_MODE)
    else:
        os.close(fd)
    return path


# The longest file name and path most systems take, where the system does not say (bytes, as encoded).
_NAME_MAX = 255
_PATH_MAX = 4096


def _limit(name: str, default: int) -> int:
    try:
        return int(os.pathconf("/", name))
    except (AttributeError, OSError, ValueError):  # Windows has no pathconf
        return default


def check_path_text(text: str, *, param: str = "path") -> None:
    """Refuse a path no file can have before the system is asked about it (its answer would be an error
    the caller did not cause): a NUL character, a name or a whole path longer than the system allows.

    Raises:
        InvalidRequest: one sentence naming ``param`` and what to check (it is empty, or holds a NUL
            character, or is longer than the system allows).
    """
    from engine.errors import InvalidRequest

    if not text.strip():  # Path("") is the current folder, which nobody means by giving nothing
        raise InvalidRequest(f"'{param}' is empty; give the path of a file or folder.", param=param)
    if "\0" in text:
        raise InvalidRequest(f"'{param}' holds a NUL character, which no file name can; check the path.", param=param)
    try:
        encoded = os.fsencode(text)
    except UnicodeEncodeError:  # a lone surrogate, on a system whose file names are UTF-8
        raise InvalidRequest(f"'{param}' holds characters no file name here can; check the path.", param=param) from None
    path_max = _limit("PC_PATH_MAX", _PATH_MAX)
    if len(encoded) >= path_max:
        raise InvalidRequest(
            f"'{param}' is {len(encoded)} bytes long, longer than this system allows for a path ({path_max - 1}); "
            "check the path.",
            param=param,
        )
    name_max = _limit("PC_NAME_MAX", _NAME_MAX)
    longest = max((len(part) for part in encoded.replace(b"\\", b"/").split(b"/")), default=0)
    if longest > name_max:
        raise InvalidRequest(
            f"'{param}' has a name of {longest} bytes, longer than this system allows for one file or folder "
            f"name ({name_max}); check the path.",
            param=param,
        )


def user_path(text: str, *, param: str = "path") -> Path:
    """A path a person (or a client) gave, with ``~`` expanded.

    Raises:
        InvalidRequest: no file can have it: a NUL character, a name or path longer than the system
            allows (:func:`check_path_text`), or ``~name`` where no user has that name.
    """
    from engine.errors import InvalidRequest

    check_path_text(text, param=param)
    try:
        return Path(text).expanduser()
    except RuntimeError as exc:  # pathlib's word for "~name names no user here"
        user = text.split("/", 1)[0]
        raise InvalidRequest(f"'{param}' starts with {user!r}, but no user of this machine has that name; check the path.", param=param) from exc


def path_exists(path: Path, *, param: str = "path") -> bool:
    """Whether something is at ``path`` a person gave; the system's refusals of the path itself (a
    symlink loop, a folder it may not enter) are the caller's to fix, said in one sentence.

    Raises:
        InvalidRequest: the path cannot be looked at.
    """
    from engine.errors import InvalidRequest

    try:
        path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        reason = (exc.strerror or type(exc).__name__).lower()
        raise InvalidRequest(f"'{param}' cannot be looked at here ({reason}); check the path.", param=param) from None
    return True


def hearth_home() -> Path:
    """The data folder (created on first use, private to its owner). HEARTH_HOME overrides the platform default."""
    env = os.environ.get("HEARTH_HOME")
    if env:
        home = Path(env).expanduser()
    else:
        from platformdirs import user_data_dir

        home = Path(user_data_dir("Hearth", appauthor=False))
    if home not in _tightened:
        home.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
        tighten_data_folder(home)
        _tightened.add(home)
    else:
        home.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    return home


def models_dir() -> Path:
    """Where downloaded models go."""
    return private_dir(hearth_home() / "models")


def logs_dir() -> Path:
    return private_dir(hearth_home() / "logs")

"""Models other apps keep on this machine, found where they lie: Ollama's store, LM Studio's, Jan's and
GPT4All's model folders, and the Hugging Face cache.

Everything here only reads. Nothing of another app's is ever written, moved or deleted: Hearth registers
the files in place (see :mod:`engine.catalog.other_apps_sync`) and forgets them when asked.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.catalog.variants import quant_label, split_part

log = logging.getLogger(__name__)

# origin -> the label people know it by (the app's badge, `hearth models`)
ORIGINS: dict[str, str] = {
    "ollama": "Ollama",
    "lmstudio": "LM Studio",
    "jan": "Jan",
    "gpt4all": "GPT4All",
    "hf-cache": "HF cache",
}
_MAX_FILES = 20_000  # entries looked at per folder tree: a models folder pointed at / must not take minutes


@dataclass(frozen=True, slots=True)
class FoundModel:
    """A model another app keeps, as found on disk.

    Attributes:
        origin: ``ollama``, ``lmstudio``, ``jan``, ``gpt4all`` or ``hf-cache``.
        name: The name its owner shows (``llama3.2:3b``, ``org/repo:Q4_K_M``).
        path: The GGUF file (an Ollama blob has no suffix) or the safetensors folder, in place.
        format: ``gguf``, ``safetensors`` or ``mlx``.
        size_bytes: Bytes on disk.
        mmproj: The vision projector beside it, if any.
        manifest: The file whose removal means the owner deleted the model (Ollama's manifest).
        params: Ollama's ``params`` layer (temperature, top_k, stop, num_ctx...).
        system: Ollama's ``system`` layer.
        template: Ollama's Go ``template`` layer.
        problem: Why it cannot be used, in one sentence (None: nothing known against it yet).
    """

    origin: str
    name: str
    path: Path
    format: str = "gguf"
    size_bytes: int = 0
    mmproj: Path | None = None
    manifest: Path | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    system: str | None = None
    template: str | None = None
    problem: str | None = None  # why it cannot be used (a broken manifest, a missing file): said when it is skipped

    @property
    def label(self) -> str:
        return ORIGINS.get(self.origin, self.origin)

    def to_dict(self) -> dict[str, Any]:
        return {
            "origin": self.origin,
            "origin_label": self.label,
            "name": self.name,
            "path": str(self.path),
            "format": self.format,
            "size_bytes": self.size_bytes,
            "mmproj": str(self.mmproj) if self.mmproj else None,
        }


@dataclass(frozen=True, slots=True)
class OtherAppRoots:
    """Where each app keeps its models (folders that do not exist are skipped)."""

    ollama: tuple[Path, ...] = ()
    lmstudio: tuple[Path, ...] = ()
    jan: tuple[Path, ...] = ()
    gpt4all: tuple[Path, ...] = ()
    hf_cache: tuple[Path, ...] = ()

    def for_origin(self, origin: str) -> tuple[Path, ...]:
        return getattr(self, origin.replace("-", "_"))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *, home: Path | None = None) -> OtherAppRoots:
        """The usual places on this OS, each overridable: ``OLLAMA_MODELS``, ``HEARTH_LMSTUDIO_MODELS``,
        ``HEARTH_JAN_MODELS``, ``HEARTH_GPT4ALL_MODELS``, ``HF_HUB_CACHE``/``HF_HOME``."""
        env = os.environ if env is None else env
        home = home or Path(env.get("HOME") or Path.home())

        def given(name: str) -> tuple[Path, ...] | None:
            value = env.get(name)
            return tuple(Path(p).expanduser() for p in value.split(os.pathsep) if p) if value else None

        ollama = given("OLLAMA_MODELS")
        if ollama is None:
            ollama = (home / ".ollama" / "models",)
            if sys.platform.startswith("linux"):
                ollama += (Path("/usr/share/ollama/.ollama/models"),)  # the system service's store
        hf = given("HF_HUB_CACHE")
        if hf is None:
            hf_home = env.get("HF_HOME")
            hf = (Path(hf_home).expanduser() / "hub",) if hf_home else (home / ".cache" / "huggingface" / "hub",)
        return cls(
            ollama=ollama,
            lmstudio=given("HEARTH_LMSTUDIO_MODELS") or _lmstudio_roots(home),
            jan=given("HEARTH_JAN_MODELS") or _jan_roots(home),
            gpt4all=given("HEARTH_GPT4ALL_MODELS") or _gpt4all_roots(home),
            hf_cache=hf,
        )


def _read_json(path: Path, limit: int = 1 << 20) -> Any:
    try:
        if path.stat().st_size > limit:
            return None
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _lmstudio_roots(home: Path) -> tuple[Path, ...]:
    # LM Studio's home may be moved; it leaves a pointer file behind, and its settings may name
    # another downloads folder.
    lms_home = home / ".lmstudio"
    try:
        pointer = (home / ".lmstudio-home-pointer").read_text(encoding="utf-8").strip()
        if pointer:
            lms_home = Path(pointer).expanduser()
    except OSError:
        pass
    roots = [lms_home / "models"]
    settings = _read_json(lms_home / "settings.json")
    if isinstance(settings, dict) and isinstance(settings.get("downloadsFolder"), str):
        roots.insert(0, Path(settings["downloadsFolder"]).expanduser())
    roots.append(home / ".cache" / "lm-studio" / "models")
    return tuple(dict.fromkeys(roots))


def _jan_roots(home: Path) -> tuple[Path, ...]:
    from platformdirs import user_data_dir

    data = Path(user_data_dir("Jan", appauthor=False)) / "data"
    return (home / "jan" / "models", data / "models", data / "llamacpp" / "models")


def _gpt4all_roots(home: Path) -> tuple[Path, ...]:
    if sys.platform.startswith("linux"):
        return (home / ".local" / "share" / "nomic.ai" / "GPT4All",)
    from platformdirs import user_data_dir

    return (Path(user_data_dir("GPT4All", "nomic.ai")),)


# -- folders laid out by repo or by model ---------------------------------------------------------


def _is_projector(name: str) -> bool:
    lower = name.lower()
    return lower.startswith("mmproj") or "imatrix" in lower


def _walk_ggufs(folder: Path, depth: int) -> Iterator[Path]:
    """GGUF files under ``folder``, ``depth`` levels down at most, hidden folders skipped."""
    seen = 0
    stack = [(folder, 0)]
    while stack:
        current, level = stack.pop()
        try:
            entries = sorted(os.scandir(current), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if seen > _MAX_FILES:
                log.warning("stopped looking for models in %s after %d entries", folder, _MAX_FILES)
                return
            if entry.name.startswith("."):
                continue
            if entry.is_dir() and level < depth:
                stack.append((Path(entry.path), level + 1))
            elif entry.name.lower().endswith(".gguf") and entry.is_file():
                yield Path(entry.path)


def _first_parts(files: list[Path]) -> list[Path]:
    """Model files: split models by their first part, projectors left out."""
    return [f for f in files if not _is_projector(f.name) and (split_part(f.name) or (1, 1))[0] == 1]


def _size(path: Path) -> int:
    from engine.catalog.metadata import gguf_files_size

    try:
        return gguf_files_size(path)
    except OSError:
        return 0


def _projector(files: list[Path]) -> Path | None:
    projectors = sorted(f for f in files if f.name.lower().startswith("mmproj"))
    return projectors[0] if projectors else None


def _variant_names(files: list[Path]) -> dict[Path, str]:
    """A variant name per model file of one repo, as Hearth names Hub variants (``Q4_K_M``; the file's
    stem when the label is missing or shared)."""
    labels = {f: quant_label(f.name) for f in files}
    out = {}
    for f, label in labels.items():
        stem = f.name[: -len(".gguf")]
        stem = stem[: -len("-00001-of-00002")] if split_part(f.name) else stem
        out[f] = label if label and list(labels.values()).count(label) == 1 else stem
    return out


def scan_lmstudio(roots: tuple[Path, ...]) -> list[FoundModel]:
    """``publisher/repo/file.gguf`` folders (LM Studio's layout), with an ``mmproj*.gguf`` beside a model
    paired to it; names as Hearth names Hub downloads, ``publisher/repo:VARIANT``."""
    found: dict[str, FoundModel] = {}
    for root in roots:
        by_repo: dict[Path, list[Path]] = {}
        for f in _walk_ggufs(root, depth=3):
            by_repo.setdefault(f.parent, []).append(f)
        for folder, files in by_repo.items():
            rel = folder.relative_to(root).parts
            repo = "/".join(rel[-2:]) if len(rel) >= 2 else (rel[0] if rel else root.name)
            models = _first_parts(files)
            names = _variant_names(models)
            for f in models:
                name = f"{repo}:{names[f]}" if rel else _loose_name(f)
                found.setdefault(name, FoundModel("lmstudio", name, f, size_bytes=_size(f), mmproj=_projector(files)))
    return list(found.values())


def _loose_name(f: Path) -> str:
    """A file lying loose in the folder (no ``publisher/repo`` above it) named from its own name, not the
    folder's: ``tiny-model.Q4_1.gguf`` is ``tiny-model:Q4_1``, a file with no quantization in its name its stem."""
    stem = f.name[: -len(".gguf")]
    stem = stem[: -len("-00001-of-00002")] if split_part(f.name) else stem
    label = quant_label(f.name)
    if label and len(stem) > len(label) + 1 and stem.lower().endswith(label.lower()) and stem[-len(label) - 1] in ".-_":
        return f"{stem[: -len(label) - 1]}:{label}"
    return stem


def scan_jan(roots: tuple[Path, ...]) -> list[FoundModel]:
    """A folder per model (Jan's layout): named after the folder, ``folder:file`` when it holds several."""
    found: dict[str, FoundModel] = {}
    for root in roots:
        by_folder: dict[Path, list[Path]] = {}
        for f in _walk_ggufs(root, depth=2):
            by_folder.setdefault(f.parent, []).append(f)
        for folder, files in by_folder.items():
            models = _first_parts(files)
            base = "/".join(folder.relative_to(root).parts) or root.name
            for f in models:
                name = base if len(models) == 1 else f"{base}:{f.name[: -len('.gguf')]}"
                found.setdefault(name, FoundModel("jan", name, f, size_bytes=_size(f), mmproj=_projector(files)))
    return list(found.values())


def scan_gpt4all(roots: tuple[Path, ...]) -> list[FoundModel]:
    """The ``*.gguf`` files of GPT4All's models folder, named as GPT4All lists them (the file name)."""
    found: dict[str, FoundModel] = {}
    for root in roots:
        files = list(_walk_ggufs(root, depth=0))
        for f in _first_parts(files):
            name = f.name[: -len(".gguf")]
            found.setdefault(name, FoundModel("gpt4all", name, f, size_bytes=_size(f)))
    return list(found.values())


# -- the Hugging Face cache -----------------------------------------------------------------------


def _snapshot(repo_dir: Path) -> Path | None:
    """The snapshot ``refs/main`` points at, else the newest one."""
    snapshots = repo_dir / "snapshots"
    try:
        ref = (repo_dir / "refs" / "main").read_text(encoding="utf-8").strip()
    except OSError:
        ref = ""
    if ref and "/" not in ref and (snapshots / ref).is_dir():
        return snapshots / ref
    try:
        revs = [p for p in snapshots.iterdir() if p.is_dir()]
    except OSError:
        return None
    return max(revs, key=lambda p: p.stat().st_mtime) if revs else None


def scan_hf_cache(roots: tuple[Path, ...]) -> list[FoundModel]:
    """GGUF files (``org/name:VARIANT``) and safetensors folders (``org/name``) of the cache's snapshots."""
    from engine.catalog.metadata import read_config_metadata

    found: dict[str, FoundModel] = {}
    for root in roots:
        try:
            repos = sorted(p for p in root.iterdir() if p.name.startswith("models--") and p.is_dir())
        except OSError:
            continue
        for repo_dir in repos:
            repo = repo_dir.name[len("models--") :].replace("--", "/")
            snap = _snapshot(repo_dir)
            if snap is None:
                continue
            files = list(_walk_ggufs(snap, depth=2))
            models = _first_parts(files)
            names = _variant_names(models)
            for f in models:
                name = f"{repo}:{names[f]}"
                found.setdefault(name, FoundModel("hf-cache", name, f, size_bytes=_size(f), mmproj=_projector(files)))
            if (snap / "config.json").is_file() and any(snap.glob("*.safetensors")):
                try:
                    meta = read_config_metadata(snap)
                except Exception as exc:  # noqa: BLE001 - another app's folder: skip what cannot be read
                    log.info("skipped %s: %s", snap, exc)
                    continue
                found.setdefault(repo, FoundModel("hf-cache", repo, snap, format=meta.format, size_bytes=meta.size_bytes))
    return list(found.values())


def _scan_ollama(roots: tuple[Path, ...]) -> list[FoundModel]:
    from engine.catalog.ollama_store import scan_ollama

    return scan_ollama(roots)


_SCANNERS = {
    "ollama": _scan_ollama,
    "lmstudio": scan_lmstudio,
    "jan": scan_jan,
    "gpt4all": scan_gpt4all,
    "hf-cache": scan_hf_cache,
}


def scan_other_apps(roots: OtherAppRoots | None = None, *, origins: tuple[str, ...] | None = None) -> list[FoundModel]:
    """Every model the other apps keep in ``roots`` (the usual places when None), read in place.

    Args:
        roots: Where to look; :meth:`OtherAppRoots.from_env` by default.
        origins: Only these apps (all when None).
    """
    roots = roots or OtherAppRoots.from_env()
    out: list[FoundModel] = []
    for origin, scan in _SCANNERS.items():
        if origins is not None and origin not in origins:
            continue
        folders = tuple(p for p in roots.for_origin(origin) if p.is_dir())
        if folders:
            out.extend(scan(folders))
    return out


def summary(found: list[FoundModel]) -> str:
    """``Found 14 models from Ollama and LM Studio (96.0 GB).``"""
    labels = list(dict.fromkeys(f.label for f in found))
    apps = labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " and " + labels[-1]
    size = f"{sum(f.size_bytes for f in found) / 1e9:.1f} GB"
    noun = "model" if len(found) == 1 else "models"
    return f"Found {len(found)} {noun} from {apps} ({size})."


__all__ = ["ORIGINS", "FoundModel", "OtherAppRoots", "scan_other_apps", "summary"]

"""The model hub, through ``huggingface_hub``: search, repo listings grouped into variants, model shapes.

Every failure becomes an :mod:`engine.errors` hub error with one sentence saying what to do
(:class:`HubNotFound`, :class:`HubAccessDenied`, :class:`HubRateLimited`, :class:`HubUnavailable`),
never a traceback. Python API (used by the CLI, the server's admin endpoints and the app)::

    hub = HubClient(endpoint=None, token=None)  # HF_ENDPOINT / HF_TOKEN (or the saved login) by default
    hub.search("llama", sort="downloads", format="gguf", limit=20) -> list[RepoSummary]
    listing = hub.repo("TheOrg/Model-GGUF")                        -> RepoListing (files, variants)
    listing.variant("Q4_K_M")                                      -> Variant
    hub.model_shape(listing)                                       -> ModelShape (for the advisor)

The token comes from the ``token`` argument (the app's settings), else ``HF_TOKEN``, else the
login saved by ``hf auth login``.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from engine.catalog.gguf_header import MAX_HEADER_BYTES, read_gguf_kv
from engine.catalog.hub_paths import check_name
from engine.catalog.shape import (
    ModelShape,
    estimate_shape,
    parameters_from_name,
    shape_from_config,
    shape_from_gguf_kv,
)
from engine.catalog.variants import (
    RemoteFile,
    Variant,
    choose_projector,
    default_projector,
    group_variants,
    is_projector,
    projector_label,
)
from engine.errors import (
    HearthError,
    HubAccessDenied,
    HubError,
    HubNotFound,
    HubRateLimited,
    HubUnavailable,
    InvalidRequest,
    UnsafeHubPath,
)

if TYPE_CHECKING:
    from engine.fit.projector import ProjectorFacts

log = logging.getLogger(__name__)

SORTS = {"downloads": "downloads", "likes": "likes", "recent": "lastModified"}
FORMATS = ("gguf", "mlx", "safetensors")
DEFAULT_TIMEOUT = 15.0


def default_endpoint() -> str:
    """HF_ENDPOINT as set now (huggingface_hub reads it only once, at import), else the public hub."""
    env = os.environ.get("HF_ENDPOINT")
    if env:
        return env.rstrip("/")
    from huggingface_hub import constants

    return constants.ENDPOINT.rstrip("/")


def default_token() -> str | None:
    """HF_TOKEN when set; None lets huggingface_hub use the saved login."""
    return os.environ.get("HF_TOKEN") or None


# -- errors ---------------------------------------------------------------------------------------


def _error_types(*names: tuple[str, str]) -> tuple[type[BaseException], ...]:
    found: list[type[BaseException]] = []
    for module, name in names:
        mod = sys.modules.get(module)
        if mod is None and module != "requests":
            try:
                mod = importlib.import_module(module)
            except ImportError:
                continue
        cls = getattr(mod, name, None) if mod is not None else None
        if isinstance(cls, type) and issubclass(cls, BaseException):
            found.append(cls)
    return tuple(found)


def transport_errors() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """(every network error type, the timeout ones) of the HTTP stacks huggingface_hub may use."""
    timeouts = (TimeoutError, *_error_types(("httpx2", "TimeoutException"), ("httpx", "TimeoutException"), ("requests", "Timeout")))
    network = (
        ConnectionError,
        *timeouts,
        *_error_types(("httpx2", "TransportError"), ("httpx", "TransportError"), ("requests", "ConnectionError")),
    )
    return network, timeouts


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    code = getattr(response, "status_code", None)
    return int(code) if isinstance(code, int) else None


def _host(endpoint: str) -> str:
    return endpoint.split("://", 1)[-1]


def translate_error(exc: BaseException, *, repo: str | None, endpoint: str, token_given: bool) -> HearthError | None:
    """The hub error to raise for ``exc`` (from huggingface_hub or the HTTP stack), or None if it is not one."""
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    what = f"'{repo}'" if repo else "this model"
    status = _status(exc)
    if isinstance(exc, GatedRepoError):
        return HubAccessDenied(
            f"{what} is gated: accept its terms on its page at {_host(endpoint)}, then set HF_TOKEN to a token of that account.",
            repo=repo,
            status=status,
        )
    if isinstance(exc, RepositoryNotFoundError):
        if status == 401 and token_given:
            return HubAccessDenied(
                f"The hub refused the token for {what}; check that HF_TOKEN is a valid token with read access.",
                repo=repo,
                status=status,
            )
        return HubNotFound(
            f"There is no model {what} at {_host(endpoint)}; check the name (try `hearth search`), or set HF_TOKEN if it is private.",
            repo=repo,
            status=status,
        )
    if isinstance(exc, RevisionNotFoundError):
        return HubNotFound(f"{what} has no such revision on the hub; leave the revision out to use the latest.", repo=repo, status=status)
    if isinstance(exc, EntryNotFoundError):
        return HubNotFound(f"A file of {what} is no longer on the hub; list the repo again and pick a current variant.", repo=repo, status=status)
    if isinstance(exc, OfflineModeIsEnabled):
        return HubUnavailable("HF_HUB_OFFLINE is set, so the hub cannot be reached; unset it to search or download.", repo=repo)
    if isinstance(exc, HfHubHTTPError) or status is not None:
        if status == 401:
            return HubAccessDenied(
                f"The hub asked for a valid token to access {what}; set HF_TOKEN to a token with read access.", repo=repo, status=status
            )
        if status == 403:
            return HubAccessDenied(
                f"Your token does not have access to {what}; request access on its page or use a token that has it.",
                repo=repo,
                status=status,
            )
        if status == 404:
            return HubNotFound(f"The hub has no {what}; check the name with `hearth search`.", repo=repo, status=status)
        if status == 429:
            return HubRateLimited(
                "The hub is rate-limiting this machine; wait a minute and try again (a token in HF_TOKEN raises the limit).",
                repo=repo,
            )
        if status is not None and status >= 500:
            return HubUnavailable(
                f"The hub answered with a server error ({status}); try again in a few minutes.", repo=repo, status=status
            )
        return HubError(f"The hub refused the request for {what} (HTTP {status}); try again later.", repo=repo, status=status)
    network, timeouts = transport_errors()
    if isinstance(exc, timeouts):
        return HubUnavailable(f"The model hub at {_host(endpoint)} did not answer in time; check your connection and try again.", repo=repo)
    if isinstance(exc, network):
        return HubUnavailable(
            f"Could not reach the model hub at {_host(endpoint)}; check your internet connection (or HF_ENDPOINT) and try again.",
            repo=repo,
        )
    return None


def check_repo_id(repo: str, *, param: str = "model") -> str:
    """``repo`` when it is a repo name the hub client takes (``owner/name``: letters, digits, ``-_.``).

    Raises:
        InvalidRequest: it is not; the error names ``param``, the request field it came from.
    """
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    message = f"'{repo}' is not a hub repo name; write it as owner/name (letters, digits, '-', '_' and '.')."
    if not isinstance(repo, str) or repo.count("/") != 1 or not all(repo.split("/")):
        raise InvalidRequest(message, param=param)
    try:
        validate_repo_id(repo)
    except HFValidationError as exc:
        raise InvalidRequest(message, param=param) from exc
    return repo


# -- results ---------------------------------------------------------------------------------------


def _formats(tags: tuple[str, ...], library: str | None, names: tuple[str, ...]) -> tuple[str, ...]:
    out = []
    if "gguf" in tags or library == "gguf" or any(n.endswith(".gguf") for n in names):
        out.append("gguf")
    if "mlx" in tags or library == "mlx":
        out.append("mlx")
    elif "safetensors" in tags or any(n.endswith(".safetensors") for n in names):
        out.append("safetensors")
    return tuple(out)


@dataclass(frozen=True, slots=True)
class RepoSummary:
    """One search result. ``variants`` are parsed from file names (sizes need :meth:`HubClient.repo`)."""

    repo: str
    downloads: int = 0
    likes: int = 0
    last_modified: datetime | None = None
    tags: tuple[str, ...] = ()
    library: str | None = None
    gated: bool = False
    formats: tuple[str, ...] = ()
    variants: tuple[str, ...] = ()
    vision: bool = False  # it has mmproj projector files: its GGUF models see

    def to_dict(self) -> dict[str, Any]:
        return {
            "repo": self.repo,
            "downloads": self.downloads,
            "likes": self.likes,
            "last_modified": self.last_modified.isoformat() if self.last_modified else None,
            "tags": list(self.tags),
            "library": self.library,
            "gated": self.gated,
            "formats": list(self.formats),
            "variants": list(self.variants),
            "vision": self.vision,
        }


@dataclass(frozen=True, slots=True)
class RepoListing:
    """A repo at one commit: its files (sizes, hashes) grouped into variants."""

    repo: str
    revision: str
    files: tuple[RemoteFile, ...]
    variants: tuple[Variant, ...]
    tags: tuple[str, ...] = ()
    library: str | None = None
    gated: bool = False
    private: bool = False
    downloads: int = 0
    likes: int = 0
    last_modified: datetime | None = None
    parameters: int | None = None
    config: dict[str, Any] | None = field(default=None, compare=False)

    @property
    def projectors(self) -> tuple[RemoteFile, ...]:
        """The repo's multimodal projectors (``mmproj-*.gguf``), one per precision."""
        return tuple(f for f in self.files if is_projector(f.path))

    @property
    def vision(self) -> bool:
        return bool(self.projectors)

    def pick(self, name: str | None = None, *, projector: str | None = None) -> Variant:
        """:meth:`variant` with the projector pulled with it: the F16 one, or ``projector`` (a precision such
        as ``Q8_0``, a file name, or ``none``).

        Raises:
            InvalidRequest: no such variant or projector.
        """
        chosen = self.variant(name)
        if chosen.format != "gguf":
            if projector not in (None, "none"):
                raise InvalidRequest(f"A projector goes with a GGUF variant; {chosen.name} is {chosen.format}.", param="mmproj_variant")
            return chosen
        return replace(chosen, projector=choose_projector(self.repo, self.projectors, projector))

    def variant(self, name: str | None = None) -> Variant:
        """The variant called ``name`` (any case); the only one when ``name`` is None.

        Raises:
            InvalidRequest: no such variant, or several and none named.
        """
        if not self.variants:
            raise InvalidRequest(f"'{self.repo}' has no GGUF, MLX or safetensors model files that Hearth can run.")
        names = ", ".join(v.name for v in self.variants)
        if name is None:
            if len(self.variants) == 1:
                return self.variants[0]
            raise InvalidRequest(f"'{self.repo}' has several variants; name one as {self.repo}:VARIANT, one of: {names}.")
        for v in self.variants:
            if v.name == name or v.name.lower() == name.lower():
                return v
        raise InvalidRequest(f"'{self.repo}' has no variant '{name}'; choose one of: {names}.")

    def to_dict(self) -> dict[str, Any]:
        return {
            "repo": self.repo,
            "revision": self.revision,
            "tags": list(self.tags),
            "library": self.library,
            "gated": self.gated,
            "private": self.private,
            "downloads": self.downloads,
            "likes": self.likes,
            "last_modified": self.last_modified.isoformat() if self.last_modified else None,
            "parameters": self.parameters,
            "vision": self.vision,
            "projectors": [f.to_dict() | {"label": projector_label(f.path)} for f in self.projectors],
            "variants": [v.to_dict() for v in self.variants],
        }


# -- the client ------------------------------------------------------------------------------------


class HubClient:
    """Talks to the hub at ``endpoint`` through huggingface_hub's client.

    Args:
        endpoint: The hub's base URL; HF_ENDPOINT or https://huggingface.co by default.
        token: An access token for gated and private repos; HF_TOKEN or the saved login by default.
        timeout: Seconds to wait for each answer.
    """

    def __init__(self, *, endpoint: str | None = None, token: str | None = None, timeout: float = DEFAULT_TIMEOUT) -> None:
        from huggingface_hub import HfApi

        self.endpoint = (endpoint or default_endpoint()).rstrip("/")
        self.token = token or default_token()
        self.timeout = timeout
        self.api = HfApi(endpoint=self.endpoint, token=self.token)

    @contextmanager
    def errors(self, repo: str | None = None) -> Iterator[None]:
        """Turns huggingface_hub and network exceptions inside the block into hub errors."""
        try:
            yield
        except HearthError:
            raise
        except Exception as exc:
            mapped = translate_error(exc, repo=repo, endpoint=self.endpoint, token_given=bool(self.token))
            if mapped is None:
                raise
            log.debug("hub request failed: %r", exc)
            raise mapped from exc

    def headers(self) -> dict[str, str]:
        """Request headers with the token (huggingface_hub's user agent and auth)."""
        from huggingface_hub.utils import build_hf_headers

        return build_hf_headers(token=self.token)

    def file_url(self, repo: str, path: str, revision: str) -> str:
        from huggingface_hub import hf_hub_url

        return hf_hub_url(repo, path, revision=revision, endpoint=self.endpoint)

    def _get(self, url: str, **kwargs: Any):
        from huggingface_hub import get_session
        from huggingface_hub.utils import hf_raise_for_status

        r = get_session().get(url, headers=self.headers(), timeout=self.timeout, **kwargs)
        hf_raise_for_status(r)
        return r

    def search(
        self, query: str = "", *, sort: str = "downloads", format: str | None = None, limit: int = 20
    ) -> list[RepoSummary]:
        """Repos matching ``query``, best first by ``sort`` (downloads, likes or recent).

        One page is asked for directly rather than through ``HfApi.list_models``, whose retry loop
        would keep a person waiting for half a minute when the network is down.

        Raises:
            InvalidRequest: an unknown sort or format.
            HubError: the hub could not answer.
        """
        from huggingface_hub import ModelInfo

        if sort not in SORTS:
            raise InvalidRequest(f"Sort by one of {', '.join(SORTS)}, not '{sort}'.", param="sort")
        if format is not None and format not in FORMATS:
            raise InvalidRequest(f"Filter by one of {', '.join(FORMATS)}, not '{format}'.", param="format")
        params: dict[str, Any] = {"sort": SORTS[sort], "direction": -1, "limit": max(1, min(int(limit), 100)), "full": "true"}
        if query:
            params["search"] = query
        if format:
            params["filter"] = format
        with self.errors():
            items = self._get(f"{self.endpoint}/api/models", params=params).json()
        out = []
        for item in items:
            info = ModelInfo(**item)
            names = tuple(s.rfilename for s in info.siblings or ())
            tags = tuple(info.tags or ())
            variants = group_variants(info.id, [RemoteFile(n, 0) for n in names], tags=tags, library=info.library_name)
            formats = _formats(tags, info.library_name, names)
            if format and format not in formats:  # MLX repos carry the safetensors tag too
                continue
            out.append(
                RepoSummary(
                    repo=info.id,
                    downloads=int(info.downloads or 0),
                    likes=int(info.likes or 0),
                    last_modified=info.last_modified,
                    tags=tags,
                    library=info.library_name,
                    gated=bool(info.gated),
                    formats=formats,
                    variants=tuple(v.name for v in variants),
                    vision=any(is_projector(n) for n in names),
                )
            )
        return out

    def repo(self, repo: str, *, revision: str | None = None) -> RepoListing:
        """The repo's files with sizes and hashes, grouped into variants.

        Raises:
            InvalidRequest: ``repo`` is not ``owner/name``.
            HubError: the repo does not exist, is gated or private, or the hub could not answer.
        """
        check_repo_id(repo)
        with self.errors(repo):
            info = self.api.model_info(repo, revision=revision, files_metadata=True, timeout=self.timeout)
        # A hostile hub or mirror must not pick where files go: the listing is refused whole.
        if not isinstance(info.id, str) or info.id.count("/") != 1:
            raise UnsafeHubPath(str(info.id), repo=repo, endpoint=self.endpoint)
        check_name(info.id, repo=repo, endpoint=self.endpoint)
        for s in info.siblings or ():
            check_name(s.rfilename, repo=repo, endpoint=self.endpoint)
        files = tuple(
            RemoteFile(
                path=s.rfilename,
                size=int(s.lfs.size if s.lfs else (s.size or 0)),
                sha256=s.lfs.sha256 if s.lfs else None,
                blob_id=s.blob_id,
            )
            for s in info.siblings or ()
        )
        sha = info.sha or revision or "main"
        tags = tuple(info.tags or ())
        config = None
        if any(f.path == "config.json" for f in files) and any(f.path.endswith(".safetensors") for f in files):
            config = self._read_json(repo, "config.json", sha)
        params = None
        if isinstance(info.gguf, dict) and info.gguf.get("total"):
            params = int(info.gguf["total"])
        elif info.safetensors is not None and info.safetensors.total:
            params = int(info.safetensors.total)
        return RepoListing(
            repo=info.id,
            revision=sha,
            files=files,
            variants=group_variants(info.id, files, tags=tags, library=info.library_name, config=config),
            tags=tags,
            library=info.library_name,
            gated=bool(info.gated),
            private=bool(info.private),
            downloads=int(info.downloads or 0),
            likes=int(info.likes or 0),
            last_modified=info.last_modified,
            parameters=params,
            config=config,
        )

    def _read_json(self, repo: str, path: str, revision: str) -> dict[str, Any] | None:
        with self.errors(repo):
            data = self._get(self.file_url(repo, path, revision)).json()
        return data if isinstance(data, dict) else None

    def read_gguf_header(self, repo: str, path: str, revision: str) -> dict[str, Any]:
        """The key/values of a remote GGUF file's header, read with a Range request (no vocabulary).

        Raises:
            HubError: the file could not be read.
        """
        from huggingface_hub import get_session
        from huggingface_hub.utils import hf_raise_for_status

        headers = {**self.headers(), "Range": f"bytes=0-{MAX_HEADER_BYTES - 1}", "Accept-Encoding": "identity"}
        with self.errors(repo):
            with get_session().stream("GET", self.file_url(repo, path, revision), headers=headers, timeout=self.timeout) as r:
                if r.status_code >= 400:
                    r.read()
                hf_raise_for_status(r)
                try:
                    return read_gguf_kv(r.iter_bytes())
                except ValueError as exc:
                    raise HubError(f"'{path}' in '{repo}' does not start with a GGUF header Hearth can read ({exc}).", repo=repo) from exc

    def projector_facts(self, listing: RepoListing, variant: Variant | None = None) -> ProjectorFacts | None:
        """The memory facts of the projector pulled with ``variant`` (the repo's default one when None), from its
        remote header (a guess from its size when that cannot be read); None when the repo has no projector."""
        from engine.fit.projector import projector_from_kv, projector_from_size

        chosen = variant.projector if variant is not None else default_projector(listing.projectors)
        if chosen is None:
            return None
        try:
            kv = self.read_gguf_header(listing.repo, chosen.path, listing.revision)
        except HubError as exc:
            log.info("could not read the projector header of %s: %s", listing.repo, exc)
            return projector_from_size(chosen.size)
        return projector_from_kv(kv, chosen.size)

    def model_shape(self, listing: RepoListing, variant: Variant | None = None) -> ModelShape:
        """The model's shape for the advisor: from config.json, else the GGUF header, else a guess.

        A guess (from the hub's parameter count, the repo name, or the file size) is used when the
        repo has neither, or they cannot be read; its ``source`` says so.
        """
        if listing.config:
            shape = shape_from_config(listing.config)
            if shape is not None:
                return _with_params(shape, listing.parameters)
        ggufs = [v for v in listing.variants if v.format == "gguf"]
        target = variant if variant is not None and variant.format == "gguf" else (ggufs[0] if ggufs else None)
        if target is not None:
            try:
                shape = shape_from_gguf_kv(self.read_gguf_header(listing.repo, target.primary.path, listing.revision))
            except HubError as exc:
                log.info("could not read the GGUF header of %s: %s", listing.repo, exc)
                shape = None
            if shape is not None:
                return _with_params(shape, listing.parameters)
        params = listing.parameters or parameters_from_name(listing.repo)
        if params is None and listing.variants:
            v = variant or listing.variants[0]
            if v.bits_per_weight:
                params = int(v.weights_bytes * 8 / v.bits_per_weight)
        return estimate_shape(params or 7_000_000_000)


def _with_params(shape: ModelShape, params: int | None) -> ModelShape:
    return shape if params is None or shape.parameters is not None else replace(shape, parameters=params)


__all__ = ["HubClient", "RepoSummary", "RepoListing", "check_repo_id", "translate_error", "transport_errors", "default_endpoint", "SORTS", "FORMATS"]

"""The engine's exception hierarchy.

Every message is one sentence a person can act on. The HTTP server maps these
types (never their text) to OpenAI-shaped errors in one place.
"""

from __future__ import annotations


class HearthError(Exception):
    """Base class for every error Hearth reports to a user."""


class ModelNotFound(HearthError):
    """No local model has the requested name."""

    def __init__(self, name: str, message: str | None = None) -> None:
        self.name = name
        super().__init__(
            message
            or f"Model '{name}' is not available locally; run `hearth models` to list models or `hearth pull` to get one."
        )


class AmbiguousModel(ModelNotFound):
    """A name that matches several local models (a repo with several variants); the message lists them."""


class ModelLoadError(HearthError):
    """A model file exists but could not be loaded."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"Could not load the model at {path}: {reason}")


class ContextLengthExceeded(HearthError):
    """The prompt (plus what must be generated) does not fit the context window."""

    def __init__(self, prompt_tokens: int, n_ctx: int) -> None:
        self.prompt_tokens = prompt_tokens
        self.n_ctx = n_ctx
        super().__init__(
            f"The prompt is {prompt_tokens} tokens but this model's context holds {n_ctx}; "
            "shorten the conversation or load the model with a larger context."
        )


class InvalidRequest(HearthError):
    """A request's parameters are invalid."""

    def __init__(self, message: str, param: str | None = None) -> None:
        self.param = param
        super().__init__(message)


class DraftModelUnusable(InvalidRequest):
    """The draft model named for speculative decoding cannot draft for this model (another vocabulary, or a
    file that would not load); the message says why and what to use instead."""

    def __init__(self, message: str) -> None:
        super().__init__(message, param="speculative")


class EmbeddingsUnsupported(InvalidRequest):
    """The model's backend cannot make embeddings with it."""

    def __init__(self, model: str, backend: str) -> None:
        super().__init__(
            f"Model '{model}' cannot make embeddings on the {backend} backend; use an embedding model "
            "(a GGUF file, which llama.cpp runs).",
            param="model",
        )


class RerankUnsupported(InvalidRequest):
    """The model is not a reranker (or its backend cannot rerank)."""

    def __init__(self, model: str) -> None:
        super().__init__(
            f"Model '{model}' is not a reranker; name a GGUF reranker model (a cross-encoder such as bge-reranker).",
            param="model",
        )


class SchemaTooComplex(InvalidRequest):
    """A JSON schema (response format or tool parameters) is over a limit that keeps its grammar fast
    (engine.limits); the message names the limit."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message, param=param)


class GrammarTooSlow(HearthError):
    """Masking the vocabulary with a request's grammar took longer than one step may; the request ends."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        super().__init__(
            f"The output grammar took over {seconds:g} s to check one token, so the request was stopped; "
            "simplify the JSON schema (fewer nested repetitions in its patterns)."
        )


class AdminKeyRequired(HearthError):
    """A request made with an inference key asks for what only the admin key may do: load a model with
    settings of its own, unload it, or read document collections the admin has not shared."""

    def __init__(self, message: str, param: str | None = None) -> None:
        self.param = param
        super().__init__(message)


class GrammarDeadEnd(HearthError):
    """A request's grammar allows no token of the model where the output is (llama.cpp would abort the process
    if a refused token were accepted); the request ends."""

    def __init__(self) -> None:
        super().__init__(
            "The output grammar allows no token of this model at this point, so the request was stopped; change the "
            "JSON schema (it asks for text no token can write, such as a NUL character)."
        )


class RequestCancelled(HearthError):
    """The client went away, so the work done for it was stopped; nobody reads this error."""

    def __init__(self) -> None:
        super().__init__("The request was cancelled because the client disconnected.")


class BackendUnavailable(HearthError):
    """A backend cannot run here (missing package, no GPU, wrong platform)."""

    def __init__(self, backend: str, reason: str) -> None:
        self.backend = backend
        self.reason = reason
        super().__init__(f"The {backend} backend is not available: {reason}")


class Overloaded(HearthError):
    """Too many requests are waiting; the client should retry later."""

    def __init__(self, message: str, retry_after: float = 1.0) -> None:
        self.retry_after = retry_after
        super().__init__(message)


class HubError(HearthError):
    """The model hub could not answer (the base of the more precise hub errors below)."""

    def __init__(self, message: str, *, repo: str | None = None, status: int | None = None) -> None:
        self.repo = repo
        self.status = status
        super().__init__(message)


class HubNotFound(HubError):
    """The repo, revision or file does not exist on the hub (or is private and no token was given)."""


class HubAccessDenied(HubError):
    """The repo is gated or private and the token is missing, invalid or not granted access."""


class HubRateLimited(HubError):
    """The hub is rate-limiting this machine; retry after ``retry_after`` seconds."""

    def __init__(self, message: str, *, repo: str | None = None, retry_after: float = 60.0) -> None:
        self.retry_after = retry_after
        super().__init__(message, repo=repo, status=429)


class HubUnavailable(HubError):
    """The hub could not be reached: no network, a timeout, or a server error."""


class UnsafeHubPath(HubError):
    """A hub listing names a file (or repo) that would land outside the models folder: an absolute
    path, a ``..`` part, a drive or a backslash. Nothing of it is written."""

    def __init__(self, path: str, *, repo: str | None = None, endpoint: str | None = None) -> None:
        self.path = path
        where = f" from {endpoint}" if endpoint else ""
        super().__init__(
            f"The hub listing of '{repo}'{where} names the file {path!r}, which would be written outside the "
            "models folder, so nothing of it was downloaded; use the official hub or a mirror you trust.",
            repo=repo,
        )


class DownloadError(HearthError):
    """A download failed: its payload did not match the hub's hash, or the transfer gave up."""

    def __init__(self, message: str, *, job_id: str | None = None) -> None:
        self.job_id = job_id
        super().__init__(message)


class InsufficientDiskSpace(HearthError):
    """There is not enough free disk space for a download; nothing was started."""

    def __init__(self, needed: int, free: int, path: str) -> None:
        self.needed = needed
        self.free = free
        self.path = path
        super().__init__(
            f"This download needs {needed / 1e9:.2f} GB but only {free / 1e9:.2f} GB is free in {path}; "
            "free some space or choose a smaller variant."
        )


class RemoteError(HearthError):
    """A remote provider (another OpenAI-compatible server the user added) failed a request.

    Attributes:
        provider: The provider's name, as the user gave it.
        url: Its base URL.
        status: The HTTP status the local API answers with.
    """

    status = 502

    def __init__(self, message: str, *, provider: str, url: str) -> None:
        self.provider = provider
        self.url = url
        super().__init__(message)


class RemoteUnreachable(RemoteError):
    """Nothing answers at the provider's address (refused, no route, DNS, TLS)."""

    def __init__(self, *, provider: str, url: str, reason: str) -> None:
        self.reason = reason
        super().__init__(
            f"The remote provider '{provider}' at {url} cannot be reached ({reason}); check that it is running.",
            provider=provider,
            url=url,
        )


class RemoteAuthFailed(RemoteError):
    """The provider refused the API key Hearth sent (HTTP 401 or 403)."""

    status = 401

    def __init__(self, *, provider: str, url: str, remote_status: int) -> None:
        self.remote_status = remote_status
        super().__init__(
            f"The remote provider '{provider}' at {url} refused the API key (HTTP {remote_status}); "
            "remove it and add it again with the right key.",
            provider=provider,
            url=url,
        )


class RemoteTimeout(RemoteError):
    """The provider accepted the connection but did not answer in time."""

    status = 504

    def __init__(self, *, provider: str, url: str, seconds: float) -> None:
        self.seconds = seconds
        super().__init__(
            f"The remote provider '{provider}' at {url} did not answer within {seconds:g} s; "
            "it may be overloaded, or add it again with a longer --timeout.",
            provider=provider,
            url=url,
        )


class RemoteFailed(RemoteError):
    """The provider answered a request with an error of its own (kept with its status and code)."""

    def __init__(
        self,
        *,
        provider: str,
        url: str,
        status: int,
        message: str,
        type_: str | None = None,
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        self.status = status
        self.type_ = type_
        self.param = param
        self.code = code
        text = message.strip().rstrip(".") or f"HTTP {status}"
        super().__init__(f"The remote provider '{provider}' answered: {text}.", provider=provider, url=url)


class RemoteStreamCut(RemoteError):
    """The provider stopped in the middle of a streamed answer (it died, or the connection broke)."""

    def __init__(self, *, provider: str, url: str, reason: str) -> None:
        self.reason = reason
        super().__init__(
            f"The remote provider '{provider}' at {url} stopped while answering ({reason}); "
            "the answer is cut off here, check that the provider is running and try again.",
            provider=provider,
            url=url,
        )


class ProviderNotFound(HearthError):
    """No remote provider has the given name."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"There is no remote provider named '{name}'; run `hearth remote list` to see them.")


__all__ = [
    "HearthError",
    "ModelNotFound",
    "ModelLoadError",
    "AmbiguousModel",
    "ContextLengthExceeded",
    "InvalidRequest",
    "AdminKeyRequired",
    "EmbeddingsUnsupported",
    "SchemaTooComplex",
    "RequestCancelled",
    "GrammarTooSlow",
    "BackendUnavailable",
    "Overloaded",
    "HubError",
    "HubNotFound",
    "HubAccessDenied",
    "HubRateLimited",
    "HubUnavailable",
    "DownloadError",
    "InsufficientDiskSpace",
    "RemoteError",
    "RemoteUnreachable",
    "RemoteAuthFailed",
    "RemoteTimeout",
    "RemoteFailed",
    "RemoteStreamCut",
    "ProviderNotFound",
]

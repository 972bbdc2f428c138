"""The engine's exception hierarchy.

Every message is one sentence a person can act on. Each type carries how the HTTP API answers it
(``status``, ``type``, ``code``, ``param``), so the server builds every error answer in one place,
``engine.server.errors.error_info``, from these attributes (never from the text).
"""

from __future__ import annotations


def why(exc: BaseException, limit: int = 160) -> str:
    """A library's error as part of a sentence: its first line, cut at ``limit`` characters (a grammar compiler's
    message can hold the whole schema)."""
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


class HearthError(Exception):
    """Base class for every error Hearth reports to a user.

    Attributes:
        status: The HTTP status the API answers with.
        type: OpenAI's error type (``invalid_request_error``, ``server_error``, ...).
        code: OpenAI's error code, or None.
        param: The request field at fault, or None.
        retry_after: Seconds to wait before retrying (sent as Retry-After), or None.

    A type sets these as class attributes; an error that knows better (a remote provider's own
    status) sets them on the instance.
    """

    status: int = 400
    type: str = "invalid_request_error"
    code: str | None = None
    param: str | None = None
    retry_after: float | None = None

    def __reduce__(self):
        # Pickled as its message and attributes, whatever its own __init__ takes: an error crosses from the paged
        # engine's process (pickle calls a class with its args, and ModelLoadError(path, reason) got one of them).
        return _rebuilt, (type(self), self.args, dict(self.__dict__))


def _rebuilt(cls: type[HearthError], args: tuple, state: dict) -> HearthError:
    exc = cls.__new__(cls)
    Exception.__init__(exc, *args)
    exc.__dict__.update(state)
    return exc


class ModelNotFound(HearthError):
    """No local model has the requested name."""

    status = 404
    code = "model_not_found"
    param = "model"

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

    status = 500
    type = "server_error"
    code = "model_load_error"

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"Could not load the model at {path}: {reason}")


class ContextLengthExceeded(HearthError):
    """The prompt (plus what must be generated) does not fit the context window."""

    code = "context_length_exceeded"
    param = "messages"

    def __init__(self, prompt_tokens: int, n_ctx: int, *, message: str | None = None, param: str | None = None) -> None:
        self.prompt_tokens = prompt_tokens
        self.n_ctx = n_ctx
        if param is not None:
            self.param = param
        what = "prompt" if self.param == "prompt" else "conversation"
        super().__init__(
            message
            or f"The prompt is {prompt_tokens} tokens but this model's context holds {n_ctx}; "
            f"shorten the {what} or load the model with a larger context (hearth serve --ctx N)."
        )


class InvalidRequest(HearthError):
    """A request's parameters are invalid."""

    code = "invalid_value"

    def __init__(self, message: str, param: str | None = None) -> None:
        self.param = param
        super().__init__(message)


class PreviousResponseNotFound(InvalidRequest):
    """A Responses request's ``previous_response_id`` names a response Hearth does not hold: OpenAI's 400 and code,
    on which a client sends the whole conversation instead."""

    code = "previous_response_not_found"

    def __init__(self, response_id: str) -> None:
        super().__init__(f"Previous response with id '{response_id}' not found (responses are kept in memory until "
                         "the worker restarts, and not with store: false); send the whole conversation instead.",
                         param="previous_response_id")  # fmt: skip


class ConversationNotFound(HearthError):
    """No conversation (``/v1/conversations``) has the id a request names: OpenAI's 404."""

    status = 404
    code = "conversation_not_found"
    param = "conversation"

    def __init__(self, conversation_id: str) -> None:
        self.conversation_id = conversation_id
        super().__init__(f"Conversation with id '{conversation_id}' not found (conversations are kept in memory until the "
                         "worker restarts); create one with POST /v1/conversations.")  # fmt: skip


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

    code = "schema_too_complex"

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message, param=param)


class GrammarTooSlow(HearthError):
    """Checking a token against a request's grammar (or masking the vocabulary with it) took longer than one step
    may; the request ends. The schema is at fault: a 400."""

    code = "schema_too_complex"

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        super().__init__(
            f"The output grammar took over {seconds:g} s to check one token, so the request was stopped; simplify "
            "the JSON schema (fewer alternatives that start alike, nested repetitions or references to itself)."
        )


class AdminKeyRequired(HearthError):
    """A request made with an inference key asks for what only the admin key may do: load a model with
    settings of its own, unload it, or read document collections the admin has not shared."""

    status = 403
    type = "permission_error"
    code = "admin_key_required"

    def __init__(self, message: str, param: str | None = None) -> None:
        self.param = param
        super().__init__(message)


class GrammarDeadEnd(HearthError):
    """A request's grammar allows no token of the model where the output is (llama.cpp would abort the process
    if a refused token were accepted); the request ends. The schema is at fault: a 400."""

    code = "invalid_value"

    def __init__(self, reason: str | None = None) -> None:
        if reason is not None:  # a request's own grammar, which llguidance gave up on (its words)
            super().__init__(f"The output grammar could not go on ({reason}), so the request was stopped; simplify the "
                             "grammar, or make sure some text matches it.")  # fmt: skip
            return
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

    status = 503
    type = "server_error"
    code = "backend_unavailable"

    def __init__(self, backend: str, reason: str) -> None:
        self.backend = backend
        self.reason = reason
        super().__init__(f"The {backend} backend is not available: {reason}")


class Overloaded(HearthError):
    """Too many requests are waiting; the client should retry later."""

    status = 429
    type = "rate_limit_error"
    code = "overloaded"

    def __init__(self, message: str, retry_after: float = 1.0) -> None:
        self.retry_after = retry_after
        super().__init__(message)


class HubError(HearthError):
    """The model hub could not answer (the base of the more precise hub errors below).

    Attributes:
        hub_status: The HTTP status the hub answered with, where it answered.
    """

    def __init__(self, message: str, *, repo: str | None = None, status: int | None = None) -> None:
        self.repo = repo
        self.hub_status = status
        super().__init__(message)


class HubNotFound(HubError):
    """The repo, revision or file does not exist on the hub (or is private and no token was given)."""

    status = 404
    code = "hub_not_found"


class HubAccessDenied(HubError):
    """The repo is gated or private and the token is missing, invalid or not granted access."""

    status = 403
    code = "hub_access_denied"


class HubRateLimited(HubError):
    """The hub is rate-limiting this machine; retry after ``retry_after`` seconds."""

    status = 429
    type = "rate_limit_error"
    code = "hub_rate_limited"

    def __init__(self, message: str, *, repo: str | None = None, retry_after: float = 60.0) -> None:
        self.retry_after = retry_after
        super().__init__(message, repo=repo, status=429)


class HubUnavailable(HubError):
    """The hub could not be reached: no network, a timeout, or a server error."""

    status = 502
    type = "server_error"
    code = "hub_unavailable"


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

    code = "download_error"

    def __init__(self, message: str, *, job_id: str | None = None) -> None:
        self.job_id = job_id
        super().__init__(message)


class InsufficientDiskSpace(HearthError):
    """There is not enough free disk space for a download; nothing was started."""

    status = 507
    type = "server_error"
    code = "insufficient_storage"

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
    type = "server_error"
    code = "remote_error"

    def __init__(self, message: str, *, provider: str, url: str) -> None:
        self.provider = provider
        self.url = url
        super().__init__(message)


class RemoteUnreachable(RemoteError):
    """Nothing answers at the provider's address (refused, no route, DNS, TLS)."""

    code = "remote_unreachable"

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
    type = "invalid_request_error"
    code = "remote_auth_failed"

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
    code = "remote_timeout"

    def __init__(self, *, provider: str, url: str, seconds: float) -> None:
        self.seconds = seconds
        super().__init__(
            f"The remote provider '{provider}' at {url} did not answer within {seconds:g} s; "
            "it may be overloaded, or add it again with a longer --timeout.",
            provider=provider,
            url=url,
        )


class RemoteFailed(RemoteError):
    """The provider answered a request with an error of its own, answered with its status, type, param
    and code (a type of Hearth's own by the status where it gave none)."""

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
        self.type = type_ or ("invalid_request_error" if status < 500 else "server_error")
        self.param = param
        self.code = code or "remote_error"
        text = message.strip().rstrip(".") or f"HTTP {status}"
        super().__init__(f"The remote provider '{provider}' answered: {text}.", provider=provider, url=url)


class RemoteStreamCut(RemoteError):
    """The provider stopped in the middle of a streamed answer (it died, or the connection broke)."""

    code = "remote_stream_cut"

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

    status = 404
    code = "provider_not_found"

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"There is no remote provider named '{name}'; run `hearth remote list` to see them.")


__all__ = [
    "HearthError",
    "why",
    "ModelNotFound",
    "ModelLoadError",
    "AmbiguousModel",
    "ContextLengthExceeded",
    "InvalidRequest",
    "PreviousResponseNotFound",
    "ConversationNotFound",
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

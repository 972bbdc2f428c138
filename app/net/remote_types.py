"""Typed views of the worker's remote providers (``/api/remotes``) and the models they serve."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class RemoteModelInfo:
    """A model a remote provider serves; chats name it by ``id`` (``provider/model``)."""

    id: str
    provider: str
    remote_id: str
    context_length: int | None = None


@dataclass(frozen=True, slots=True)
class ProviderInfo:
    """A remote provider and what listing its models found."""

    name: str
    url: str = ""
    key: str | None = None  # where its key is: keyring | file | None
    timeout: float = 0.0
    state: str = "ok"  # ok | refused | unreachable | timeout | error
    message: str | None = None
    models: tuple[RemoteModelInfo, ...] = ()

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ProviderInfo:
        name = str(d.get("name", ""))
        models = tuple(
            RemoteModelInfo(
                id=str(m.get("id", "")),
                provider=name,
                remote_id=str(m.get("remote_id") or m.get("id", "")),
                context_length=m.get("context_length"),
            )
            for m in d.get("models") or ()
            if isinstance(m, dict) and m.get("id")
        )
        return cls(
            name=name,
            url=str(d.get("url") or ""),
            key=d.get("key"),
            timeout=float(d.get("timeout") or 0.0),
            state=str(d.get("state") or "ok"),
            message=d.get("message"),
            models=models,
        )

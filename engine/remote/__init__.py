"""Remote providers: OpenAI-compatible servers elsewhere (a vLLM or SGLang cluster, another Hearth,
a hosted service) whose models Hearth lists and serves as ``provider/model``, passing answers through."""

from engine.remote.client import RemoteClient, RemoteModel
from engine.remote.providers import ProviderAccess, ProviderStore, RemoteProvider
from engine.remote.registry import ProviderStatus, RemoteRegistry, probe_all

__all__ = [
    "ProviderAccess",
    "ProviderStatus",
    "ProviderStore",
    "RemoteClient",
    "RemoteModel",
    "RemoteProvider",
    "RemoteRegistry",
    "probe_all",
]

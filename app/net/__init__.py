"""The app's way to the engine: the worker's HTTP API, asynchronously, on the GUI thread."""

from app.net.api import HearthApi
from app.net.catalog_types import Download, HardwareReport, HubRepo, HubVariant, VariantList
from app.net.chat_stream import ChatStream
from app.net.client import ApiCall
from app.net.engine import EngineConfig, EngineController, EngineState
from app.net.types import ApiError, Metrics, ModelInfo, StatsSnapshot, StreamResult

__all__ = [
    "ApiCall",
    "ApiError",
    "ChatStream",
    "Download",
    "EngineConfig",
    "EngineController",
    "EngineState",
    "HardwareReport",
    "HearthApi",
    "HubRepo",
    "HubVariant",
    "Metrics",
    "ModelInfo",
    "StatsSnapshot",
    "StreamResult",
    "VariantList",
]

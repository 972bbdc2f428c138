"""The model catalog: local registry, model metadata, Hub search and downloads, the advisor.

Public API (see each module's docstring):
    ModelRegistry, LocalModel, resolve_model        engine.catalog.registry
    HubClient, RepoSummary, RepoListing             engine.catalog.hub
    Variant, RemoteFile, group_variants             engine.catalog.variants
    advise, Advice, FitEstimate, Fit                engine.catalog.advisor
    DownloadManager, DownloadJob, DownloadStatus    engine.catalog.downloads
"""

from engine.catalog.advisor import Advice, Fit, FitEstimate, advise
from engine.catalog.downloads import DownloadJob, DownloadManager, DownloadState, DownloadStatus
from engine.catalog.hub import HubClient, RepoListing, RepoSummary
from engine.catalog.registry import LocalModel, ModelRegistry, resolve_model
from engine.catalog.variants import RemoteFile, Variant, group_variants

__all__ = [
    "LocalModel",
    "ModelRegistry",
    "resolve_model",
    "HubClient",
    "RepoListing",
    "RepoSummary",
    "RemoteFile",
    "Variant",
    "group_variants",
    "Advice",
    "Fit",
    "FitEstimate",
    "advise",
    "DownloadJob",
    "DownloadManager",
    "DownloadState",
    "DownloadStatus",
]

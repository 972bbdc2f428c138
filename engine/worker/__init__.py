"""The worker process that owns the models and serves the API, and its supervisor."""

from engine.worker.supervisor import WorkerEvent, WorkerStartError, WorkerSupervisor

__all__ = ["WorkerSupervisor", "WorkerEvent", "WorkerStartError"]

"""Python's cyclic garbage collector in Hearth's long-running processes.

A full collection walks every object the collector tracks, and it runs whenever enough objects have outlived two
younger collections. A process that has loaded what it serves holds most of its objects for good: the worker
about 300,000 once its routes, schemas and libraries are imported, the paged engine's process about 400,000 once
its model and KV block pool are built. One walk took 115-160 ms on the CPU here, and while it runs no stream in
that process moves: the worker sends no token, the engine takes no step.

Freezing those objects (``gc.freeze``) once they are built keeps them out of later walks; a collection then walks
what requests allocated since. Frozen objects are still freed when their last reference goes, but a cycle among
them is not: the engine's process freezes once, as it serves one engine for its life; the worker, which loads and
unloads models, thaws and freezes again after each (:func:`refreeze`), so an unloaded model's objects are
collected, and lazily imported modules and a new model's tokenizer join the frozen ones. Each costs one walk.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger(__name__)


def freeze_loaded_objects() -> int:
    """Collect once, then keep every object alive now out of later collections' walks: for a process that has
    built what it serves. Returns how many objects are frozen."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.debug("%d objects frozen out of the garbage collector's walks", frozen)
    return frozen


_refreezing = False


def keep_objects_frozen() -> None:
    """Freeze what this process has built, and from now on :func:`refreeze` after each model load and unload (the
    worker, once it is set up and before any model loads)."""
    global _refreezing
    _refreezing = True
    freeze_loaded_objects()


def refreeze() -> None:
    """After a model loaded or unloaded: thaw, collect (an unloaded model's cycles go) and freeze what is alive.
    Nothing unless :func:`keep_objects_frozen` was called in this process."""
    if _refreezing:
        gc.unfreeze()
        freeze_loaded_objects()


__all__ = ["freeze_loaded_objects", "keep_objects_frozen", "refreeze"]

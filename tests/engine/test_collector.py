"""What a process has built before serving is frozen out of the garbage collector's walks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


# In a process of its own: freezing is process-wide. The "loaded" objects are a block pool's worth of small
# objects in a reference cycle each; gc.get_objects lists what a collection walks.
FREEZE = """
import gc
from engine.collector import freeze_loaded_objects

class Block:
    def __init__(self):
        self.me = self

pool = [Block() for _ in range(50_000)]
garbage = [Block() for _ in range(1_000)]
del garbage  # unreachable cycles: the collection before freezing frees them, they are not frozen
walked_before = len(gc.get_objects())
frozen = freeze_loaded_objects()
walked_after = len(gc.get_objects())
fresh = [Block() for _ in range(10)]
print(walked_before, frozen, walked_after, sum(type(o) is Block for o in gc.get_objects()), len(pool))
"""


def test_objects_alive_once_loaded_are_frozen_out_of_later_collections_and_garbage_is_collected_first():
    out = subprocess.run([sys.executable, "-c", FREEZE], capture_output=True, text=True, check=True, cwd=ROOT,
                         timeout=120).stdout.split()  # fmt: skip
    walked_before, frozen, walked_after, blocks_walked, pool = map(int, out)
    assert walked_before > 51_000 and frozen > 50_000 and pool == 50_000
    assert walked_after < 1_000  # the pool and the rest of the loaded process are no longer walked
    assert blocks_walked == 10  # only what was made after freezing
    assert frozen < walked_before - 900  # the unreachable cycles were collected, not frozen


# The worker's pool with a real model: what a load built is frozen, and an unloaded model is collected even where
# its objects hold each other in a cycle (a backend's threads hold its bound methods in any case).
POOL = """
import gc, sys, weakref
from pathlib import Path
from engine.backends.base import LoadOptions
from engine.catalog.registry import ModelRegistry
from engine.collector import keep_objects_frozen
from engine.pool import ModelManager

keep_objects_frozen()
pool = ModelManager(ModelRegistry(Path(sys.argv[1]), register_starter=False), backend="llamacpp",
                    options=LoadOptions(n_ctx=256, n_seq_max=1))
lm = pool.load(sys.argv[2], allow_paths=True)
backend = lm.backend
walked = any(o is backend for o in gc.get_objects())
backend.itself = backend  # a cycle made after the freeze, as a frozen model's objects hold among themselves
gone = weakref.ref(backend)
name = lm.model.name
del lm, backend
pool.unload(name)
print(walked, gone() is None)
pool.close()
"""


def test_the_pool_freezes_a_loaded_model_and_collects_it_once_unloaded(tmp_path, starter_path):
    out = subprocess.run([sys.executable, "-c", POOL, str(tmp_path / "home"), str(starter_path)], capture_output=True,
                         text=True, check=True, cwd=ROOT, timeout=300).stdout.split()  # fmt: skip
    assert out == ["False", "True"]  # frozen out of the walks once loaded; freed once unloaded

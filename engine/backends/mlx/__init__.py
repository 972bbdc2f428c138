"""Models on MLX (Apple's array framework): Metal on Apple Silicon, its CPU build elsewhere.

Importing this package imports ``mlx`` and ``mlx_lm``, so a missing install fails here, at
import, where ``create_backend`` turns it into BackendUnavailable.
"""

import mlx.core  # noqa: F401  (fail at import when MLX is missing)
import mlx_lm  # noqa: F401

from engine.backends.mlx.backend import UNSUPPORTED_PARAMS, MLXBackend, ignored_params

__all__ = ["MLXBackend", "UNSUPPORTED_PARAMS", "ignored_params"]

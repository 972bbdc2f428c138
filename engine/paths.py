"""Where Hearth keeps its data: HEARTH_HOME, or the platform's user data folder."""

from __future__ import annotations

import os
from pathlib import Path


def hearth_home() -> Path:
    """The data folder (created on first use). HEARTH_HOME overrides the platform default."""
    env = os.environ.get("HEARTH_HOME")
    if env:
        home = Path(env).expanduser()
    else:
        from platformdirs import user_data_dir

        home = Path(user_data_dir("Hearth", appauthor=False))
    home.mkdir(parents=True, exist_ok=True)
    return home


def models_dir() -> Path:
    """Where downloaded models go."""
    path = hearth_home() / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def logs_dir() -> Path:
    path = hearth_home() / "logs"
    path.mkdir(parents=True, exist_ok=True)
    return path

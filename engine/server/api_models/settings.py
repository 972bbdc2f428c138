"""Answers about a model's saved load settings and the model folders: /api/models/NAME/settings, /api/folders."""

from __future__ import annotations

from dataclasses import fields
from typing import Any, get_type_hints

from pydantic import ConfigDict, Field, create_model

from engine.load_settings import ModelLoadSettings
from engine.server.api_models.base import Answer, NullAsDefaultBody


def load_setting_fields(*, wire: bool = False, narrower: dict[str, tuple[Any, dict[str, Any]]] | None = None) -> dict[str, Any]:
    """The fields of :class:`~engine.load_settings.ModelLoadSettings` (the one list of the load settings), as
    ``create_model`` takes them: each of the dataclass's type, None by default.

    Args:
        wire: each read and written by its wire name (``ctx``), with its description: ``POST /api/models/load``.
        narrower: a type and ``Field`` constraints for some fields, in place of the dataclass's type.
    """
    hints = get_type_hints(ModelLoadSettings)
    out: dict[str, Any] = {}
    for f in fields(ModelLoadSettings):
        kind, constraints = (narrower or {}).get(f.name, (hints[f.name], {}))
        if wire:
            wire_name = f.metadata["wire"]
            title = wire_name.replace("_", " ").title()
            out[f.name] = (kind, Field(default=None, alias=wire_name, title=title, description=f.metadata["doc"], **constraints))
        else:
            out[f.name] = (kind, Field(default=None, **constraints))
    return out


class LoadSettings(create_model("LoadSettingsFields", __base__=Answer, **load_setting_fields())):
    """How a model loads; None: Hearth chooses what fits this machine."""


class ModelSettingsAnswer(Answer):
    """``GET``/``PUT /api/models/NAME/settings``: the settings every load of ``name`` takes."""

    name: str
    settings: LoadSettings
    loaded: bool = False  # loaded now (new settings take effect at its next load)


class ModelFolder(Answer):
    """A folder Hearth finds models in; ``online`` false while it is missing (a drive taken out)."""

    path: str
    online: bool
    downloads: bool = False  # the first online folder: where downloads go
    models: int = 0  # models found in it now


class FolderList(Answer):
    folders: list[ModelFolder]


# -- request bodies: PUT /api/models/NAME/settings, POST /api/folders ----------------------------------
class ModelSettingsBody(LoadSettings):
    """``PUT /api/models/NAME/settings``: the settings every load of the model takes (null: Hearth chooses);
    the fields of the answer's ``settings``, and unknown ones kept to be refused by name."""

    model_config = ConfigDict(extra="allow", frozen=False)


class FolderBody(NullAsDefaultBody):
    """``POST /api/folders``: a folder to find models in (``first``: downloads go to it)."""

    path: str = Field(min_length=1)
    first: bool = False

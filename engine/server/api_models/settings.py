"""Answers about a model's saved load settings and the model folders: /api/models/NAME/settings, /api/folders."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from engine.server.api_models.base import Answer, NullAsDefaultBody


class LoadSettings(Answer):
    """How a model loads; None: Hearth chooses what fits this machine."""

    n_ctx: int | None = None
    n_seq_max: int | None = None  # slots: requests generated at once
    n_gpu_layers: int | None = None
    kv_type: str | None = None
    flash_attn: bool | None = None
    n_threads: int | None = None
    n_batch: int | None = None
    rope_scale: float | None = None
    rope_orig_ctx: int | None = None
    cpu_moe: int | None = None  # experts of the first N layers on the CPU; -1: every layer's
    speculative: str | None = None  # auto | ngram | draft:MODEL | off (as `hearth serve --speculative`); None: the server's


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

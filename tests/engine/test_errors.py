"""Errors cross processes whole: the paged engine's process sends its load errors to the worker pickled."""

from __future__ import annotations

import pickle

import pytest

from engine.errors import (
    BackendUnavailable,
    ContextLengthExceeded,
    InvalidRequest,
    ModelLoadError,
    Overloaded,
)


@pytest.mark.parametrize(
    "error",
    [ModelLoadError("/models/m", "its activation 'gelu' is not one the paged engine computes."),
     BackendUnavailable("paged", "no GPU"), ContextLengthExceeded(10, 5, param="prompt"), Overloaded("Busy.", 2.0),
     InvalidRequest("Bad.", param="x")],  # fmt: skip
)
def test_every_error_is_the_same_error_after_pickling(error):
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error) and str(again) == str(error) and again.__dict__ == error.__dict__
    assert (again.status, again.code, again.param) == (error.status, error.code, error.param)

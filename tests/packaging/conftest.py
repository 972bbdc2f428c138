"""The packaging tests. Those marked ``package`` build and run the PyInstaller bundle (minutes on two
cores): `make package-test` runs them (it sets HEARTH_PACKAGE_TEST=1); the normal run skips them."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("HEARTH_PACKAGE_TEST") == "1":
        return
    skip = pytest.mark.skip(reason="builds the desktop bundle; run it with `make package-test`")
    for item in items:
        if item.get_closest_marker("package"):
            item.add_marker(skip)

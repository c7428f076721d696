#!/usr/bin/env bash
# Download into .whl/ the pure-Python dependencies that a GPU machine without internet may lack
# (carried there with the checkout; tools/device_run.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: -d .whl \
    rich markdown-it-py mdurl pygments filelock "nvidia-cutlass==4.2.0.0" "setuptools>=70.1"
ls -l .whl

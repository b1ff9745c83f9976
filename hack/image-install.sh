#!/usr/bin/env bash
# The operator image's install step, also run by tests/unit/test_packaging.py in a clean venv:
#   hack/image-install.sh VENV SRC   -> VENV holds the operator and its pinned dependencies.
# Wheels only (no compiler in either stage), every package pinned by requirements.lock.
set -euo pipefail
venv=$1 src=$2
python3 -m venv "$venv"
"$venv/bin/pip" install --no-cache-dir --disable-pip-version-check --only-binary=:all: \
  -r "$src/requirements.lock"
"$venv/bin/pip" install --no-cache-dir --disable-pip-version-check --no-deps "$src"
"$venv/bin/gateway-operator" --help >/dev/null

#!/usr/bin/env bash
# Creates .venv with the pinned dev dependencies and the operator installed editable.
# Reinstalls only when requirements or pyproject changed (stamp file).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
venv=$repo/.venv
stamp=$venv/.installed-$(cat "$repo"/requirements*.txt "$repo/pyproject.toml" | sha256sum | cut -c1-16)
[[ -f $stamp ]] && exit 0
python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check -r "$repo/requirements-dev.txt"
"$venv/bin/pip" install -q --disable-pip-version-check --no-deps -e "$repo"
rm -f "$venv"/.installed-*; touch "$stamp"

#!/usr/bin/env bash
# Creates .venv with the pinned dev dependencies, the operator and the test harness (tests/harness,
# package `harness`: tests/pyproject.toml) installed editable.
# Reinstalls only when requirements or either pyproject changed (stamp file).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
venv=$repo/.venv
stamp=$venv/.installed-$(cat "$repo"/requirements*.txt "$repo/pyproject.toml" "$repo/tests/pyproject.toml" | sha256sum | cut -c1-16)
[[ -f $stamp ]] && exit 0
python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check -r "$repo/requirements-dev.txt"
"$venv/bin/pip" install -q --disable-pip-version-check --no-deps -e "$repo" -e "$repo/tests"
rm -f "$venv"/.installed-*; touch "$stamp"

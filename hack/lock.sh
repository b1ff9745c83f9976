#!/usr/bin/env bash
# Regenerates requirements.lock: requirements.txt resolved in a clean venv, every package pinned.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install -q -r "$repo/requirements.txt"
{ echo "# Every runtime package of the operator image, pinned (generated: hack/lock.sh)."
  "$tmp/venv/bin/pip" freeze; } > "$repo/requirements.lock"

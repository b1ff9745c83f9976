#!/usr/bin/env bash
# Debian packages the sandbox and the tests need: redis-server, openssl, curl.
# Installs the missing ones with apt-get (as root, or through sudo when available).
set -euo pipefail
missing=()
for pair in redis-server:redis-server openssl:openssl curl:curl; do
  command -v "${pair%%:*}" >/dev/null || missing+=("${pair##*:}")
done
(( ${#missing[@]} == 0 )) && exit 0
sudo=""; (( EUID == 0 )) || sudo=sudo
echo "[system-deps] installing ${missing[*]} with apt-get" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

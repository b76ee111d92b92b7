#!/usr/bin/env bash
# Everything a fresh Debian 12 machine needs for the demo and the tests: Debian packages,
# a virtualenv with the package and its test extras, and configurable-http-proxy.
# Safe to run again: each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
# Debian packages the demo and tests use (binaries checked first, installed when missing)
declare -A APT=([setsid]=util-linux [node]=nodejs [npm]=npm [/usr/bin/chromium]=chromium [/usr/bin/prometheus]=prometheus
             [/usr/sbin/nft]=nftables)  # nft: the simulator's data plane (Services, NetworkPolicy)

missing=()
for bin in "${!APT[@]}"; do
  command -v "$bin" >/dev/null 2>&1 || missing+=("${APT[$bin]}")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if ! command -v configurable-http-proxy >/dev/null 2>&1; then
  echo "setup: installing configurable-http-proxy (npm)"
  npm install -g --no-fund --no-audit configurable-http-proxy@5 >/dev/null
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
stamp="$VENV/.setup-stamp"
want=$(cat setup.cfg pyproject.toml | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing the package and its test dependencies into $VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -e ".[test]"
  echo "$want" > "$stamp"
fi

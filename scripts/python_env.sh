#!/usr/bin/env bash
# Makes (or updates) the Python virtual environment the tests use for their reference
# implementations (tools/requirements-test.txt) and prints its interpreter's path.
#     scripts/python_env.sh [DIR]     default DIR: $LW_VENV or /var/cache/lightwave/venv
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-${LW_VENV:-/var/cache/lightwave/venv}}
req=tools/requirements-test.txt
stamp=$venv/.requirements
if [[ ! -x $venv/bin/python ]]; then
  mkdir -p "$(dirname "$venv")"
  python3 -m venv "$venv" >&2
fi
if ! cmp -s "$req" "$stamp"; then
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req" >&2
  cp "$req" "$stamp"
fi
echo "$venv/bin/python"

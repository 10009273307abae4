#!/usr/bin/env bash
# Prepares the "before" tree of an A/B timing on a machine that receives the working tree without
# its .git (the GPU machine): writes REV's versions of the source files that differ between REV
# and the working tree into .ab/base/ (ignored; carry ".ab" with the call), and lists in
# .ab/removed the files REV does not have. scripts/device_ab.sh builds both trees there.
#     scripts/ab_base.sh REV [PATH ...]    (default paths: src bench tests cmake CMakeLists.txt)
set -euo pipefail
[[ $# -ge 1 ]] || { echo "usage: scripts/ab_base.sh REV [PATH ...]" >&2; exit 2; }
rev=$1
shift
git rev-parse --verify -q "$rev^{commit}" > /dev/null || { echo "ab_base: '$rev' is not a commit" >&2; exit 2; }
paths=("$@")
(( ${#paths[@]} )) || paths=(src bench tests cmake CMakeLists.txt)
rm -rf .ab
mkdir -p .ab/base
: > .ab/removed
changed=0
while IFS= read -r f; do
  if git cat-file -e "$rev:$f" 2> /dev/null; then
    mkdir -p ".ab/base/$(dirname "$f")"
    git show "$rev:$f" > ".ab/base/$f"
  else
    echo "$f" >> .ab/removed
  fi
  changed=$((changed + 1))
done < <(git diff --name-only "$rev" -- "${paths[@]}"; git ls-files --others --exclude-standard -- "${paths[@]}")
git rev-parse --short "$rev" > .ab/rev
echo "ab_base: $changed files differ from $(cat .ab/rev) ($(wc -l < .ab/removed) not in it); carry .ab"

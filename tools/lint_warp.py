#!/usr/bin/env python3
"""Warp-width lint for kernel code outside the portability layer (src/gpu/).

Kernel code must not assume a warp width: the same source runs on 32-lane NVIDIA and RDNA
warps and on 64-lane CDNA wavefronts. The rules, applied to *.cu and *.cuh files and to the
headers under src/kernels/ (comments and string literals are ignored):

  mask-literal     0xffffffff: a 32-lane "all lanes" mask
  warp-literal     an integer literal 32 or 64 (a warp size in disguise)
  lane-arithmetic  % 32, / 32, & 31, >> 5: lane/warp index arithmetic for 32 lanes
  warpsize         warpSize: use lw::gpu::kWarpSize (device) or Context::warp_size() (host)
  raw-intrinsic    __shfl*, __ballot*, __any*, __all*, __activemask, __syncwarp: use gpu/warp.h
  raw-launch       <<< >>>: launch through lw::gpu::launch
  raw-shared       __shared__: declare with LW_SHARED / LW_DYNAMIC_SHARED, which the
                   emulator's sanitizer checks (uninitialised reads, races, bounds)

A line that really means a number, not a warp, says so with the comment `lint: not-a-warp`.

Usage: lint_warp.py DIR_OR_FILE...            exit 1 and list violations if any
       lint_warp.py --self-test FIXTURE...     check that every line marked `expect: RULE`
                                               is reported with exactly those rules
       lint_warp.py --profile outside ARGS...  the lint for code outside lightwave (wave64
                                               hazards only), shipped with the lightwave-simt
                                               package as lw-simt-lint: see
                                               src/gpu/simt/tools/lw_simt_lint.py
"""
import pathlib
import re
import sys

# The outside profile and the shared pieces (comment stripping, the self-test) live with the
# emulator package, which installs them; this file keeps lightwave's own rules.
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "src/gpu/simt/tools"))
import lw_simt_lint  # noqa: E402
from lw_simt_lint import strip_code  # noqa: E402,F401

RULES = [
    ("mask-literal", re.compile(r"\b0[xX][fF]{8}[uUlL]*\b")),
    ("warp-literal", re.compile(r"(?<![\w.])(32|64)(?![\w.])")),
    ("lane-arithmetic", re.compile(r"(%|/)\s*32\b|&\s*31\b|>>\s*5\b")),
    ("warpsize", re.compile(r"\bwarpSize\b")),
    ("raw-intrinsic", re.compile(r"\b(__shfl\w*|__ballot\w*|__any\w*|__all\w*|__activemask|__syncwarp)\s*\(")),
    ("raw-launch", re.compile(r"<<<|>>>")),
    ("raw-shared", re.compile(r"\b__shared__\b")),
]
ALLOW = "lint: not-a-warp"


def check_file(path):
    raw = path.read_text(encoding="utf-8").split("\n")
    code = strip_code("\n".join(raw)).split("\n")
    found = []
    for no, (line, original) in enumerate(zip(code, raw), 1):
        if ALLOW in original:
            continue
        for name, rx in RULES:
            if rx.search(line):
                found.append((no, name, original.strip()))
    return found


def kernel_files(root):
    root = pathlib.Path(root)
    if root.is_file():
        return [root]
    files = []
    for p in sorted(root.rglob("*")):
        if not p.is_file() or "gpu" in p.relative_to(root).parts[:1] + p.parts[-3:-1]:
            continue
        if p.suffix in (".cu", ".cuh") or (p.suffix == ".h" and "kernels" in p.parts[:-1]):
            files.append(p)
    return files


def main(argv):
    if argv[:2] == ["--profile", "outside"]:
        return lw_simt_lint.main(argv[2:])
    if argv[:1] == ["--profile"] and argv[1:2] != ["lightwave"]:
        print("lint_warp.py: --profile is lightwave (the default) or outside")
        return 2
    if argv[:1] == ["--profile"]:
        argv = argv[2:]
    if argv and argv[0] == "--self-test":
        return lw_simt_lint.self_test(argv[1:], check_file)
    violations = 0
    for root in argv:
        for path in kernel_files(root):
            for no, name, text in check_file(path):
                print(f"{path}:{no}: [{name}] {text}")
                violations += 1
    if violations:
        print(f"{violations} warp-width violation(s); see tools/lint_warp.py for the rules")
        return 1
    print("warp-width lint: clean")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

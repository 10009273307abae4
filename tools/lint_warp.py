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
"""
import pathlib
import re
import sys

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


def strip_code(text):
    """Blank out comments and string/char literals, keeping line structure."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + (c if j < n else ""))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


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
    if argv and argv[0] == "--self-test":
        ok = True
        for f in argv[1:]:
            path = pathlib.Path(f)
            got = {}
            for no, name, _ in check_file(path):
                got.setdefault(no, set()).add(name)
            want = {}
            for no, line in enumerate(path.read_text().split("\n"), 1):
                m = re.search(r"expect:\s*([\w\-, ]+)", line)
                if m:
                    want[no] = {r.strip() for r in m.group(1).split(",")}
            if got != want:
                ok = False
                for no in sorted(set(got) | set(want)):
                    if got.get(no) != want.get(no):
                        print(f"{path}:{no}: expected {sorted(want.get(no, []))}, reported {sorted(got.get(no, []))}")
        print("lint self-test", "passed" if ok else "FAILED")
        return 0 if ok else 1
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

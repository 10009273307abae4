#!/usr/bin/env python3
"""The emulator as an outside project uses it: builds and installs src/gpu/simt on its own
(standalone CMake project, only Boost.Context and threads) for one warp size, builds
tests/simt_package against the installed package with find_package(lightwave-simt), runs it,
and checks that the sanitizer reports the planted wave64 bug where it is wrong (warp 64) and
that the fixed twin runs clean with the right answer. Then runs the installed lw-simt-lint (the
path find_package gave in LW_SIMT_LINT) over wave_hazards.cu, which must be reported at exactly
its marked lines with the marked rules, and over outside.cu, where only the broken kernel's
__popc line may be reported.

Usage: check.py --source REPO --work DIR --warp 32|64 [--generator Ninja]
"""
import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys


def run(cmd, **kw):
    print("+", " ".join(str(c) for c in cmd), flush=True)
    return subprocess.run([str(c) for c in cmd], check=True, text=True, **kw)


def lint_findings(lint, path):
    """{(line, rule)} the lint reports for one file, and its exit status."""
    r = subprocess.run([str(lint), str(path)], text=True, capture_output=True)
    print(r.stdout + r.stderr)
    found = {(int(m.group(1)), m.group(2))
             for m in re.finditer(rf"^{re.escape(str(path))}:(\d+): \[([\w-]+)\]", r.stdout, re.M)}
    return found, r.returncode


def check_lint(tests, work, prefix):
    """The installed lint over the outside project's sources; the names of failed checks."""
    failed = []
    lint = pathlib.Path((work / "outside" / "lw_simt_lint_path.txt").read_text().strip())
    if lint.resolve() != (prefix / "bin" / "lw-simt-lint").resolve():
        print(f"FAIL lint-path: LW_SIMT_LINT is {lint}, not the installed {prefix / 'bin' / 'lw-simt-lint'}")
        failed.append("lint-path")
    hazards = tests / "wave_hazards.cu"
    planted = {(no, rule.strip())
               for no, line in enumerate(hazards.read_text().split("\n"), 1)
               for m in [re.search(r"//\s*expect:\s*([\w\-, ]+)", line)] if m
               for rule in m.group(1).split(",")}
    found, rc = lint_findings(lint, hazards)
    if found != planted or rc != 1:
        print(f"FAIL lint-hazards: exit {rc}; not reported {sorted(planted - found)}, "
              f"reported unplanted {sorted(found - planted)}")
        failed.append("lint-hazards")
    # outside.cu: the broken kernel's 32-bit count is found, nothing of the fixed kernel.
    source = (tests / "outside.cu").read_text().split("\n")
    popc = {no for no, line in enumerate(source, 1) if "__popc(votes)" in line}
    found, rc = lint_findings(lint, tests / "outside.cu")
    if found != {(no, "ballot-narrowed") for no in popc} or rc != 1:
        print(f"FAIL lint-outside: exit {rc}, reported {sorted(found)}; expected only "
              f"ballot-narrowed at {sorted(popc)} (count_and_sum_broken)")
        failed.append("lint-outside")
    return failed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True, type=pathlib.Path)
    ap.add_argument("--work", required=True, type=pathlib.Path)
    ap.add_argument("--warp", required=True, choices=["32", "64"])
    ap.add_argument("--generator", default="Ninja")
    a = ap.parse_args()
    work = a.work / f"warp{a.warp}"
    shutil.rmtree(work, ignore_errors=True)
    prefix = work / "prefix"
    launcher = []
    if shutil.which("ccache"):
        launcher = ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
    common = ["-G", a.generator, *launcher]
    run(["cmake", "-S", a.source / "src/gpu/simt", "-B", work / "simt", f"-DLW_WARP_SIZE={a.warp}", *common])
    run(["cmake", "--build", work / "simt"])
    run(["cmake", "--install", work / "simt", "--prefix", prefix])
    run(["cmake", "-S", a.source / "tests/simt_package", "-B", work / "outside", f"-DCMAKE_PREFIX_PATH={prefix}", *common])
    run(["cmake", "--build", work / "outside"])
    out = run([work / "outside" / "outside"], capture_output=True).stdout
    print(out)
    warp = int(a.warp)
    want = {
        "warp size": f"warp size {warp}",
        "broken": ("count_and_sum_broken: count -1, sum -1.0, ballot truncated" if warp == 64
                   else f"count_and_sum_broken: count {warp // 4}, sum 16.0, clean"),
        "fixed": f"count_and_sum_fixed: count {warp // 4}, sum 16.0, clean",
    }
    failed = [k for k, line in want.items() if line not in out.splitlines()]
    for k in failed:
        print(f"FAIL {k}: expected the line '{want[k]}'")
    failed += check_lint(a.source / "tests/simt_package", work, prefix)
    print("simt package: " + ("FAILED" if failed else "ok"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

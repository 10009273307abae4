#!/usr/bin/env python3
"""The emulator as an outside project uses it: builds and installs src/gpu/simt on its own
(standalone CMake project, only Boost.Context and threads) for one warp size, builds
tests/simt_package against the installed package with find_package(lightwave-simt), runs it,
and checks that the sanitizer reports the planted wave64 bug where it is wrong (warp 64) and
that the fixed twin runs clean with the right answer.

Usage: check.py --source REPO --work DIR --warp 32|64 [--generator Ninja]
"""
import argparse
import os
import pathlib
import shutil
import subprocess
import sys


def run(cmd, **kw):
    print("+", " ".join(str(c) for c in cmd), flush=True)
    return subprocess.run([str(c) for c in cmd], check=True, text=True, **kw)


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
    print("simt package: " + ("FAILED" if failed else "ok"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Runs a command and checks its exit status and output (stdout and stderr together).

    expect_output.py [--fail] [--contains TEXT]... [--needs PATH] -- CMD [ARG]...

--fail: the command must exit non-zero (and not be killed by a signal other than abort);
otherwise it must exit 0. Each TEXT must occur in the output. --needs: when PATH does not
exist, the test is skipped (exit status 77, ctest's SKIP_RETURN_CODE).
"""
import os
import subprocess
import sys


def main(argv):
    sep = argv.index("--")
    opts, cmd = argv[:sep], argv[sep + 1:]
    must_fail = "--fail" in opts
    wanted = [opts[i + 1] for i, o in enumerate(opts) if o == "--contains"]
    for needed in [opts[i + 1] for i, o in enumerate(opts) if o == "--needs"]:
        if not os.path.exists(needed):
            print(f"expect_output: skipped: {needed} is absent (scripts/fetch_model.sh fetches it)")
            return 77
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    out = proc.stdout
    ok = (proc.returncode != 0) if must_fail else (proc.returncode == 0)
    missing = [w for w in wanted if w not in out]
    if not ok or missing:
        print(out)
        print(f"expect_output: exit status {proc.returncode} ({'non-zero' if must_fail else '0'} expected); "
              f"missing: {missing}")
        return 1
    print(f"expect_output: ok (exit {proc.returncode}, found {wanted})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""`python setup.py bdist_wheel [-d DIR]`: builds lightwave's wheel without pip.

The build is pyproject.toml's: this calls its backend (scikit-build-core, which runs CMake),
so the wheel is the one `pip wheel .` makes, with the same environment variables (CMAKE_ARGS,
LW_GPU, CMAKE_BUILD_PARALLEL_LEVEL, TESTING). It needs scikit-build-core and pybind11 in this
Python (pip install scikit-build-core pybind11, or Debian's python3-scikit-build-core and
pybind11-dev). Only bdist_wheel is provided; install with `pip install .` or the wheel.
"""

import argparse
import os
import sys

COMMANDS = ("bdist_wheel",)


def main() -> int:
    parser = argparse.ArgumentParser(prog="setup.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=COMMANDS)
    parser.add_argument("-d", "--dist-dir", default="dist", help="folder for the wheel (default: dist)")
    parser.add_argument("-C", "--config-setting", action="append", default=[], metavar="KEY=VALUE",
                        help="a scikit-build-core setting, as pip's --config-settings (e.g. build-dir=build/mine)")
    args = parser.parse_args()
    try:
        from scikit_build_core.build import build_wheel
    except ImportError:
        sys.exit("setup.py: scikit-build-core is not installed: pip install scikit-build-core pybind11")
    settings = dict(s.split("=", 1) for s in args.config_setting)
    dist = os.path.abspath(args.dist_dir)
    os.chdir(os.path.dirname(os.path.abspath(__file__)))
    os.makedirs(dist, exist_ok=True)
    name = build_wheel(dist, settings or None)
    print(f"setup.py: built {os.path.join(dist, name)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The `lightwave` command (and `python -m lightwave`): runs the command-line executable
installed inside the package (lightwave/bin/lightwave) with the same arguments."""

import os
import sys
from pathlib import Path


def executable() -> Path:
    return Path(os.path.abspath(__file__)).parent / "bin" / "lightwave"


def main() -> None:
    exe = executable()
    if not os.access(exe, os.X_OK):
        sys.exit(f"lightwave: the command-line executable is missing: {exe}")
    os.execv(exe, ["lightwave", *sys.argv[1:]])


if __name__ == "__main__":
    main()

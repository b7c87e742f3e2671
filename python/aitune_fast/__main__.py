"""``python -m aitune_fast COMMAND``. Commands: ``inspect PATH`` (what a saved tuned module serves, read without
running code from the file; ``aitune_fast._inspect``)."""

from __future__ import annotations

import sys

_USAGE = "usage: python -m aitune_fast inspect PATH [--json] [--level short|medium|full]"


def main(argv: list[str] | None = None) -> int:
    """Run the command `argv` names; returns the exit status."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] != "inspect":
        print(_USAGE, file=sys.stderr)
        return 2
    from aitune_fast._inspect import main as inspect_main

    return inspect_main(args[1:])


if __name__ == "__main__":
    sys.exit(main())

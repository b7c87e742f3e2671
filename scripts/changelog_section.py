"""The CHANGELOG's section for one version, as the text of its GitHub Release.

    python scripts/changelog_section.py 0.2.0        # the body of `## [0.2.0] - DATE` (without the heading)
    python scripts/changelog_section.py Unreleased   # the body of `## [Unreleased]`

Exit status 1, printing nothing on stdout, when the CHANGELOG has no such section or it is empty: the release
workflow then stops before anything is published (date the section first, as DEVELOPERS.md says).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

CHANGELOG = Path(__file__).resolve().parents[1] / "CHANGELOG.md"


def section(text: str, version: str) -> str | None:
    """The lines under `## [version]` up to the next `## ` heading or the link definitions at the end."""
    heading = re.search(rf"^## \[{re.escape(version)}\][^\n]*\n", text, re.M)
    if heading is None:
        return None
    rest = text[heading.end() :]
    end = re.search(r"^## |^\[[^\]]+\]: ", rest, re.M)
    body = (rest[: end.start()] if end else rest).strip()
    return body or None


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    body = section(CHANGELOG.read_text(), sys.argv[1])
    if body is None:
        print(f"CHANGELOG.md has no (or an empty) section [{sys.argv[1]}]", file=sys.stderr)
        return 1
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Rewrite the package's imports of itself as relative imports, so that it works under the
name it is installed as (``tokenwire``) and under ``pipeline`` (the folder, the alias), and a
user's own ``pipeline`` package cannot stand in for it.

``from pipeline.a.b import c`` in ``pipeline/x/y.py`` becomes ``from ..a.b import c``;
``from pipeline import c`` becomes ``from .. import c``. Run it from the repository root
(``python scripts/relative_imports.py``); it prints the files it changed. Imports written as
``import pipeline...`` are not rewritten: tests/test_package_name.py names any left.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

PACKAGE = Path("pipeline")
_FROM = re.compile(r"^(\s*)from pipeline((?:\.\w+)*) import ", re.M)


def relative(path: Path) -> str:
    """The text of ``path`` with its ``from pipeline... import`` lines made relative."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    # (the module's package: pipeline/x/y.py and pipeline/x/__init__.py are both in
    # pipeline.x, two dots up to pipeline)
    dots = "." * (len(parts) - 1)

    def rewrite(match: re.Match) -> str:
        indent, rest = match[1], match[2].lstrip(".")
        return f"{indent}from {dots}{rest} import " if rest else f"{indent}from {dots} import "

    return _FROM.sub(rewrite, path.read_text(encoding="utf-8"))


def main() -> int:
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        new = relative(path)
        if new != text:
            path.write_text(new, encoding="utf-8")
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

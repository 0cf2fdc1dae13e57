"""Functions of the package too long to read on one screen.

    python scripts/long_functions.py [--limit LINES] [ROOT]

Lists every function (and method) of ``ROOT`` (default: the ``pipeline`` package) whose
body, from ``def`` to its last line, spans ``LIMIT`` lines or more (default 80), longest
first, as ``lines path:line name``. ``tests/test_code_shape.py`` fails when the list is not
empty.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LIMIT = 80


def long_functions(root: Path, limit: int = LIMIT) -> list[tuple[int, str, str]]:
    """(lines, ``path:line``, name) of each function under ``root`` of ``limit`` lines or more,
    longest first; paths relative to ``root``'s parent."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines >= limit:
                    where = f"{path.relative_to(root.parent)}:{node.lineno}"
                    found.append((lines, where, node.name))
    return sorted(found, key=lambda f: (-f[0], f[1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", type=Path, default=REPO / "pipeline")
    parser.add_argument("--limit", type=int, default=LIMIT, help="lines (default 80)")
    args = parser.parse_args(argv)
    found = long_functions(args.root, args.limit)
    for lines, where, name in found:
        print(f"{lines:4d} {where} {name}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

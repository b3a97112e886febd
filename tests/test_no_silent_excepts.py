"""No exception is dropped in silence in the host: an `except` whose whole body is `pass` (or `...`)
hides a failure from the next engineer. Drop one on purpose with `contextlib.suppress(...)` and a
comment saying why nothing can be done, or log what was dropped (docs/design.md, "Habits")."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HOST = REPO / "host"


def silent_excepts(source: str) -> list[int]:
    """The lines of the `except` clauses in `source` that do nothing."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ExceptHandler) and all(_does_nothing(statement) for statement in node.body):
            lines.append(node.lineno)
    return lines


def _does_nothing(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Pass) or (
        isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant) and statement.value.value is ...
    )


@pytest.mark.parametrize("path", sorted(HOST.rglob("*.py")), ids=lambda p: str(p.relative_to(REPO)))
def test_no_host_module_drops_an_exception_in_silence(path: Path) -> None:
    found = silent_excepts(path.read_text(encoding="utf-8"))
    assert found == [], (
        f"{path.relative_to(REPO)}: `except ...: pass` at lines {found}: suppress it with a reason, or log it"
    )


def test_the_check_sees_one() -> None:
    assert silent_excepts("try:\n    f()\nexcept OSError:\n    pass  # why\n") == [3]
    assert silent_excepts("try:\n    f()\nexcept OSError:\n    ...\n") == [3]
    assert silent_excepts("try:\n    f()\nexcept OSError:\n    log.debug('x')\n") == []

"""The pip hints a missing optional dependency prints (datamask/shared.py PIP_HINTS) are the
lines requirements.txt pins, and name each module once: a dict literal with a repeated key keeps
the last value silently, which is how "ray" once pointed at a datatrove extra."""

import ast
from pathlib import Path

from datamask.shared import PIP_HINTS

ROOT = Path(__file__).resolve().parent.parent


def hint_keys_as_written() -> list[str]:
    tree = ast.parse((ROOT / "datamask" / "shared.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "PIP_HINTS"
                                                for t in node.targets):
            return [key.value for key in node.value.keys]
    raise AssertionError("PIP_HINTS not found in datamask/shared.py")


def test_each_module_has_one_hint():
    keys = hint_keys_as_written()
    assert sorted(k for k in set(keys) if keys.count(k) > 1) == []


def test_every_pinned_hint_is_a_line_of_requirements():
    pinned = {line.strip() for line in (ROOT / "requirements.txt").read_text().splitlines()
              if "==" in line and not line.lstrip().startswith("#")}
    assert sorted(hint for hint in PIP_HINTS.values() if "==" in hint and hint not in pinned) == []

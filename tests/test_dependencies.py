"""The pip hints a missing optional dependency prints (datamask/shared.py PIP_HINTS) are the
lines requirements.txt (or requirements-nodeps.txt, for the packages installed without their
dependencies) pins, and name each module once: a dict literal with a repeated key keeps
the last value silently, which is how "ray" once pointed at a datatrove extra."""

import ast
import sys
from pathlib import Path

import pytest

from datamask.errors import UserError
from datamask.shared import NO_DEPS, PIP_HINTS, require

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


def pinned(name: str) -> set[str]:
    return {line.strip() for line in (ROOT / name).read_text().splitlines()
            if "==" in line and not line.lstrip().startswith("#")}


def test_every_pinned_hint_is_a_line_of_requirements():
    lines = pinned("requirements.txt") | pinned("requirements-nodeps.txt")
    assert sorted(hint for hint in PIP_HINTS.values() if "==" in hint and hint not in lines) == []


def test_the_packages_installed_without_dependencies_are_the_ones_their_file_pins():
    assert {line.split("==")[0] for line in pinned("requirements-nodeps.txt")} == NO_DEPS
    assert pinned("requirements-nodeps.txt").isdisjoint(pinned("requirements.txt"))


def test_a_missing_package_installed_without_dependencies_names_that_pip_line(monkeypatch):
    for module in ("tokenlearn", "tokenlearn.train"):
        monkeypatch.setitem(sys.modules, module, None)  # an import of it fails, as if absent
    with pytest.raises(UserError, match=r'pip install --no-deps "tokenlearn==0\.2\.1" \(or make '):
        require("tokenlearn.train", "bench-static's fitted static model")


def test_the_heuristic_scorer_without_spacy_is_refused_before_it_imports_anything(monkeypatch):
    """It imports spaCy on its first score, so its check comes at construction instead."""
    from reproduce.pipeline.prepare import HeuristicQuality

    monkeypatch.setitem(sys.modules, "spacy", None)
    with pytest.raises(UserError, match=r'quality scorer needs the package \'spacy\': pip install '
                                        r'"spacy==3\.8\.18"'):
        HeuristicQuality()

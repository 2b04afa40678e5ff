"""What each part of the project imports is what pyproject.toml declares for it: the core's
dependencies, or the extra of that part (eval, pipeline) with the pip hint of its missing module
(datamask/shared.py PIP_HINTS). The hints are the lines requirements.txt (or
requirements-nodeps.txt, for the packages installed without their dependencies) pins, name each
module once (a dict literal with a repeated key keeps the last value silently, which is how "ray"
once pointed at a datatrove extra), and name the extra that installs them."""

import ast
import re
import subprocess
import sys
import tomllib
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
    assert sorted(hint for hint, _ in PIP_HINTS.values() if "==" in hint and hint not in lines) == []


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
                                        r'"datamask\[pipeline\]" \(or pip install "spacy==3\.8\.18"\)'):
        HeuristicQuality()


# ---------------------------------------------------------------- the extras of pyproject.toml

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
PACKAGES = ("datamask", "baselines", "eval", "reproduce", "figures")
# the extras a part's modules may import at their own import; any part may import an optional
# module (one with a hint) inside a function, or where an ImportError is caught
PART_EXTRAS = {"datamask": (), "baselines": (), "eval": ("eval",), "reproduce": ("pipeline",),
               "figures": ("pipeline",)}
SELF = re.compile(r"datamask\[(.*)\]")


def requirement_name(line: str) -> str:
    return re.split(r"[\[=<>!~; ]", line, maxsplit=1)[0].lower().replace("-", "_")


def expanded(extra: str) -> tuple[set[str], set[str]]:
    """(the extras `extra` installs, itself included; the requirement lines they list)."""
    names, lines = {extra}, set()
    for line in PROJECT["optional-dependencies"][extra]:
        if match := SELF.fullmatch(line):
            for inner in match.group(1).split(","):
                more_names, more_lines = expanded(inner)
                names |= more_names
                lines |= more_lines
        else:
            lines.add(line)
    return names, lines


CORE = {requirement_name(line) for line in PROJECT["dependencies"]}


class Imports(ast.NodeVisitor):
    """The third-party modules a file imports, each with whether it is imported at the file's
    own import (not inside a function, nor in a try that catches ImportError): import
    statements, and `require`/`require_installed` calls with a literal module name."""

    def __init__(self):
        self.found: list[tuple[str, bool]] = []
        self.lazy = 0

    def visit_FunctionDef(self, node):
        self.lazy += 1
        self.generic_visit(node)
        self.lazy -= 1

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Try(self, node):
        guarded = any(h.type is not None and re.search(r"\b(ImportError|ModuleNotFoundError)\b",
                                                       ast.unparse(h.type))
                      for h in node.handlers)
        self.lazy += guarded
        for statement in node.body:
            self.visit(statement)
        self.lazy -= guarded
        for statement in [*node.handlers, *node.orelse, *node.finalbody]:
            self.visit(statement)

    def visit_Import(self, node):
        for alias in node.names:
            self.add(alias.name)

    def visit_ImportFrom(self, node):
        if node.level == 0 and node.module:
            self.add(node.module)

    def visit_Call(self, node):
        name = getattr(node.func, "id", getattr(node.func, "attr", None))
        if (name in ("require", "require_installed") and node.args
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            self.add(node.args[0].value)
        self.generic_visit(node)

    def add(self, module: str):
        top = module.split(".")[0]
        if top not in sys.stdlib_module_names and top not in PACKAGES:
            self.found.append((top, self.lazy == 0))


def undeclared(package_dir: Path, part: str) -> list[str]:
    """Each import of the part's files that neither the core nor the part's extras declare."""
    allowed = set().union(*(expanded(extra)[0] for extra in PART_EXTRAS[part]))
    problems = []
    for path in sorted(package_dir.rglob("*.py")):
        finder = Imports()
        finder.visit(ast.parse(path.read_text(), str(path)))
        for module, eager in sorted(set(finder.found)):
            where = f"{path.relative_to(package_dir.parent)} imports {module}"
            if module in CORE:
                continue
            if module not in PIP_HINTS:
                problems.append(f"{where}, which neither the core nor any extra declares")
            elif eager and PIP_HINTS[module][1] not in allowed:
                problems.append(f"{where} at its import, but {module} is in "
                                f"{PIP_HINTS[module][1] or 'no extra'}, not in "
                                f"{' or '.join(sorted(allowed)) or 'the core'}")
    return problems


@pytest.mark.parametrize("part", PACKAGES)
def test_each_part_imports_only_what_the_core_or_its_extras_declare(part):
    assert undeclared(ROOT / part, part) == []


def test_the_import_check_finds_an_undeclared_or_misplaced_import(tmp_path):
    part = tmp_path / "datamask"
    part.mkdir()
    (part / "a.py").write_text("import sklearn\nimport pandas\n\ndef f():\n    import ray\n"
                               "try:\n    import faiss\nexcept ImportError:\n    faiss = None\n"
                               "x = require('datatrove.pipeline', 'a stage')\n")
    assert undeclared(part, "datamask") == [
        "datamask/a.py imports datatrove at its import, but datatrove is in pipeline, not in "
        "the core",
        "datamask/a.py imports pandas at its import, but pandas is in eval, not in the core",
        "datamask/a.py imports sklearn, which neither the core nor any extra declares"]


def test_every_declared_version_is_the_pin_of_requirements():
    lines = pinned("requirements.txt")
    declared = set(PROJECT["dependencies"]).union(
        *(expanded(extra)[1] for extra in PROJECT["optional-dependencies"]))
    assert sorted(declared - lines) == []
    assert "torch" in CORE and all("==" in line for line in declared)


def test_each_hint_names_the_extra_that_installs_it():
    wrong = {module: (hint, extra) for module, (hint, extra) in PIP_HINTS.items()
             if (extra and hint not in expanded(extra)[1])
             or (not extra and "==" in hint and module not in NO_DEPS)}
    assert wrong == {}
    assert set(expanded("all")[0]) == set(PROJECT["optional-dependencies"])


def test_a_part_without_its_extra_is_refused_in_one_line_with_the_pip_command(tmp_path):
    """Its import raises a UserError naming the missing package and the extra; the
    `datamask-pipeline` script prints it as one line and exits 2."""
    code = (
        "import sys\n"
        "from datamask.errors import UserError\n"
        "for part, missing in (('reproduce', 'datatrove'), ('eval', 'lm_eval'), "
        "('figures', 'matplotlib')):\n"
        "    sys.modules[missing] = None  # absent, as where it is not installed\n"
        "    try:\n"
        "        __import__(part)\n"
        "    except UserError as err:\n"
        "        print(err)\n"
        "    del sys.modules[missing]\n"
        "sys.modules['spacy'] = None\n"
        "from datamask.cli import pipeline_main\n"
        "sys.exit(pipeline_main(['--help']))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.splitlines() == [
        "the reproduction pipeline (package reproduce) needs the package 'datatrove': pip install "
        '"datamask[pipeline]" (or pip install "datatrove[io,processing]==0.10.1")',
        "the evaluation (package eval) needs the package 'lm_eval': pip install "
        '"datamask[eval]" (or pip install "lm-eval[hf]==0.4.13")',
        "the figures (package figures) needs the package 'matplotlib': pip install "
        '"datamask[pipeline]" (or pip install "matplotlib==3.11.2")']
    assert done.returncode == 2 and done.stderr == (
        "datamask pipeline: error: the reproduction pipeline (package reproduce) needs the package "
        '\'spacy\': pip install "datamask[pipeline]" (or pip install "spacy==3.8.18")\n')


def test_version_of_the_pipeline_script(capsys):
    from datamask import __version__
    from reproduce.cli import main

    with pytest.raises(SystemExit) as done:
        main(["--version"], prog="datamask-pipeline")
    assert done.value.code == 0
    assert capsys.readouterr().out == f"datamask-pipeline {__version__}\n"

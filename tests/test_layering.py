"""The packages import one way only (docs/design.md, "Package layering"): a package may import those
below it, never one above it, so the core stands alone and every layer can be read on its own."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# lowest first: the core, the baseline selectors, the lm-eval stage, the pipeline, the figures
LAYERS = ["datamask", "baselines", "eval", "reproduce", "figures"]


def imported_packages(path: Path) -> set[str]:
    """Top-level project packages a file imports, wherever the import statement stands."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found & set(LAYERS)


@pytest.mark.parametrize("package", LAYERS)
def test_no_package_imports_one_above_it(package):
    rank = LAYERS.index(package)
    upward = {str(path.relative_to(ROOT)): sorted(p for p in imported_packages(path)
                                                   if LAYERS.index(p) > rank)
              for path in sorted((ROOT / package).rglob("*.py"))}
    assert not {path: above for path, above in upward.items() if above}


def test_the_check_sees_imports_inside_functions(tmp_path):
    source = tmp_path / "x.py"
    source.write_text("def f():\n    from reproduce.cli import main\n    import baselines.mmr\n")
    assert imported_packages(source) == {"reproduce", "baselines"}

"""The packages import one way only (docs/design.md, "Package layering"): a package may import those
below it, never one above it, so the core stands alone and every layer can be read on its own.
Inside reproduce the same holds for its parts, and no module imports itself back through others."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# lowest first: the core, the baseline selectors, the lm-eval stage, the pipeline, the figures
LAYERS = ["datamask", "baselines", "eval", "reproduce", "figures"]
# reproduce's parts, lowest first: the data stages, the pool built from them, the command line
# over both, the benchmarks, the experiments (downstream drives the command line; findings reads
# the benchmarks' results), `python -m reproduce`
REPRODUCE_LAYERS = ["reproduce.pipeline", "reproduce.pool", "reproduce.cli", "reproduce.bench",
                    "reproduce.experiments", "reproduce.__main__"]


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, root: Path = ROOT) -> set[str]:
    """The dotted names a file imports, wherever the import statement stands, relative imports
    resolved: `from X import a` is X.a where that is a module of the tree, else X."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = []
            if node.level:
                package = module_name(path, root).split(".")
                package = package if path.name == "__init__.py" else package[:-1]
                base = package[:len(package) - node.level + 1]
            origin = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                name = f"{origin}.{alias.name}"
                as_path = root / name.replace(".", "/")
                is_module = as_path.with_suffix(".py").is_file() or as_path.is_dir()
                found.add(name if is_module else origin)
    return found


def imported_packages(path: Path) -> set[str]:
    """Top-level project packages a file imports."""
    return {name.split(".")[0] for name in imported_modules(path)} & set(LAYERS)


def layer(name: str, layers: list[str]) -> int | None:
    """The rank of the layer `name` belongs to, None outside them."""
    return next((rank for rank, prefix in enumerate(layers)
                 if name == prefix or name.startswith(prefix + ".")), None)


@pytest.mark.parametrize("package", LAYERS)
def test_no_package_imports_one_above_it(package):
    rank = LAYERS.index(package)
    upward = {str(path.relative_to(ROOT)): sorted(p for p in imported_packages(path)
                                                   if LAYERS.index(p) > rank)
              for path in sorted((ROOT / package).rglob("*.py"))}
    assert not {path: above for path, above in upward.items() if above}


def test_no_part_of_reproduce_imports_one_above_it():
    upward = {}
    for path in sorted((ROOT / "reproduce").rglob("*.py")):
        rank = layer(module_name(path), REPRODUCE_LAYERS)
        above = sorted(name for name in imported_modules(path)
                       if (layer(name, REPRODUCE_LAYERS) or 0) > (rank or 0))
        if above:
            upward[str(path.relative_to(ROOT))] = above
    assert not upward


def test_every_module_of_reproduce_has_a_layer():
    """A new part of reproduce is placed in the order before it can import anything."""
    assert [str(path.relative_to(ROOT)) for path in sorted((ROOT / "reproduce").rglob("*.py"))
            if layer(module_name(path), REPRODUCE_LAYERS) is None
            and module_name(path) != "reproduce"] == []


def import_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of `graph` (module -> modules it imports) as the modules along it, [] if none."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(module: str) -> list[str]:
        state[module] = "open"
        path.append(module)
        for other in sorted(graph.get(module, ())):
            if state.get(other) == "open":
                return path[path.index(other):] + [other]
            if other not in state and (cycle := visit(other)):
                return cycle
        state[module] = "done"
        path.pop()
        return []

    return next((cycle for module in sorted(graph) if module not in state
                 and (cycle := visit(module))), [])


def test_no_module_imports_itself_back():
    graph = {module_name(path): imported_modules(path)
             for package in LAYERS for path in sorted((ROOT / package).rglob("*.py"))}
    assert import_cycle({m: {n for n in names if n in graph and n != m}
                         for m, names in graph.items()}) == []


def test_the_check_sees_imports_inside_functions(tmp_path):
    source = tmp_path / "x.py"
    source.write_text("def f():\n    from reproduce.cli import main\n    import baselines.mmr\n")
    assert imported_packages(source) == {"reproduce", "baselines"}


def test_the_check_resolves_relative_imports_and_finds_a_cycle(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from .b import thing\n")
    (package / "b.py").write_text("def g():\n    from . import a\n")
    graph = {module_name(p, tmp_path): imported_modules(p, tmp_path)
             for p in package.glob("*.py")}
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.b"] == {"pkg.a"}
    assert import_cycle(graph) in (["pkg.a", "pkg.b", "pkg.a"], ["pkg.b", "pkg.a", "pkg.b"])


MOST_PARAMETERS = 8  # a function past it takes a config or a settings object instead


def long_signatures(paths) -> list[str]:
    """`file:line name (count)` of each function taking more than MOST_PARAMETERS parameters,
    self and cls not counted."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args
                names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
                count = len(names) - (names[:1] in (["self"], ["cls"]))
                if count > MOST_PARAMETERS:
                    found.append(f"{path.name}:{node.lineno} {node.name} ({count})")
    return found


def test_no_function_takes_more_than_eight_parameters(tmp_path):
    assert long_signatures(p for layer in LAYERS for p in (ROOT / layer).rglob("*.py")) == []
    nine = tmp_path / "nine.py"
    nine.write_text("class A:\n    def f(self, a, b, c, d, e, f, g, h):\n        pass\n"
                    "def g(a, b, c, d, e, f, g, h, *, i):\n    pass\n")
    assert [line.split(" ", 1)[1] for line in long_signatures([nine])] == ["g (9)"]

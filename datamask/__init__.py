"""datamask: a harness for DATAMASK (Fan, Xian, Sun, Shen; arXiv 2512.24265, ICLR 2026) and the
baselines it is compared with. From Python: `datamask.select(ids, quality, embeddings, ...)` and
`datamask.select_table(table, ...)` (docs/library.md); the objectives live in
`datamask.objectives`, the learner in `datamask.learner`, and every selector behind
`datamask.selectors.make_selector(name)`.

The names below are imported on first use, so that `import datamask.data` (a pipeline stage that
never trains) does not import torch."""

import importlib

__version__ = "0.1.0"

# public name -> the module of this package that defines it
_EXPORTS = {"select": "api", "select_table": "api", "Selection": "selectors",
            "selector_names": "selectors", "UserError": "errors"}
__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'datamask' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})

"""Import every module of the named installed packages, as an extra's user would: each must
import, or refuse with the pip line of another extra it needs (a `UserError`), never fail on a
bare ImportError. Prints the refused modules, one per line, sorted.

    python import_all.py PACKAGE[,PACKAGE...]
"""

import importlib
import pkgutil
import sys

import datamask

refused, imported = [], 0
for package in sys.argv[1].split(","):
    for info in pkgutil.walk_packages(importlib.import_module(package).__path__, package + "."):
        if info.name.rpartition(".")[2] == "__main__":
            continue  # a command, not a module: it runs
        try:
            importlib.import_module(info.name)
            imported += 1
        except datamask.UserError as err:
            if 'pip install "datamask[' not in str(err):
                raise
            refused.append(f"{info.name}: {err}")
for line in sorted(refused):
    print(line)
print(f"import_all: {imported} modules of {sys.argv[1]} imported, {len(refused)} refused",
      file=sys.stderr)

import sys

import datamask.processes  # noqa: F401 (first: a stage started by the downstream run dies with it)

from .cli import main

sys.exit(main())

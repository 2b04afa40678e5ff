"""`python -m datamask.train_mask`: the original script's entry point, same flags as
`datamask select`, for users coming from the paper's code. It keeps the original's linear decay
from --max_lr to --min_lr unless --lr_schedule says otherwise (`datamask select` defaults to a
constant rate), DiSF's exact collapse score unless --probes says otherwise (`datamask select`
estimates it with 64 probes), the original's fixed --n_epochs steps unless --stop_every says
otherwise (`datamask select` stops once the selection it would write stops improving), and equal
initial logits unless --init says otherwise (`datamask select` starts Facility and Pair_simi
from a greedy)."""

import sys

from .cli import build_parser
from .errors import run_command

# the original's loop where `datamask select` differs; its --help shows these defaults
ORIGINAL_DEFAULTS = {"lr_schedule": "linear", "probes": 0, "stop_every": 0, "init": "same"}

if __name__ == "__main__":
    sys.exit(run_command(build_parser(ORIGINAL_DEFAULTS), ["select", *sys.argv[1:]],
                         "python -m datamask.train_mask"))

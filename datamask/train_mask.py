"""`python -m datamask.train_mask`: the original script's entry point, same flags as
`datamask select`, for users coming from the paper's code. It keeps the original's linear decay
from --max_lr to --min_lr unless --lr_schedule says otherwise (`datamask select` defaults to a
constant rate)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main(["select", "--lr_schedule", "linear", *sys.argv[1:]]))

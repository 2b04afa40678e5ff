"""`python -m datamask.train_mask`: the original script's entry point, same flags as
`datamask select`, for users coming from the paper's code."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main(["select", *sys.argv[1:]]))

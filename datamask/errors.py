"""The one error type a user can cause: bad input data, a bad flag, a path that clashes.

Every console script turns it into one line on stderr and exit status 2 (`run_command`, here
beside it so that a command imports no more than it runs: no torch for a stage that never trains);
anything else that escapes is a bug in this project and keeps its traceback.
"""

from __future__ import annotations

import argparse
import sys


class UserError(ValueError):
    """A mistake in what the user gave us; the message names the file, column, row or flag."""


def quoted(err: BaseException) -> str:
    """A library's error message made fit to quote inside a one-line UserError: whitespace runs
    (newlines included) become one space, unprintable bytes are dropped."""
    text = "".join(c for c in str(err) if c.isprintable() or c.isspace())
    return " ".join(text.split()) or type(err).__name__


def run_command(parser: argparse.ArgumentParser, argv: list[str] | None, prog: str) -> int:
    """Parse and run a subcommand; bad input (UserError) is one line on stderr and exit 2, after
    the command's name (`prog`, or the `error_prefix` a subcommand sets for its own)."""
    args = parser.parse_args(argv)
    prog = getattr(args, "error_prefix", prog)
    try:
        args.func(args)
    except UserError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # one line: what is kept and how to go on (the command says)
        note = getattr(args, "on_interrupt", None)
        print(f"{prog}: interrupted" + (f"; {note()}" if note else ""), file=sys.stderr)
        return 130
    return 0

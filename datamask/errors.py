"""The one error type a user can cause: bad input data, a bad flag, a path that clashes.

Every console script turns it into one line on stderr and exit status 2; anything else that
escapes is a bug in this project and keeps its traceback.
"""


class UserError(ValueError):
    """A mistake in what the user gave us; the message names the file, column, row or flag."""


def quoted(err: BaseException) -> str:
    """A library's error message made fit to quote inside a one-line UserError: whitespace runs
    (newlines included) become one space, unprintable bytes are dropped."""
    text = "".join(c for c in str(err) if c.isprintable() or c.isspace())
    return " ".join(text.split()) or type(err).__name__

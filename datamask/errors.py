"""The one error type a user can cause: bad input data, a bad flag, a path that clashes.

Every console script turns it into one line on stderr and exit status 2; anything else that
escapes is a bug in this project and keeps its traceback.
"""


class UserError(ValueError):
    """A mistake in what the user gave us; the message names the file, column, row or flag."""

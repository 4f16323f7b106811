"""The one exception type users see.

Anything wrong with the *input* (model file, chip parameters, plan file) is
raised as :class:`LgoptError`; the CLI turns it into a single line on stderr
and exit status 2.  Any other exception is a bug in lgopt.
"""


class LgoptError(Exception):
    """Bad input: the message names the cause in one line."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))

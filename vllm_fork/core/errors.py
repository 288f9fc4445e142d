"""The one error type the tasks catch and print: a message a user can act on."""


class ForkError(Exception):
    """A failure with a message that says what went wrong and what to do next."""

"""Errors of the env adapters, whichever env service they talk to."""


class EnvUnavailable(RuntimeError):
    """An env service could not be reached (even after reconnecting, where the adapter reconnects)."""

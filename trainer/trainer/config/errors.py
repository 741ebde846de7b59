"""The one error a configuration problem raises."""


class ConfigError(ValueError):
    """The configuration is invalid; the message says which key, why, and where it came from."""

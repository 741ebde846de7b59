"""Client of the stack's OpenCode environment service (imports nothing from the server)."""

from .client import OpenCodeEnvClient, OpenCodeEnvError, ServiceBusyError
from .harness import OpenCodeSession, OpenCodeSessionFactory, RolloutNotScorable

__all__ = ["OpenCodeEnvClient", "OpenCodeEnvError", "ServiceBusyError", "OpenCodeSession", "OpenCodeSessionFactory",
           "RolloutNotScorable"]

"""Publish: after an optimizer step, the new weights to the inference server (checkpoint reload),
to the versions kept for scoring rows, and to TRL's loop as the version its new groups start from."""

from typing import Any

from .checkpoint_sync import CheckpointWeightSync
from .versions import PolicyVersions


class Publisher:
    """Makes each step's weights current everywhere they are read."""

    def __init__(self, sync: CheckpointWeightSync, versions: PolicyVersions) -> None:
        from multiprocessing import get_context

        self.sync = sync
        self.versions = versions
        self.policy_version = get_context("spawn").Value("i", 0)  # TRL's own tag of the groups it starts

    def publish(self, model: Any, step: int) -> str:
        """Publish ``model`` as the weights after ``step`` optimizer steps (0: the starting weights)."""
        version = self.sync.publish(model, step)
        self.versions.add(version, step, model)
        with self.policy_version.get_lock():
            self.policy_version.value = step
        return version

"""A ``rollout_reward_fn`` for the async-grpo job (``opencode.rollout_reward_fn:
trainer.examples.rewards:binary_with_penalties``): the worked example of
services/opencode_env/README.md.

TRL calls it once per rollout with its ``HarnessRolloutOutcome`` (``env_reward``: the env's score,
here the fraction of held-out tests passed; ``timed_out``; ``tool_failure_count``: tool results that
read as errors; ...) and trains on what it returns; ``None`` leaves the rollout unscored.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trl.experimental.async_grpo.openenv_harness import HarnessRolloutOutcome

TIMEOUT_PENALTY = 0.5
TOOL_FAILURE_PENALTY = 0.1  # per failed tool call
MAX_TOOL_FAILURE_PENALTY = 0.3


def binary_with_penalties(outcome: "HarnessRolloutOutcome") -> float | None:
    """1.0 when every held-out test passed, else 0.0; minus ``TIMEOUT_PENALTY`` when the agent ran
    out of time, minus ``TOOL_FAILURE_PENALTY`` per failed tool call (``MAX_TOOL_FAILURE_PENALTY`` at
    most). An unscored rollout (``env_reward`` None) stays unscored."""
    if outcome.env_reward is None:
        return None
    reward = 1.0 if outcome.env_reward >= 1.0 else 0.0
    if outcome.timed_out:
        reward -= TIMEOUT_PENALTY
    return reward - min(TOOL_FAILURE_PENALTY * outcome.tool_failure_count, MAX_TOOL_FAILURE_PENALTY)

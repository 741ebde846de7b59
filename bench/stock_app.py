"""Our environment served by OpenEnv's stock ``create_app`` with default settings (the baseline).

Only ``max_concurrent_envs`` is raised (the stock default of 1 refuses a second session); all else,
including the per-session thread executor, is the framework's.
"""

from openenv.core.env_server.http_server import create_app
from reasoning_gym_env import ReasoningGymAction, ReasoningGymObservation
from reasoning_gym_env_server.environment import ReasoningGymEnvironment

app = create_app(
    ReasoningGymEnvironment,
    ReasoningGymAction,
    ReasoningGymObservation,
    env_name="reasoning_gym",
    max_concurrent_envs=64,
)

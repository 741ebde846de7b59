import sys

from reasoning_gym_env import ReasoningGymAction, ReasoningGymEnv

with ReasoningGymEnv(base_url=sys.argv[1]).sync() as env:
    question = env.reset(dataset_name="chain_sum", seed=1, size=10).observation.question
    print(question is not None, env.step(ReasoningGymAction(answer="0")).observation.correct_answer is not None)

"""``python -m trainer grpo``: TRL GRPOTrainer with ``environment_factory`` on the reasoning-gym env service."""

import functools
import json
import logging
from pathlib import Path
from typing import Any, Optional

from .config import ConfigError, section
from .evaluate import (answer_tool, before_and_after, eval_settings, generator_for, held_out_evaluation,
                       held_out_set, reasoning_gym_settings, write_report)
from .generation import LocalGenerator
from .job import finish, prepare_output, trl_fields
from .reasoning_gym_tools import PROMPT, ReasoningGymToolEnv
from .step_log import StepReporter

log = logging.getLogger("trainer.grpo")


class ServerScoreReward:
    """Reward = the score the env server returned for the rollout's answer (None: env failure, ignored).

    Also appends what was asked, answered and scored to ``rollouts.jsonl``, so every reward TRL used
    can be checked against the dataset.
    """

    __name__ = "reasoning_gym_score"

    def __init__(self, rollouts_path: Path) -> None:
        self.rollouts_path = rollouts_path
        rollouts_path.parent.mkdir(parents=True, exist_ok=True)
        rollouts_path.write_text("")

    def __call__(self, completions: list[Any], environments: list[ReasoningGymToolEnv],
                 trainer_state: Any = None, **kwargs: Any) -> list[Optional[float]]:
        rewards = [env._reward() for env in environments]
        step = trainer_state.global_step if trainer_state is not None else None
        with self.rollouts_path.open("a") as f:
            for env, reward in zip(environments, rewards):
                f.write(json.dumps({"step": step, "reward": reward, **vars(env.record)}) + "\n")
        return rewards


def grpo_arguments(config: dict[str, Any], output_dir: Path) -> dict[str, Any]:
    """GRPOConfig fields: the job's common ones, the seed, and the vLLM server when generating there."""
    fields = trl_fields(config, "grpo", output_dir, "grpo")
    fields.setdefault("seed", config.get("seed", 42))
    if fields.get("use_vllm") and fields.get("vllm_mode") == "server":
        fields.setdefault("vllm_server_base_url", section(config, "inference").get("url"))
    return fields


def run(config: dict[str, Any]) -> dict[str, Any]:
    """Train, save the final model, plot the rewards; returns the summary (also written as summary.json)."""
    output_dir = prepare_output(config, "outputs/grpo")

    from datasets import Dataset
    from transformers import AutoTokenizer, PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    rg = section(config, "reasoning_gym")
    settings = reasoning_gym_settings(config)
    eval_settings(config)  # a bad eval section fails before training starts
    prompt = rg.get("prompt", PROMPT)
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": prompt}]}] * int(rg.get("num_prompts", 256)))
    args = GRPOConfig(**grpo_arguments(config, output_dir))
    model = config["model"]
    tokenizer = AutoTokenizer.from_pretrained(model)

    reward = ServerScoreReward(output_dir / "rollouts.jsonl")
    callbacks: list[Any] = []
    sync = weight_sync_callback(config, tokenizer)
    if sync is not None:
        callbacks.append(sync)
    reporter = StepReporter(output_dir / "metrics.jsonl", weight_version=(lambda: sync.version) if sync else None)
    callbacks.append(reporter)

    log.info("GRPO: model %s, env %s (dataset %s, seed %d), %d steps, output %s", model, settings.env_url,
             settings.dataset, settings.seed, args.max_steps, output_dir)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=[reward], args=args,
                          train_dataset=dataset, callbacks=callbacks,
                          environment_factory=functools.partial(ReasoningGymToolEnv, settings))
    trainer.remove_callback(PrinterCallback)  # it prints each raw log dict; StepReporter prints one line
    evaluate = held_out_evaluator(config, trainer.model, tokenizer, prompt)
    before = evaluate("before") if evaluate else None
    trainer.train()
    held_out = None
    if evaluate:
        after = evaluate("after")
        write_report(output_dir / "eval.json", [before, after])
        held_out = before_and_after(config, before, after)
    return finish(trainer, reporter.records, output_dir, f"GRPO on reasoning-gym {settings.dataset}",
                  {"rollouts": output_dir / "rollouts.jsonl", "held-out evaluation": output_dir / "eval.json"
                   if evaluate else None}, held_out)


def held_out_evaluator(config: dict[str, Any], model: Any, tokenizer: Any, prompt: str) -> Optional[Any]:
    """``label -> report`` evaluating the model being trained on the held-out questions (None when
    ``eval.before_after`` is off): in this process, or with ``eval.generate: inference`` on the
    inference service, whose weights follow the trained model (vLLM server mode)."""
    ev = eval_settings(config)
    if not ev["before_after"]:
        return None
    if ev["generate"] == "inference":
        generate = generator_for(config, None, "inference")
    else:
        template = dict(section(config, "grpo").get("chat_template_kwargs") or {})
        generate = LocalGenerator(model, tokenizer, prompt, [answer_tool(reasoning_gym_settings(config))],
                                  ev["max_new_tokens"], template)
    questions = held_out_set(config)  # once: before and after answer the same questions
    return lambda label: held_out_evaluation(config, generate, label, questions)


def weight_sync_callback(config: dict[str, Any], tokenizer: Any) -> Optional[Any]:
    """The checkpoint-reload callback when ``weight_sync.mode`` is ``checkpoint``; None for ``none``/``nccl``."""
    ws = section(config, "weight_sync")
    mode = ws.get("mode", "none")
    if mode not in ("none", "checkpoint", "nccl"):
        raise ConfigError(f"weight_sync.mode must be none, checkpoint or nccl, got {mode!r}")
    if mode != "checkpoint":
        return None
    from .weight_sync import PROBE_TEXT, CheckpointWeightSync

    inference = section(config, "inference")
    weights_dir = Path(ws.get("weights_dir", "/weights"))
    probe = tokenizer(PROBE_TEXT)["input_ids"] if ws.get("verify", True) else None
    return CheckpointWeightSync(inference["url"], weights_dir, str(ws.get("server_weights_dir", weights_dir)), probe,
                                served_model=inference.get("model"))

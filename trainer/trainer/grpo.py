"""``python -m trainer grpo``: TRL GRPOTrainer with ``environment_factory`` on the reasoning-gym env service."""

import functools
import json
import logging
import os
from pathlib import Path
from typing import Any, Optional

from .config import ConfigError, section
from .reasoning_gym_tools import PROMPT, ReasoningGymSettings, ReasoningGymToolEnv
from .reporting import plot_rewards, summarize
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
    """GRPOConfig fields: the ``grpo`` section plus what the job decides (output dir, logging, vLLM wiring)."""
    fields = section(config, "grpo")
    fields.setdefault("logging_steps", 1)
    fields.setdefault("run_name", config.get("run_name", "grpo"))
    fields.setdefault("seed", config.get("seed", 42))
    fields["output_dir"] = str(output_dir / "checkpoints")
    fields.setdefault("disable_tqdm", True)  # StepReporter draws the bar and prints one line per step
    report_to = fields.get("report_to", ["trackio"])
    fields["report_to"] = [report_to] if isinstance(report_to, str) else list(report_to)
    if "trackio" in fields["report_to"]:
        fields.setdefault("project", config.get("trackio_project", "rlstack"))
    if fields.get("use_vllm") and fields.get("vllm_mode") == "server":
        fields.setdefault("vllm_server_base_url", section(config, "inference").get("url"))
    return fields


def run(config: dict[str, Any]) -> dict[str, Any]:
    """Train, save the final model, plot the rewards; returns the summary (also written as summary.json)."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    output_dir = Path(config.get("output_dir", "outputs/grpo"))
    output_dir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TRACKIO_DIR", str(output_dir.parent / "trackio"))

    from datasets import Dataset
    from transformers import AutoTokenizer, PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    rg = section(config, "reasoning_gym")
    if "env_url" not in rg:
        raise ConfigError("reasoning_gym.env_url is required")
    settings = ReasoningGymSettings(env_url=rg["env_url"], dataset=rg.get("dataset", "chain_sum"),
                                    dataset_config=dict(rg.get("dataset_config") or {}),
                                    seed=int(rg.get("seed", config.get("seed", 42))),
                                    dataset_size=int(rg.get("dataset_size", 1000)))
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
    trainer.train()
    final_dir = output_dir / "final"
    trainer.save_model(str(final_dir))
    tokenizer.save_pretrained(str(final_dir))
    plot = plot_rewards(reporter.records, output_dir / "reward.png", f"GRPO on reasoning-gym {settings.dataset}")
    outputs = {"metrics": output_dir / "metrics.jsonl", "rollouts": output_dir / "rollouts.jsonl",
               "final model": final_dir, "checkpoints": output_dir / "checkpoints", "reward plot": plot,
               "trackio": Path(os.environ["TRACKIO_DIR"])}
    text = summarize(reporter.records, outputs)
    print(text, flush=True)
    summary = {"steps": len(reporter.records), "rewards": [r.get("reward") for r in reporter.records],
               "step_time_s": [r.get("step_time_s") for r in reporter.records],
               "outputs": {k: str(v) for k, v in outputs.items() if v is not None}, "text": text}
    (output_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


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

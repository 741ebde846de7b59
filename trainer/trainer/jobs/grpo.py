"""``python -m trainer grpo``: TRL GRPOTrainer with ``environment_factory`` on the reasoning-gym env service."""

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..config import ConfigError, TrainerConfig
from ..config.question_plan import environment_instances
from ..cpu.checkpoint_sync import checkpoint_sync
from ..envs.reasoning_gym import ReasoningGymToolEnv, environment_factory
from ..evaluation.reasoning_gym import generator_for, held_out_evaluation, held_out_set, local_generator
from ..evaluation.report import before_and_after, log_held_out, write_report
from ..gpu.device_check import check_training_device
from ..gpu.nccl_probe import server_weights_probe
from ..gpu.smoke_report import NCCL_GROUP_FILE
from ..training.hub import check_hub
from ..training.outputs import finish, output_dir_of, prepare_output
from ..training.starting_weights import serve_starting_weights
from ..training.step_log import StepReporter
from ..training.trl_args import as_on_cuda_host, first_step_learning_rate, trl_fields

log = logging.getLogger(__name__)


class ServerScoreReward:
    """Reward = the score the env server returned for the rollout's answer (None: env failure, ignored).

    Also appends what was asked, answered and scored to ``rollouts.jsonl``, so every reward TRL used
    can be checked against the dataset, and logs the distinct questions of the generation batch
    (``questions``: ``num_prompts`` groups answer that many with ``question_seeds: per_group``).
    """

    __name__ = "reasoning_gym_score"

    def __init__(self, rollouts_path: Path) -> None:
        self.rollouts_path = rollouts_path
        rollouts_path.parent.mkdir(parents=True, exist_ok=True)
        rollouts_path.write_text("")

    def __call__(
        self,
        completions: list[Any],
        environments: list[ReasoningGymToolEnv],
        trainer_state: Any = None,
        log_metric: Callable[[str, float], None] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        rewards = [env._reward() for env in environments]
        step = trainer_state.global_step if trainer_state is not None else None
        if log_metric is not None:
            log_metric(DISTINCT_QUESTIONS, float(distinct_questions([vars(env.record) for env in environments])))
        with self.rollouts_path.open("a") as f:
            for env, reward in zip(environments, rewards):
                f.write(json.dumps({"step": step, "reward": reward, **vars(env.record)}) + "\n")
        return rewards


# The metric key of the distinct questions a generation batch answered.
DISTINCT_QUESTIONS = "questions"


def distinct_questions(records: list[dict[str, Any]]) -> int:
    """How many different questions these rollout records (``rollouts.jsonl`` rows) answered."""
    return len({r["question"] for r in records if r.get("question")})


def grpo_arguments(config: TrainerConfig, output_dir: Path) -> dict[str, Any]:
    """GRPOConfig fields: the job's common ones, the seed, the vLLM server when generating there, and
    the Hub repository named after the job's output folder (transformers would name it after the
    checkpoints folder TRL writes into)."""
    fields = trl_fields(config, output_dir)
    fields.setdefault("seed", config.seed)
    if fields.get("use_vllm") and fields.get("vllm_mode") == "server":
        fields.setdefault("vllm_server_base_url", config.inference.url)
    if fields.get("push_to_hub"):
        fields.setdefault("hub_model_id", output_dir.name)
    return fields


def grpo_config(config: TrainerConfig, output_dir: Path) -> Any:
    """TRL's ``GRPOConfig`` for the job (a ``ConfigError`` naming the section when TRL rejects it)."""
    from trl import GRPOConfig

    try:
        return GRPOConfig(**grpo_arguments(config, output_dir))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"grpo: {exc}") from None


def weight_sync_mode(config: TrainerConfig) -> str:
    """``weight_sync.mode``, checked against where generation runs.

    ``nccl`` is TRL's vLLM server mode, which always sends the weights over NCCL (it has no other
    transport); ``checkpoint`` publishes them to the inference service for a job that generates in
    the trainer; ``none`` leaves the inference service alone (generation in the trainer, or vLLM
    colocated in it)."""
    mode = config.weight_sync.mode or "none"
    grpo = config.training_fields()
    server = bool(grpo.get("use_vllm")) and grpo.get("vllm_mode", "colocate") == "server"
    if server and mode != "nccl":
        raise ConfigError(
            f"weight_sync.mode is {mode!r}, but with grpo.vllm_mode: server TRL always syncs the "
            "weights to vLLM over NCCL; set weight_sync.mode: nccl (a checkpoint reload needs "
            "generation in the trainer: grpo.use_vllm: false)"
        )
    if mode == "nccl" and not server:
        raise ConfigError(
            "weight_sync.mode: nccl is TRL's vLLM server mode: set grpo.use_vllm: true and grpo.vllm_mode: server"
        )
    if mode == "none" and config.eval.before_after and config.eval.generate == "inference":
        raise ConfigError(
            "eval.generate: inference evaluates the inference service's weights, which weight_sync.mode: none "
            "never updates: the before/after figures would score the same model; set eval.generate: local"
        )
    return mode


def check_question_assignment(config: TrainerConfig) -> None:
    """Refuse question assignments the generation mode would mis-score: TRL's vLLM server mode
    generates one prompt per group (``prompts[::num_generations]``), so every completion of a group
    is an answer to its first instance's question; with ``per_environment`` the others hold another."""
    grpo = config.training_fields()
    server = bool(grpo.get("use_vllm")) and grpo.get("vllm_mode", "colocate") == "server"
    if server and config.reasoning_gym.question_seeds == "per_environment":
        raise ConfigError(
            "reasoning_gym.question_seeds: per_environment with grpo.vllm_mode: server would mis-score: vLLM "
            "generates the group's completions for its first question only; use question_seeds: per_group"
        )


def plan(config: TrainerConfig) -> dict[str, Any]:
    """``--dry-run``: what TRL would be given, from the validated ``GRPOConfig``, without a model, a
    GPU or the services."""
    settings = config.reasoning_gym
    check_question_assignment(config)
    args = as_on_cuda_host(grpo_config, config, output_dir_of(config))
    dtype = (args.model_init_kwargs or {}).get("dtype", "float32")
    return {
        "job": "grpo",
        "output_dir": str(output_dir_of(config)),
        "weight_sync": weight_sync_mode(config),
        "eval": config.eval.model_dump(),
        "env": {
            "url": settings.env_url,
            "dataset": settings.dataset,
            "dataset_config": settings.dataset_config,
            "seed": settings.seed,
            "question_seeds": settings.question_seeds,
        },
        "trainer": {
            "dtype": str(dtype),
            "bf16": args.bf16,
            "gradient_checkpointing": args.gradient_checkpointing,
            "per_device_train_batch_size": args.per_device_train_batch_size,
            "gradient_accumulation_steps": args.gradient_accumulation_steps,
            "learning_rate": args.learning_rate,
            "first_step_learning_rate": first_step_learning_rate(args),
            "warmup_steps": args.warmup_steps,
            "max_steps": args.max_steps,
            "optim": getattr(args.optim, "value", args.optim),
            "max_grad_norm": args.max_grad_norm,
            "logging_steps": args.logging_steps,
            "save_strategy": getattr(args.save_strategy, "value", args.save_strategy),
            "save_total_limit": args.save_total_limit,
            "save_only_model": args.save_only_model,
            "push_to_hub": args.push_to_hub,
            "hub_model_id": args.hub_model_id,
        },
        "generation": {
            "use_vllm": args.use_vllm,
            "vllm_mode": args.vllm_mode if args.use_vllm else None,
            "num_generations": args.num_generations,
            "temperature": args.temperature,
            "top_p": args.top_p,
            "top_k": args.top_k,
            "min_p": args.min_p,
            "repetition_penalty": args.repetition_penalty,
            "max_completion_length": args.max_completion_length,
            "max_tool_calling_iterations": args.max_tool_calling_iterations,
            "chat_template_kwargs": args.chat_template_kwargs,
        },
        "colocated_vllm": {
            "gpu_memory_utilization": args.vllm_gpu_memory_utilization,
            "enable_sleep_mode": args.vllm_enable_sleep_mode,
            "max_model_length": args.vllm_max_model_length,
        }
        if args.use_vllm and args.vllm_mode == "colocate"
        else None,
    }


def run(config: TrainerConfig) -> dict[str, Any]:
    """Train, save the final model, plot the rewards; returns the summary (also written as summary.json)."""
    output_dir = prepare_output(config)

    from datasets import Dataset
    from transformers import AutoTokenizer, PrinterCallback
    from trl import GRPOTrainer

    settings = config.reasoning_gym
    mode = weight_sync_mode(config)
    check_question_assignment(config)
    prompt = settings.prompt
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": prompt}]}] * settings.num_prompts)
    args = grpo_config(config, output_dir)
    if args.push_to_hub:
        check_hub("grpo", args.hub_model_id)
    instances = args.per_device_train_batch_size * args.steps_per_generation
    if settings.question_seeds != "shared" and environment_instances(config.training_fields()) != instances:
        # The held-out set excludes the questions of one sequence per env instance TRL makes.
        raise RuntimeError(
            f"TRL makes {instances} env instances, not the {environment_instances(config.training_fields())} "
            "the held-out exclusion assumed: trainer.config.question_plan.environment_instances needs updating"
        )
    if args.use_vllm:
        problems = check_training_device(async_grpo=False)
        if problems:
            raise ConfigError("grpo.use_vllm needs a usable GPU: " + "; ".join(problems))
    model = config.require_model()
    tokenizer = AutoTokenizer.from_pretrained(model)

    reward = ServerScoreReward(output_dir / "rollouts.jsonl")
    callbacks: list[Any] = []
    sync = checkpoint_sync(config, tokenizer) if mode == "checkpoint" else None
    probe = server_weights_probe(config, tokenizer) if mode == "nccl" else None
    callbacks += [c for c in (sync, probe) if c is not None]
    reporter = StepReporter(output_dir / "metrics.jsonl", weight_version=(lambda: sync.version) if sync else None)
    callbacks.append(reporter)

    log.info(
        "GRPO: model %s, env %s (dataset %s, seed %d), %d steps, output %s",
        model,
        settings.env_url,
        settings.dataset,
        settings.seed,
        args.max_steps,
        output_dir,
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[reward],
        args=args,
        train_dataset=dataset,
        callbacks=callbacks,
        environment_factory=environment_factory(settings, config.training_fields()),
    )
    trainer.remove_callback(PrinterCallback)  # it prints each raw log dict; StepReporter prints one line
    if mode == "nccl":
        # TRL's constructor has joined the NCCL group with the vLLM server by now (or raised).
        group = {"server": args.vllm_server_base_url, "group_port": args.vllm_group_port, "time": time.time()}
        (output_dir / NCCL_GROUP_FILE).write_text(json.dumps(group))
        print(
            f"weight sync: NCCL group with the vLLM server at {args.vllm_server_base_url} formed "
            f"(group port {args.vllm_group_port})",
            flush=True,
        )
    if probe is not None:
        probe.trainer = trainer
    evaluate = held_out_evaluator(config, trainer.model, tokenizer)
    if evaluate and config.eval.generate == "inference":
        serve_starting_weights(mode, trainer, sync)
    before = evaluate("before") if evaluate else None
    trainer.train()
    held_out = None
    if evaluate:
        after = evaluate("after")
        write_report(output_dir / "eval.json", [before, after])
        held_out = before_and_after(before, after)
        if "trackio" in args.report_to:
            log_held_out(config.trackio_project, args.run_name, [(0, before), (trainer.state.global_step, after)])
    if args.push_to_hub:  # once, as the walkthrough does (section 8), to <user>/<hub_model_id>
        trainer.push_to_hub(commit_message=f"GRPO fine-tune on reasoning_gym {settings.dataset}")
    return finish(
        # _internal_call: transformers' save_model would push a second time
        lambda path: trainer.save_model(path, _internal_call=True),
        trainer.state.global_step,
        reporter.records,
        output_dir,
        f"GRPO on reasoning-gym {settings.dataset}",
        {
            "rollouts": output_dir / "rollouts.jsonl",
            "held-out evaluation": output_dir / "eval.json" if evaluate else None,
        },
        held_out,
        {"weights_probe": probe.result if probe is not None else None},
    )


def held_out_evaluator(config: TrainerConfig, model: Any, tokenizer: Any) -> Any | None:
    """``label -> report`` evaluating the model being trained on the held-out questions (None when
    ``eval.before_after`` is off): in this process, or with ``eval.generate: inference`` on the
    inference service, whose weights follow the trained model (vLLM server mode)."""
    ev = config.eval
    if not ev.before_after:
        return None
    if ev.generate == "inference":
        generate = generator_for(config, None, "inference")
    else:
        generate = local_generator(config, model, tokenizer)
    questions = held_out_set(config)  # once: before and after answer the same questions
    return lambda label: held_out_evaluation(config, generate, label, questions)

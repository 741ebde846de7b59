"""Held-out evaluation on reasoning-gym (a GRPO config): ``eval.num_questions`` questions of the
held-out seed ``eval.seed`` (none of them among the training run's or the policy's pre-training
questions), answered by the policy in the training format, scored by the env server; accuracy and
mean score with 95% intervals, sampled at the training temperature (what GRPO optimises) and greedy.
"""

import logging
import time
from typing import Any

from ..config import ConfigError, ReasoningGymConfig, TrainerConfig
from ..config.question_plan import training_sequences
from ..envs.reasoning_gym import ReasoningGymToolEnv
from .generation import LocalGenerator, turn_prefix
from .questions import Generate, Question, held_out_questions, pretraining_digests, score_answers
from .statistics import summary_of

log = logging.getLogger(__name__)


def answer_tool(settings: ReasoningGymConfig) -> Any:
    """The ``answer`` tool exactly as TRL sees it in training (its schema comes from this method)."""
    return ReasoningGymToolEnv(settings).answer


def held_out_set(config: TrainerConfig, pretrained: frozenset[str] | None = None) -> tuple[list[Question], int]:
    """The config's held-out questions and how many candidates were skipped as training questions or
    as questions the config's model was pre-trained on (``pretrained``: their digests; default: those
    its model folder records)."""
    training, ev = config.reasoning_gym, config.eval
    return held_out_questions(
        training,
        ev.seed,
        ev.num_questions,
        ev.pool,
        pretraining_digests(config.model or "") if pretrained is None else pretrained,
        training_sequences(training, config.training_fields()),
    )


def held_out_evaluation(
    config: TrainerConfig, generate: Generate, label: str, held_out: tuple[list[Question], int]
) -> dict[str, Any]:
    """Evaluate ``generate`` on ``held_out`` (from ``held_out_set``): ``{"summary", "records"}`` per sampling mode."""
    training, ev = config.reasoning_gym, config.eval
    began = time.monotonic()
    questions, skipped = held_out
    modes = {f"T={ev.temperature}": ev.temperature}
    if ev.greedy:
        modes["greedy"] = 0.0
    report: dict[str, Any] = {
        "label": label,
        "dataset": training.dataset,
        "dataset_config": training.dataset_config,
        "held_out_seed": ev.seed,
        "training_seed": training.seed,
        "training_questions": training.dataset_size,
        "skipped_as_training_questions": skipped,
        "modes": {},
    }
    for mode, temperature in modes.items():
        answers = generate([q.text for q in questions], temperature)
        records = score_answers(training, ev.seed, ev.pool, questions, answers)
        report["modes"][mode] = {"temperature": temperature, "summary": summary_of(records), "records": records}
    report["seconds"] = time.monotonic() - began
    log.info(
        "held-out evaluation (%s): %s",
        label,
        ", ".join(f"{mode} {100 * m['summary']['accuracy']:.1f}%" for mode, m in report["modes"].items()),
    )
    return report


def local_generator(config: TrainerConfig, model: Any, tokenizer: Any) -> Generate:
    """``model`` answering in this process, in the training format (prompt, tool, chat template settings)."""
    template = dict(config.training_fields().get("chat_template_kwargs") or {})
    training = config.reasoning_gym
    return LocalGenerator(
        model, tokenizer, turn_prefix(training), [answer_tool(training)], config.eval.max_new_tokens, template
    )


def generator_for(config: TrainerConfig, model_path: str | None, mode: str) -> Generate:
    """The generator ``eval.generate`` names, for ``model_path`` (default: the config's model)."""
    training, ev = config.reasoning_gym, config.eval
    prompt = turn_prefix(config.reasoning_gym)
    template = dict(config.training_fields().get("chat_template_kwargs") or {})
    if mode == "inference":
        from transformers.utils import get_json_schema

        from .generation import InferenceGenerator

        inference = config.inference
        return InferenceGenerator(
            inference.url,
            inference.model,
            prompt,
            [get_json_schema(answer_tool(training))],
            ev.max_new_tokens,
            template,
        )
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = model_path or config.require_model()
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path)
    except OSError as exc:
        raise ConfigError(
            f"cannot load model {path!r} (a local folder, a checkpoint, final/, or a Hub id): "
            f"{str(exc).splitlines()[0]}"
        ) from None
    return local_generator(config, model, tokenizer)

"""``python -m trainer eval``: held-out evaluation of a policy through the env services' clients.

reasoning-gym (a GRPO config): ``eval.num_questions`` questions of the held-out seed ``eval.seed``
(none of them among the training run's questions), answered by the policy in the training format,
scored by the env server; accuracy and mean score with 95% intervals, sampled at the training
temperature (what GRPO optimises) and greedy. The training jobs call ``held_out_evaluation``
before and after training.

OpenCode (an AsyncGRPO config): the held-out coding tasks (never in a training job), each one
rollout of the real agent on ``opencode-env`` with the model the inference service serves; pass
rate (all held-out tests pass) and mean reward.

Both write ``eval.json`` (per-question or per-task records and the summary) and print a table.
"""

import dataclasses
import json
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .config import ConfigError, section
from .held_out import Generate, Question, held_out_questions, pretraining_digests, score_answers, summary_of
from .job import use_trackio_store
from .reasoning_gym_tools import EnvUnavailable, ReasoningGymSettings, ReasoningGymToolEnv
from .settings import EvalConfig, required_model, top, typed

log = logging.getLogger("trainer.evaluate")


def reasoning_gym_settings(config: dict[str, Any]) -> ReasoningGymSettings:
    """The training job's reasoning-gym settings (env, dataset, config, seed, size)."""
    rg = typed(config, "reasoning_gym")
    return ReasoningGymSettings(
        env_url=rg.env_url,
        dataset=rg.dataset,
        dataset_config=dict(rg.dataset_config),
        seed=top(config, "seed") if rg.seed is None else rg.seed,
        dataset_size=rg.dataset_size,
    )


def eval_settings(config: dict[str, Any]) -> EvalConfig:
    """The ``eval`` section with its defaults resolved (seed: the training seed + 1000; temperature and
    answer length: the training job's)."""
    ev = typed(config, "eval")
    training = section(config, "async_grpo" if config.get("job") == "async-grpo" else "grpo")
    if ev.num_questions < 1 or ev.pool < ev.num_questions:
        raise ConfigError("eval.num_questions must be >= 1 and eval.pool >= eval.num_questions")
    return dataclasses.replace(
        ev,
        seed=top(config, "seed") + 1000 if ev.seed is None else ev.seed,
        temperature=float(training.get("temperature", 1.0) if ev.temperature is None else ev.temperature),
        max_new_tokens=int(
            training.get("max_completion_length", 64) if ev.max_new_tokens is None else ev.max_new_tokens
        ),
    )


def answer_tool(settings: ReasoningGymSettings) -> Any:
    """The ``answer`` tool exactly as TRL sees it in training (its schema comes from this method)."""
    return ReasoningGymToolEnv(settings).answer


def held_out_set(config: dict[str, Any]) -> tuple[list[Question], int]:
    """The config's held-out questions and how many candidates were skipped as training questions or
    as questions the config's model was pre-trained on."""
    training, ev = reasoning_gym_settings(config), eval_settings(config)
    return held_out_questions(
        training,
        training.dataset_size,
        ev.seed,
        ev.num_questions,
        ev.pool,
        pretraining_digests(str(top(config, "model") or "")),
    )


def held_out_evaluation(
    config: dict[str, Any], generate: Generate, label: str, held_out: tuple[list[Question], int]
) -> dict[str, Any]:
    """Evaluate ``generate`` on ``held_out`` (from ``held_out_set``): ``{"summary", "records"}`` per sampling mode."""
    training, ev = reasoning_gym_settings(config), eval_settings(config)
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


def table(reports: list[dict[str, Any]]) -> str:
    """One row per (report, mode): accuracy and mean score with their 95% intervals."""
    lines = [
        f"{'model':<14}{'mode':<9}{'questions':>10}{'accuracy':>10}{'95% CI':>16}{'mean score':>12}{'answered':>10}"
    ]
    for report in reports:
        for mode, result in report["modes"].items():
            s = result["summary"]
            ci = f"{100 * s['accuracy_ci'][0]:.1f}..{100 * s['accuracy_ci'][1]:.1f}"
            lines.append(
                f"{report['label']:<14}{mode:<9}{s['questions']:>10}{100 * s['accuracy']:>9.1f}%{ci:>16}"
                f"{s['mean_score']:>12.3f}{s['answered']:>10}"
            )
    return "\n".join(lines)


def write_report(path: Path, reports: list[dict[str, Any]]) -> None:
    """``eval.json``, written whole (a failed evaluation leaves none)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps({"evaluations": reports}, indent=1, default=str))
    os.replace(partial, path)


def generator_for(config: dict[str, Any], model_path: str | None, mode: str) -> Generate:
    """The generator ``eval.generate`` names, for ``model_path`` (default: the config's model)."""
    training, ev = reasoning_gym_settings(config), eval_settings(config)
    prompt = typed(config, "reasoning_gym").prompt
    template = dict(section(config, "grpo").get("chat_template_kwargs") or {})
    if mode == "inference":
        from transformers.utils import get_json_schema

        from .generation import InferenceGenerator

        inference = typed(config, "inference")
        return InferenceGenerator(
            inference.url,
            inference.model,
            prompt,
            [get_json_schema(answer_tool(training))],
            ev.max_new_tokens,
            template,
        )
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .generation import LocalGenerator

    path = model_path or required_model(config)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path)
    except OSError as exc:
        raise ConfigError(
            f"cannot load model {path!r} (a local folder, a checkpoint, final/, or a Hub id): "
            f"{str(exc).splitlines()[0]}"
        ) from None
    return LocalGenerator(model, tokenizer, prompt, [answer_tool(training)], ev.max_new_tokens, template)


def opencode_evaluation(config: dict[str, Any], label: str) -> dict[str, Any]:
    """Each held-out coding task once on ``opencode-env``, sampled at the training temperature by the
    model the inference service serves; ``{"modes": {"T=...": {"summary", "records"}}}``."""
    import concurrent.futures

    from opencode_env_client import OpenCodeEnvClient, OpenCodeEnvError

    from .coding_tasks import load_tasks

    oc, inference, ev = typed(config, "opencode"), typed(config, "inference"), eval_settings(config)
    temperature = ev.temperature
    tasks = load_tasks(Path(oc.tasks) if oc.tasks else None, limits=oc.limits, split="held_out")
    began = time.monotonic()
    client = OpenCodeEnvClient(oc.env_url)
    try:
        client.health()
    except OpenCodeEnvError as exc:
        raise EnvUnavailable(f"opencode env at {oc.env_url} unreachable: {exc}") from None

    def one(index: int, task: Any) -> dict[str, Any]:
        created = client.create_rollout(task, sampling={"temperature": temperature}, model=inference.model)
        try:
            summary = client.wait(created.rollout_id, oc.wait_timeout_s)
            verification = client.verify(created.rollout_id)
        finally:
            client.delete(created.rollout_id)
        return {
            "task_id": task.task_id,
            "rollout_id": created.rollout_id,
            "status": summary.status,
            "reward": verification.reward,
            "passed": verification.passed,
            "total": verification.total,
            "correct": verification.reward == 1.0,
            "score": verification.reward or 0.0,
            "index": index,
            "answer": None if verification.reward is None else summary.status,
        }  # answered: scored

    workers = max(1, ev.concurrency)
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        records = list(pool.map(one, range(len(tasks)), tasks))
    scored = [r for r in records if r["reward"] is not None]
    mode = f"T={temperature}"
    report = {
        "label": label,
        "tasks": "held_out",
        "unscored": len(records) - len(scored),
        "modes": {mode: {"temperature": temperature, "summary": summary_of(scored), "records": records}},
        "seconds": time.monotonic() - began,
    }
    return report


def run(config: dict[str, Any], model_path: str | None = None, out: Path | None = None) -> dict[str, Any]:
    """Evaluate one model (default: the config's) and write ``eval.json``; returns the report."""
    label = Path(model_path or required_model(config)).name or "model"
    path = out or Path(top(config, "output_dir") or "outputs/eval") / "eval.json"
    path.unlink(missing_ok=True)  # a failed evaluation must not leave an earlier one looking current
    use_trackio_store(path.parent)
    if config.get("job") == "async-grpo":
        report = opencode_evaluation(config, label)
    else:
        generate = generator_for(config, model_path, eval_settings(config).generate)
        report = held_out_evaluation(config, generate, label, held_out_set(config))
    write_report(path, [report])
    log_held_out(top(config, "trackio_project"), f"eval-{label}", [(0, report)])
    print(table([report]), flush=True)
    print(f"eval.json: {path}", flush=True)
    return report


def log_held_out(project: str, run_name: str, points: Sequence[tuple[int, dict[str, Any]]]) -> None:
    """The held-out accuracy of each ``(step, report)`` as trackio metrics of run ``run_name``
    (``train/held_out_accuracy_<mode>``: beside the training reward on the dashboard)."""
    import trackio

    trackio.init(project=project, name=run_name, resume="allow")
    try:
        for step, report in points:
            trackio.log(
                {
                    f"train/held_out_accuracy_{mode}": result["summary"]["accuracy"]
                    for mode, result in report["modes"].items()
                },
                step=step,
            )
    finally:
        trackio.finish()


def before_and_after(config: dict[str, Any], before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The change from ``before`` to ``after`` per mode: ``{"lines": [...], "modes": {mode: {...}}}``."""
    from .held_out import before_after_line, paired_difference

    result: dict[str, Any] = {"lines": [], "modes": {}}
    for mode in before["modes"]:
        b, a = before["modes"][mode], after["modes"][mode]
        diff = paired_difference(b["records"], a["records"])
        result["modes"][mode] = {"before": b["summary"]["accuracy"], "after": a["summary"]["accuracy"], **diff}
        result["lines"].append(
            before_after_line(mode, b["summary"]["questions"], b["summary"]["accuracy"], a["summary"]["accuracy"], diff)
        )
    return result

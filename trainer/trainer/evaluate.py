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

import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Optional

from .config import ConfigError, section
from .held_out import Generate, Question, held_out_questions, pretraining_digests, score_answers, summary_of
from .reasoning_gym_tools import PROMPT, EnvUnavailable, ReasoningGymSettings, ReasoningGymToolEnv

log = logging.getLogger("trainer.evaluate")


def reasoning_gym_settings(config: dict[str, Any]) -> ReasoningGymSettings:
    """The training job's reasoning-gym settings (env, dataset, config, seed, size)."""
    rg = section(config, "reasoning_gym")
    if "env_url" not in rg:
        raise ConfigError("reasoning_gym.env_url is required")
    return ReasoningGymSettings(env_url=rg["env_url"], dataset=rg.get("dataset", "chain_sum"),
                                dataset_config=dict(rg.get("dataset_config") or {}),
                                seed=int(rg.get("seed", config.get("seed", 42))),
                                dataset_size=int(rg.get("dataset_size", 1000)))


def eval_settings(config: dict[str, Any]) -> dict[str, Any]:
    """The ``eval`` section with its defaults (temperature: the training one)."""
    ev = section(config, "eval")
    grpo = section(config, "grpo")
    settings = {"seed": int(ev.get("seed", int(config.get("seed", 42)) + 1000)),
                "num_questions": int(ev.get("num_questions", 200)), "pool": int(ev.get("pool", 2000)),
                "temperature": float(ev.get("temperature", grpo.get("temperature", 1.0))),
                "greedy": bool(ev.get("greedy", True)), "generate": ev.get("generate", "local"),
                "max_new_tokens": int(ev.get("max_new_tokens", grpo.get("max_completion_length", 64))),
                "before_after": bool(ev.get("before_after", True))}
    if settings["generate"] not in ("local", "inference"):
        raise ConfigError(f"eval.generate must be local or inference, got {settings['generate']!r}")
    if settings["num_questions"] < 1 or settings["pool"] < settings["num_questions"]:
        raise ConfigError("eval.num_questions must be >= 1 and eval.pool >= eval.num_questions")
    return settings


def answer_tool(settings: ReasoningGymSettings) -> Any:
    """The ``answer`` tool exactly as TRL sees it in training (its schema comes from this method)."""
    return ReasoningGymToolEnv(settings).answer


def held_out_set(config: dict[str, Any]) -> tuple[list[Question], int]:
    """The config's held-out questions and how many candidates were skipped as training questions or
    as questions the config's model was pre-trained on."""
    training, ev = reasoning_gym_settings(config), eval_settings(config)
    return held_out_questions(training, training.dataset_size, ev["seed"], ev["num_questions"], ev["pool"],
                              pretraining_digests(str(config.get("model", ""))))


def held_out_evaluation(config: dict[str, Any], generate: Generate, label: str,
                        held_out: tuple[list[Question], int]) -> dict[str, Any]:
    """Evaluate ``generate`` on ``held_out`` (from ``held_out_set``): ``{"summary", "records"}`` per sampling mode."""
    training, ev = reasoning_gym_settings(config), eval_settings(config)
    began = time.monotonic()
    questions, skipped = held_out
    modes = {f"T={ev['temperature']}": ev["temperature"]}
    if ev["greedy"]:
        modes["greedy"] = 0.0
    report: dict[str, Any] = {"label": label, "dataset": training.dataset, "dataset_config": training.dataset_config,
                              "held_out_seed": ev["seed"], "training_seed": training.seed,
                              "training_questions": training.dataset_size, "skipped_as_training_questions": skipped,
                              "modes": {}}
    for mode, temperature in modes.items():
        answers = generate([q.text for q in questions], temperature)
        records = score_answers(training, ev["seed"], ev["pool"], questions, answers)
        report["modes"][mode] = {"temperature": temperature, "summary": summary_of(records), "records": records}
    report["seconds"] = time.monotonic() - began
    log.info("held-out evaluation (%s): %s", label, ", ".join(
        f"{mode} {100 * m['summary']['accuracy']:.1f}%" for mode, m in report["modes"].items()))
    return report


def table(reports: list[dict[str, Any]]) -> str:
    """One row per (report, mode): accuracy and mean score with their 95% intervals."""
    lines = [f"{'model':<14}{'mode':<9}{'questions':>10}{'accuracy':>10}{'95% CI':>16}{'mean score':>12}{'answered':>10}"]
    for report in reports:
        for mode, result in report["modes"].items():
            s = result["summary"]
            ci = f"{100 * s['accuracy_ci'][0]:.1f}..{100 * s['accuracy_ci'][1]:.1f}"
            lines.append(f"{report['label']:<14}{mode:<9}{s['questions']:>10}{100 * s['accuracy']:>9.1f}%{ci:>16}"
                         f"{s['mean_score']:>12.3f}{s['answered']:>10}")
    return "\n".join(lines)


def write_report(path: Path, reports: list[dict[str, Any]]) -> None:
    """``eval.json``, written whole (a failed evaluation leaves none)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps({"evaluations": reports}, indent=1, default=str))
    os.replace(partial, path)


def generator_for(config: dict[str, Any], model_path: Optional[str], mode: str) -> Generate:
    """The generator ``eval.generate`` names, for ``model_path`` (default: the config's model)."""
    training, ev = reasoning_gym_settings(config), eval_settings(config)
    prompt = section(config, "reasoning_gym").get("prompt", PROMPT)
    template = dict(section(config, "grpo").get("chat_template_kwargs") or {})
    if mode == "inference":
        from transformers.utils import get_json_schema

        from .generation import InferenceGenerator

        inference = section(config, "inference")
        return InferenceGenerator(inference.get("url", "http://inference:8000"), inference.get("model"),
                                  prompt, [get_json_schema(answer_tool(training))], ev["max_new_tokens"], template)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .generation import LocalGenerator

    path = model_path or config["model"]
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path)
    except OSError as exc:
        raise ConfigError(f"cannot load model {path!r} (a local folder, a checkpoint, final/, or a Hub id): "
                          f"{str(exc).splitlines()[0]}") from None
    return LocalGenerator(model, tokenizer, prompt, [answer_tool(training)], ev["max_new_tokens"], template)


def opencode_evaluation(config: dict[str, Any], label: str) -> dict[str, Any]:
    """Each held-out coding task once on ``opencode-env``, sampled at the training temperature by the
    model the inference service serves; ``{"modes": {"T=...": {"summary", "records"}}}``."""
    import concurrent.futures

    from opencode_env_client import OpenCodeEnvClient, OpenCodeEnvError

    from .coding_tasks import load_tasks

    oc, inference = section(config, "opencode"), section(config, "inference")
    if "env_url" not in oc:
        raise ConfigError("opencode.env_url is required")
    temperature = float(section(config, "eval").get("temperature", section(config, "async_grpo").get("temperature", 1.0)))
    tasks = load_tasks(Path(oc["tasks"]) if oc.get("tasks") else None, limits=oc.get("limits"), split="held_out")
    began = time.monotonic()
    client = OpenCodeEnvClient(oc["env_url"])
    try:
        client.health()
    except OpenCodeEnvError as exc:
        raise EnvUnavailable(f"opencode env at {oc['env_url']} unreachable: {exc}") from None

    def one(index: int, task: Any) -> dict[str, Any]:
        created = client.create_rollout(task, sampling={"temperature": temperature}, model=inference.get("model"))
        try:
            summary = client.wait(created.rollout_id, float(oc.get("wait_timeout_s", 900)))
            verification = client.verify(created.rollout_id)
        finally:
            client.delete(created.rollout_id)
        return {"task_id": task.task_id, "rollout_id": created.rollout_id, "status": summary.status,
                "reward": verification.reward, "passed": verification.passed, "total": verification.total,
                "correct": verification.reward == 1.0, "score": verification.reward or 0.0, "index": index,
                "answer": None if verification.reward is None else summary.status}  # answered: scored

    workers = max(1, int(section(config, "eval").get("concurrency", 2)))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        records = list(pool.map(one, range(len(tasks)), tasks))
    scored = [r for r in records if r["reward"] is not None]
    mode = f"T={temperature}"
    report = {"label": label, "tasks": "held_out", "unscored": len(records) - len(scored),
              "modes": {mode: {"temperature": temperature, "summary": summary_of(scored), "records": records}},
              "seconds": time.monotonic() - began}
    return report


def run(config: dict[str, Any], model_path: Optional[str] = None, out: Optional[Path] = None) -> dict[str, Any]:
    """Evaluate one model (default: the config's) and write ``eval.json``; returns the report."""
    label = Path(model_path or config["model"]).name or "model"
    path = out or Path(config.get("output_dir", "outputs/eval")) / "eval.json"
    path.unlink(missing_ok=True)  # a failed evaluation must not leave an earlier one looking current
    if config.get("job") == "async-grpo":
        report = opencode_evaluation(config, label)
    else:
        generate = generator_for(config, model_path, eval_settings(config)["generate"])
        report = held_out_evaluation(config, generate, label, held_out_set(config))
    write_report(path, [report])
    print(table([report]), flush=True)
    print(f"eval.json: {path}", flush=True)
    return report


def before_and_after(config: dict[str, Any], before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The change from ``before`` to ``after`` per mode: ``{"lines": [...], "modes": {mode: {...}}}``."""
    from .held_out import before_after_line, paired_difference

    result: dict[str, Any] = {"lines": [], "modes": {}}
    for mode in before["modes"]:
        b, a = before["modes"][mode], after["modes"][mode]
        diff = paired_difference(b["records"], a["records"])
        result["modes"][mode] = {"before": b["summary"]["accuracy"], "after": a["summary"]["accuracy"], **diff}
        result["lines"].append(before_after_line(mode, b["summary"]["questions"], b["summary"]["accuracy"],
                                                 a["summary"]["accuracy"], diff))
    return result

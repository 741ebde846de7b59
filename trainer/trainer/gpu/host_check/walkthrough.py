"""Stage ``walkthrough``: ``grpo-walkthrough.yaml`` with its own settings for a few optimizer steps
through the local env server: GPU memory at its peak, seconds per step, generated tokens per second,
and the projected time of the walkthrough's full run."""

import json
import sys
import time
from pathlib import Path
from typing import Any

from ...config import load_config
from ...config.loading import bundled_config
from .figures import gpu_memory, step_records, timing
from .jobs import child_env, trainer_command
from .policy import PolicyMaker
from .processes import ChildFailed, run_logged
from .random_model import INFO
from .report import StageReport
from .settings import CheckSettings

CONFIG = "grpo-walkthrough.yaml"
HUB_MODEL = "Qwen/Qwen3-1.7B"


def cached_hub_model() -> bool:
    """Whether Qwen3-1.7B's weights are in the local Hugging Face cache."""
    from huggingface_hub import snapshot_download

    try:
        folder = Path(snapshot_download(HUB_MODEL, local_files_only=True))
    except Exception:  # huggingface_hub raises one of several errors for "not cached"
        return False
    return any(folder.glob("*.safetensors"))


def walkthrough_model(stage: StageReport, settings: CheckSettings, maker: PolicyMaker, deadline: float) -> str:
    """The model to train: Qwen3-1.7B from the cache (``--model auto``), a folder, or a random one of
    its architecture made now with the default model's tokenizer."""
    if settings.model not in ("auto", "random"):
        stage.figures["model"] = settings.model
        return settings.model
    if settings.model == "auto" and cached_hub_model():
        stage.figures["model"] = f"{HUB_MODEL} (local HF cache)"
        return HUB_MODEL
    maker.wait(maker.base_ready, deadline - time.monotonic())
    out = settings.work / "models" / f"random-{settings.shape}"
    if not (out / INFO).exists():
        command = [sys.executable, "-m", "trainer.gpu.host_check.random_model", "--tokenizer", str(maker.base)]
        command += ["--out", str(out), "--shape", settings.shape, "--device", settings.device]
        run_logged(command, Path(stage.log), deadline - time.monotonic(), child_env(settings))
    info = json.loads((out / INFO).read_text())
    stage.figures["model"] = f"random init of Qwen3-1.7B's architecture ({settings.shape})"
    stage.figures["model_parameters"] = info["parameters"]
    return str(out)


def run(stage: StageReport, settings: CheckSettings, env_url: str, maker: PolicyMaker) -> None:
    """Train ``settings.steps`` steps and measure them."""
    deadline = time.monotonic() + stage.timeout_s
    model = walkthrough_model(stage, settings, maker, deadline)
    config = load_config(bundled_config(CONFIG), job="grpo")
    grpo = config.training_fields()
    output = settings.work / "outputs" / "walkthrough"
    overrides = [
        f"model={model}",
        f"output_dir={output}",
        f"reasoning_gym.env_url={env_url}",
        f"grpo.max_steps={settings.steps}",
        "grpo.logging_steps=1",  # a record per step: the walkthrough logs every 10th
        "grpo.log_completions=false",
        "eval.before_after=false",  # the learning stage measures learning
    ]
    run_logged(
        trainer_command(settings, "grpo", CONFIG, overrides),
        Path(stage.log),
        deadline - time.monotonic(),
        child_env(settings),
    )
    records = step_records(output / "metrics.jsonl")
    if len(records) < settings.steps:
        raise ChildFailed(f"the job logged {len(records)} of {settings.steps} steps")
    completions = int(grpo.get("per_device_train_batch_size", 8)) * int(grpo.get("gradient_accumulation_steps", 1))
    figures: dict[str, Any] = {"completions_per_step": completions, **timing(records, completions)}
    figures["max_completion_length"] = grpo.get("max_completion_length")
    figures["walkthrough_steps"] = grpo["max_steps"]
    figures["projected_walkthrough_s"] = round(figures["s_per_step"] * grpo["max_steps"])
    figures.update(gpu_memory(records))
    stage.passed(**figures)

"""The learning stage's policy, made on the CPU while the GPU stages run: the embedded default model
(``rlstack_default_model``: also the tokenizer of the walkthrough's random model), then the CPU GRPO
job's pre-trained policy (``python -m trainer pretrain``), as ``make up`` makes them."""

import sys
import threading
import time

from .jobs import child_env, trainer_command
from .processes import ChildFailed, StageTimeout, run_logged
from .settings import CheckSettings

LEARNING_CONFIG = "grpo-cpu.yaml"
# ``--learning short`` (CI): a policy of a few steps, a small held-out set, two GRPO steps. The gain
# is then noise; the stage's code paths are the same.
SHORT_POLICY = [
    "pretrain.questions=256",
    "pretrain.skill_steps=4",
    "pretrain.max_skill_steps=null",
    "pretrain.warmup_steps=1",
    "pretrain.noise_steps=2",
    "pretrain.min_accuracy=0",
]
SHORT_EVAL = ["eval.num_questions=16", "eval.pool=200"]


class PolicyMaker(threading.Thread):
    """Makes ``base`` (the default model) then ``policy`` in the background; ``base_ready`` is set once
    the first is there (or failed), ``done`` once both are; ``error`` says what failed."""

    def __init__(self, settings: CheckSettings, env_url: str) -> None:
        super().__init__(name="policy", daemon=True)
        self.settings, self.env_url = settings, env_url
        self.base = settings.work / "models" / "default"
        self.policy = settings.work / "models" / "reasoning-policy"
        self.log = settings.logs / "policy.log"
        self.base_ready, self.done, self.cancel = threading.Event(), threading.Event(), threading.Event()
        self.error: str | None = None
        self.seconds: dict[str, float] = {}

    def eval_overrides(self) -> list[str]:
        """The held-out settings the policy and the learning stage share."""
        return SHORT_EVAL if self.settings.learning == "short" else []

    def run(self) -> None:
        began = time.monotonic()
        deadline = began + self.settings.timeouts["policy"]
        env = child_env(self.settings)
        try:
            if not (self.base / "config.json").exists():
                make_base = [sys.executable, "-m", "rlstack_default_model", "--out", str(self.base)]
                run_logged(make_base, self.log, deadline - time.monotonic(), env, self.cancel)
            self.seconds["default_model"] = round(time.monotonic() - began, 1)
            self.base_ready.set()
            overrides = [f"model={self.policy}", f"pretrain.base={self.base}", f"reasoning_gym.env_url={self.env_url}"]
            overrides += (SHORT_POLICY if self.settings.learning == "short" else []) + self.eval_overrides()
            pretrain = trainer_command(self.settings, "pretrain", LEARNING_CONFIG, overrides)
            run_logged(pretrain, self.log, deadline - time.monotonic(), env, self.cancel)
            self.seconds["pretrain"] = round(time.monotonic() - began - self.seconds["default_model"], 1)
        except (StageTimeout, ChildFailed) as error:
            self.error = f"making the policy: {error}"
        finally:
            self.base_ready.set()
            self.done.set()

    def wait(self, event: threading.Event, timeout_s: float) -> None:
        """Wait for ``event``; a ``StageTimeout`` past ``timeout_s``, a ``ChildFailed`` if making failed."""
        if not event.wait(max(timeout_s, 0)):
            raise StageTimeout(f"the policy (log {self.log}) was not ready within {timeout_s:.0f} s")
        if self.error and (event is self.done or not (self.base / "config.json").exists()):
            raise ChildFailed(self.error)

    def stop(self) -> None:
        self.cancel.set()
        self.join()

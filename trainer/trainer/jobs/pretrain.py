"""Pre-train the CPU default's policy offline: a tiny Qwen3 that answers reasoning-gym questions in
the tool-calling format the GRPO job trains on, to a *partial* skill that GRPO can improve.

``python -m trainer pretrain --config grpo-cpu.yaml`` writes the config's ``model`` folder from the
``pretrain`` section. The same settings and packages give the same policy on a given CPU model,
whatever its thread count: fixed threads, torch's deterministic kernels and one pinned float
arithmetic (``trainer.cpu.numerics``, chosen by ``python -m trainer`` before torch loads). CPU models
still round differently (an AMD EPYC and an Intel Xeon part ways by step 100), so the skill phase
ends on its answer loss, checked every 50 steps, not on a step count alone.

1. Questions and their correct answers come from the reasoning-gym env service (through its client,
   from ``pretrain.seed``, far from the training and held-out seeds); the questions' sha256 go into
   ``rlstack_pretraining.json`` so the held-out evaluation skips every one of them.
2. A byte-level BPE tokenizer (``base``'s normaliser, pre-tokenizer and special tokens) is trained on
   the prompts, and a small Qwen3 (``base``'s architecture, the section's shape) is initialised for it.
3. The skill: supervised steps on (prompt, ``answer`` tool call with the correct answer), the loss on
   the completion plus ``question_loss`` times a next-token loss on the prompt's own tokens: at least
   ``skill_steps`` steps, then on in blocks of 50 until the answer token's loss is at most
   ``skill_answer_loss`` (at most ``max_skill_steps``). The question loss is a dense
   signal: with the one answer token alone, whether the attention the answer needs ever formed
   depended on the random start (some starts never left the plateau).
   The prompt's shared head (system prompt and tool schema) runs once per step without gradient,
   its keys and values reused by every row: the same forward, a fraction of the work.
4. The partial part: ``noise_steps`` steps on labels of which a share ``label_noise`` is replaced by a
   random answer of the dataset's. The policy keeps the skill (its greedy answer is mostly right)
   but samples the right answer only about half the time at T=1: what the reward can sharpen.
5. The held-out evaluation of the config (``eval``: greedy and at its temperature) scores the policy;
   below ``min_accuracy`` greedy it is an error and nothing is written, else the figures go into the
   manifest, so that every run says what it starts from.
"""

import hashlib
import json
import logging
import os
import random
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from ..config import ConfigError, PretrainConfig, ReasoningGymConfig, TrainerConfig
from ..cpu.numerics import PINNED_ENVIRONMENT, deterministic_torch, numerics_in_effect
from ..evaluation.generation import messages_for, turn_prefix
from ..evaluation.questions import PRETRAINING_MANIFEST as MANIFEST
from ..evaluation.questions import labelled_questions, question_digest
from ..evaluation.reasoning_gym import answer_tool, held_out_evaluation, held_out_set, local_generator
from ..training.folder_cache import cache_key, restore, store

log = logging.getLogger(__name__)
VERSION = "3"


def completion_text(answer: str) -> str:
    """The assistant turn the GRPO job rewards: one ``answer`` tool call, then the end of the turn."""
    call = json.dumps({"name": "answer", "arguments": {"answer": answer}})
    return f"<tool_call>\n{call}\n</tool_call><|im_end|>"


def _recipe(settings: PretrainConfig, rg: ReasoningGymConfig) -> dict[str, Any]:
    """Everything the output depends on (``--if-missing`` compares it)."""
    return {
        "version": VERSION,
        "settings": settings.model_dump(),
        "dataset": rg.dataset,
        "dataset_config": rg.dataset_config,
        "prompt": rg.prompt,
        "question_prefix": rg.question_prefix,
    }


def already_done(config: TrainerConfig) -> dict[str, Any] | None:
    """The manifest of the config's model folder if it holds what ``run`` would write, else None."""
    path = Path(config.require_model()) / MANIFEST
    try:
        manifest = json.loads(path.read_text())
        recorded = manifest["recipe"]
    except (OSError, ValueError, KeyError):
        return None
    return manifest if recorded == json.loads(json.dumps(_recipe(config.pretrain, config.reasoning_gym))) else None


def starting_point(manifest: dict[str, Any]) -> str:
    """The manifest's held-out accuracy in one line: what a run from this policy starts from."""
    held_out = manifest["held_out"]
    figures = ", ".join(f"{mode} {100 * accuracy:.1f}%" for mode, accuracy in held_out["accuracy"].items())
    return f"held-out accuracy ({held_out['questions']} questions of seed {held_out['seed']}): {figures}"


def run(config: TrainerConfig, cache_dir: Path | None = None) -> dict[str, Any]:
    """Pre-train and write the config's ``model`` folder; returns the manifest. With ``cache_dir``,
    a policy made before from the same inputs (settings, questions, base, packages, arithmetic) is
    copied from there instead, and a new one is kept there."""
    settings, rg = config.pretrain, config.reasoning_gym
    out = Path(config.require_model())
    log.info(
        "pretrain: fetching %d %s questions (seed %d) from %s",
        settings.questions,
        rg.dataset,
        settings.seed,
        rg.env_url,
    )
    examples = labelled_questions(rg, settings.seed, settings.questions)
    key = cache_key(_cache_inputs(config, examples))
    if cache_dir is not None and restore(cache_dir, key, out, MANIFEST):
        manifest = json.loads((out / MANIFEST).read_text())
        log.info("pretrain: copied the policy made from these inputs before (%s)", cache_dir / key)
        log.info("pretrain: the policy's %s", starting_point(manifest))
        return manifest
    manifest = _pretrain(config, examples, out)
    if cache_dir is not None:
        store(cache_dir, key, out)
    return manifest


def _cache_inputs(config: TrainerConfig, examples: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """Everything the policy depends on besides the code: what ``cache_key`` digests."""
    settings = config.pretrain
    base = Path(settings.base)
    return {
        "recipe": _recipe(settings, config.reasoning_gym),
        "reasoning_gym": config.reasoning_gym.model_dump(),  # the held-out set the manifest's figures are on
        "eval": config.eval.model_dump(),
        "examples": hashlib.sha256(json.dumps(list(examples)).encode()).hexdigest(),
        "base": {
            p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(base.iterdir())
            if p.is_file() and p.suffix in (".json", ".jinja", ".txt")
        }
        if base.is_dir()
        else settings.base,
        "packages": {name: metadata.version(name) for name in ("torch", "transformers", "tokenizers", "trl")},
        "numerics": {name: os.environ.get(name) for name in PINNED_ENVIRONMENT},
    }


def _pretrain(config: TrainerConfig, examples: Sequence[tuple[str, str]], out: Path) -> dict[str, Any]:
    """The pre-training itself (steps 2-5 of the module's docstring); writes ``out``."""
    import torch
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig, Qwen3ForCausalLM

    settings, rg = config.pretrain, config.reasoning_gym
    prompt = turn_prefix(rg)
    began = time.monotonic()
    deterministic_torch(settings.threads)
    torch.manual_seed(settings.init_seed)
    base = AutoTokenizer.from_pretrained(settings.base)
    tool = answer_tool(rg)

    # The new tokenizer keeps base's chat template and special tokens: each prompt is rendered once.
    rendered = [
        base.apply_chat_template(
            messages_for(prompt, question),
            tools=[tool],
            tokenize=False,
            add_generation_prompt=True,
            enable_thinking=False,
        )
        for question, _ in examples
    ]
    corpus = [text + completion_text(answer) for text, (_, answer) in zip(rendered, examples, strict=True)]
    tokenizer = base.train_new_from_iterator(corpus, vocab_size=settings.vocab_size)
    tokenizer.chat_template = base.chat_template
    model_config = AutoConfig.from_pretrained(settings.base)
    model_config.vocab_size = len(tokenizer)
    model_config.hidden_size, model_config.num_hidden_layers = settings.hidden_size, settings.num_hidden_layers
    model_config.intermediate_size = 3 * settings.hidden_size
    model_config.num_attention_heads = model_config.num_key_value_heads = settings.num_attention_heads
    model_config.head_dim = settings.hidden_size // settings.num_attention_heads
    model_config.eos_token_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    model_config.pad_token_id = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    model = Qwen3ForCausalLM(model_config).to(torch.float32)
    model.generation_config = GenerationConfig(
        eos_token_id=[model_config.eos_token_id, model_config.pad_token_id], pad_token_id=model_config.pad_token_id
    )
    log.info(
        "pretrain: tokenizer of %d tokens, model of %s parameters (%.0f s)",
        len(tokenizer),
        f"{sum(p.numel() for p in model.parameters()):,}",
        time.monotonic() - began,
    )

    rng = random.Random(settings.init_seed)
    prompts = tokenizer(rendered).input_ids
    clean = tokenizer([completion_text(a) for _, a in examples]).input_ids
    answers = sorted({a for _, a in examples})
    noisy = tokenizer(
        [completion_text(rng.choice(answers) if rng.random() < settings.label_noise else a) for _, a in examples]
    ).input_ids
    trainer = _SharedHeadTrainer(model, prompts, model_config.pad_token_id, settings, rng)
    skill_loss, skill_steps = trainer.train(
        clean,
        settings.skill_steps,
        settings.learning_rate,
        phase="skill",
        until=(settings.skill_answer_loss, settings.max_skill_steps or settings.skill_steps),
    )
    noise_loss, _ = trainer.train(noisy, settings.noise_steps, settings.noise_learning_rate, phase="partial")
    held_out = _held_out_accuracy(config, model, tokenizer, {question_digest(q) for q, _ in examples})
    if held_out["accuracy"]["greedy"] < settings.min_accuracy:
        raise ConfigError(
            f"pretrain: greedy held-out accuracy {100 * held_out['accuracy']['greedy']:.1f}% after "
            f"{skill_steps} skill steps is below pretrain.min_accuracy={settings.min_accuracy}: the policy "
            "did not learn the task; raise pretrain.max_skill_steps or pretrain.learning_rate"
        )

    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(out)
    model.save_pretrained(out, safe_serialization=True)
    manifest = {
        "recipe": _recipe(settings, rg),
        "held_out": held_out,
        "skill_answer_loss": skill_loss,
        "skill_steps": skill_steps,
        "partial_answer_loss": noise_loss,
        "numerics": numerics_in_effect(),
        "answers": answers,
        "seconds": round(time.monotonic() - began, 1),
        "question_sha256": sorted({question_digest(q) for q, _ in examples}),
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    for path in out.iterdir():
        path.chmod(0o644)  # read by the trainer and inference containers under other uids
    log.info(
        "pretrain: wrote %s in %.0f s (answer loss: %.3f after the skill, %.3f after the partial part)",
        out,
        manifest["seconds"],
        skill_loss,
        noise_loss,
    )
    log.info("pretrain: the policy's %s", starting_point(manifest))
    return manifest


def _held_out_accuracy(config: TrainerConfig, model: Any, tokenizer: Any, pretrained: set[str]) -> dict[str, Any]:
    """The config's held-out evaluation of ``model``, greedy and at ``eval.temperature``, skipping
    the pre-training questions (``pretrained``: their digests)."""
    greedy_too = config.model_copy(update={"eval": config.eval.model_copy(update={"greedy": True})})
    questions = held_out_set(greedy_too, frozenset(pretrained))
    report = held_out_evaluation(greedy_too, local_generator(config, model, tokenizer), "pre-trained", questions)
    return {
        "seed": config.eval.seed,
        "questions": len(questions[0]),
        "accuracy": {mode: m["summary"]["accuracy"] for mode, m in report["modes"].items()},
    }


class _SharedHeadTrainer:
    """Supervised steps on (prompt, completion) rows whose prompts share a head of tokens."""

    EMA = 0.9
    CHECK_EVERY = 50  # steps between the log lines and the checks of the skill's answer loss

    def __init__(
        self, model: Any, prompts: Sequence[list[int]], pad: int, settings: PretrainConfig, rng: random.Random
    ) -> None:
        import torch

        self.model, self.pad, self.settings, self.rng = model, pad, settings, rng
        first, n = prompts[0], 0
        while all(len(p) > n and p[n] == first[n] for p in prompts):
            n += 1
        self.head = torch.tensor(first[:n])[None]
        self.tails = [p[n:] for p in prompts]
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=settings.learning_rate, weight_decay=0.0)
        self.step = 0

    def train(
        self,
        completions: Sequence[list[int]],
        steps: int,
        learning_rate: float,
        phase: str,
        until: tuple[float, int] | None = None,
    ) -> tuple[float, int]:
        """``steps`` steps, then with ``until`` = (answer loss, most steps) more in blocks of
        ``CHECK_EVERY`` until the answer token's loss (moving average) is at most that loss; returns
        that loss at the end and the steps taken."""
        import torch

        answer_at = _answer_position(completions)
        average = float("nan")
        began = time.monotonic()
        step = 0
        while goes_on(step, average, steps, until, self.CHECK_EVERY):
            step += 1
            self.step += 1
            warmup = min(1.0, self.step / max(1, self.settings.warmup_steps))
            for group in self.optimizer.param_groups:
                group["lr"] = learning_rate * warmup
            rows = [self.rng.randrange(len(completions)) for _ in range(self.settings.batch_size)]
            loss, answer_loss = self.loss([(self.tails[i], completions[i]) for i in rows], answer_at)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.optimizer.step()
            self.optimizer.zero_grad()
            average = answer_loss if step == 1 else self.EMA * average + (1 - self.EMA) * answer_loss
            if step % self.CHECK_EVERY == 0:
                log.info(
                    "pretrain %s: step %d | loss %.4f | answer loss %.3f | %.0f s",
                    phase,
                    step,
                    loss.item(),
                    average,
                    time.monotonic() - began,
                )
        return average, step

    def loss(self, rows: list[tuple[list[int], list[int]]], answer_at: int) -> tuple[Any, float]:
        """The training loss of (prompt tail, completion) rows: the mean next-token loss on the
        completions plus ``question_loss`` times the mean one on the prompts' tails; and the answer
        token's mean loss (a float, for the stop criterion)."""
        import torch

        logits, targets, question_loss = self._forward(rows)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
        if question_loss is not None:
            loss = loss + self.settings.question_loss * question_loss
        answer_loss = torch.nn.functional.cross_entropy(logits[:, answer_at].detach(), targets[:, answer_at]).item()
        return loss, answer_loss

    def _forward(self, rows: list[tuple[list[int], list[int]]]) -> tuple[Any, Any, Any]:
        """Logits at the completion positions and their targets, both (rows, completion length), and the
        next-token loss on the prompts' own tokens (None when ``question_loss`` is 0)."""
        import torch

        batch, head = len(rows), self.head.shape[1]
        width = max(len(t) + len(c) for t, c in rows)
        ids = torch.full((batch, width), self.pad)
        mask = torch.zeros((batch, head + width), dtype=torch.long)
        mask[:, :head] = 1
        where = torch.zeros((batch, width), dtype=torch.bool)
        in_prompt = torch.zeros((batch, width), dtype=torch.bool)
        targets = []
        for i, (tail, completion) in enumerate(rows):
            ids[i, : len(tail) + len(completion)] = torch.tensor(tail + completion)
            mask[i, head : head + len(tail) + len(completion)] = 1
            where[i, len(tail) - 1 : len(tail) + len(completion) - 1] = True  # positions that predict the completion
            in_prompt[i, : len(tail) - 1] = True  # positions that predict the prompt's next token
            targets.append(completion)
        with torch.no_grad():
            cache = self.model.model(input_ids=self.head, use_cache=True).past_key_values
        cache.batch_repeat_interleave(batch)
        positions = torch.arange(head, head + width)[None].expand(batch, -1)
        hidden = self.model.model(
            input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True
        ).last_hidden_state
        logits = self.model.lm_head(hidden[where]).view(batch, -1, self.model.config.vocab_size)
        question_loss = None
        if self.settings.question_loss:
            following = torch.roll(ids, -1, dims=1)
            question_loss = torch.nn.functional.cross_entropy(
                self.model.lm_head(hidden[in_prompt]), following[in_prompt]
            )
        return logits, torch.tensor(targets), question_loss


def goes_on(step: int, answer_loss: float, steps: int, until: tuple[float, int] | None, every: int) -> bool:
    """Whether a phase that has taken ``step`` steps takes another: always before ``steps``; then,
    with ``until`` = (answer loss, most steps), until a check (every ``every`` steps) finds the answer
    loss at most that loss, or the most steps are taken."""
    if step < steps:
        return True
    if until is None or step >= until[1]:
        return False
    return step % every != 0 or not answer_loss <= until[0]


def _answer_position(completions: Sequence[list[int]]) -> int:
    """The completion position that holds the answer (the first one where completions differ)."""
    width = len(completions[0])
    if any(len(c) != width for c in completions):
        raise ConfigError("pretrain: the dataset's answers are not one token each; pick a dataset with short answers")
    for position in range(width):
        if len({c[position] for c in completions}) > 1:
            return position
    raise ConfigError("pretrain: every question has the same answer")

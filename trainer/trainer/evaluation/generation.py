"""Answers of a policy to reasoning-gym questions, in the training format (the ``answer`` tool call),
generated in-process with transformers or on the inference service's OpenAI API."""

import concurrent.futures
import json
import re
from collections.abc import Sequence
from typing import Any

import httpx

from ..config import ReasoningGymConfig

TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def parse_answer(text: str) -> str | None:
    """The ``answer`` argument of the first ``answer`` tool call in a completion (None if there is none)."""
    for match in TOOL_CALL.finditer(text):
        try:
            call = json.loads(match.group(1))
        except ValueError:
            continue
        if isinstance(call, dict) and call.get("name") == "answer" and isinstance(call.get("arguments"), dict):
            value = call["arguments"].get("answer")
            return None if value is None else str(value)
    return None


def messages_for(prompt: str, question: str) -> list[dict[str, str]]:
    """The conversation TRL trains on: the user turn's text before the question (the job's prompt and
    ``question_prefix``, see ``turn_prefix``) with the env's question appended."""
    return [{"role": "user", "content": f"{prompt}{question}"}]


def turn_prefix(settings: ReasoningGymConfig) -> str:
    """The user turn before the question: ``reasoning_gym.prompt`` then ``question_prefix``."""
    return settings.prompt + settings.question_prefix


class LocalGenerator:
    """Generates with a transformers model in this process (batched, left-padded)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        prompt: str,
        tools: Sequence[Any],
        max_new_tokens: int,
        chat_template_kwargs: dict[str, Any] | None = None,
        batch_size: int = 32,
    ) -> None:
        self.model, self.tokenizer, self.prompt, self.tools = model, tokenizer, prompt, list(tools)
        self.max_new_tokens, self.batch_size = max_new_tokens, batch_size
        self.chat_template_kwargs = dict(chat_template_kwargs or {})

    def __call__(self, questions: Sequence[str], temperature: float) -> list[str | None]:
        import torch

        texts = [
            self.tokenizer.apply_chat_template(
                messages_for(self.prompt, q),
                tools=self.tools,
                tokenize=False,
                add_generation_prompt=True,
                **self.chat_template_kwargs,
            )
            for q in questions
        ]
        side, self.tokenizer.padding_side = self.tokenizer.padding_side, "left"
        was_training = self.model.training
        self.model.eval()
        # Sampling here must not move the training run's random stream (an evaluation before
        # training would otherwise change which completions GRPO samples).
        devices = [self.model.device] if self.model.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            try:
                answers = self._generate(texts, temperature)
            finally:
                self.tokenizer.padding_side = side
                self.model.train(was_training)
        return answers

    def _generate(self, texts: list[str], temperature: float) -> list[str | None]:
        import torch

        answers: list[str | None] = []
        sampling = (
            {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
            if temperature > 0
            else {"do_sample": False}
        )
        for start in range(0, len(texts), self.batch_size):
            batch = self.tokenizer(
                texts[start : start + self.batch_size], return_tensors="pt", padding=True, add_special_tokens=False
            ).to(self.model.device)
            with torch.no_grad():
                out = self.model.generate(
                    **batch, max_new_tokens=self.max_new_tokens, pad_token_id=self.tokenizer.pad_token_id, **sampling
                )
            new = out[:, batch["input_ids"].shape[1] :]
            answers += [parse_answer(self.tokenizer.decode(ids, skip_special_tokens=False)) for ids in new]
        return answers


class InferenceGenerator:
    """Generates on the inference service (``POST /v1/chat/completions`` with the tool), several at
    once; ``model`` None: the one the service lists first."""

    def __init__(
        self,
        url: str,
        model: str | None,
        prompt: str,
        tool_schemas: Sequence[dict[str, Any]],
        max_new_tokens: int,
        chat_template_kwargs: dict[str, Any] | None = None,
        concurrency: int = 8,
        timeout_s: float = 120.0,
    ) -> None:
        self.url, self.model, self.prompt, self.tools = url.rstrip("/"), model, prompt, list(tool_schemas)
        self.max_new_tokens, self.concurrency, self.timeout_s = max_new_tokens, concurrency, timeout_s
        self.chat_template_kwargs = dict(chat_template_kwargs or {})

    def _one(self, client: httpx.Client, question: str, temperature: float) -> str | None:
        response = client.post(
            f"{self.url}/v1/chat/completions",
            json={
                "model": self.model,
                "messages": messages_for(self.prompt, question),
                "tools": self.tools,
                "temperature": temperature,
                "top_p": 1.0,
                "max_tokens": self.max_new_tokens,
                "chat_template_kwargs": self.chat_template_kwargs,
            },
        )
        if response.status_code != 200:
            raise RuntimeError(f"inference {self.url}: HTTP {response.status_code}: {response.text[:300]}")
        message = response.json()["choices"][0]["message"]
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            if function.get("name") == "answer":
                try:
                    value = json.loads(function.get("arguments") or "{}").get("answer")
                except (ValueError, AttributeError):
                    return None
                return None if value is None else str(value)
        return parse_answer(message.get("content") or "")

    def __call__(self, questions: Sequence[str], temperature: float) -> list[str | None]:
        with (
            httpx.Client(timeout=self.timeout_s) as client,
            concurrent.futures.ThreadPoolExecutor(self.concurrency) as pool,
        ):
            if self.model is None:  # the model the service serves
                self.model = client.get(f"{self.url}/v1/models").raise_for_status().json()["data"][0]["id"]
            return list(pool.map(lambda q: self._one(client, q, temperature), questions))

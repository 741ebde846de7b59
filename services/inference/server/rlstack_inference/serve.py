"""Start vLLM's OpenAI-compatible server with the stack's flags, configured from the environment.

Variables: MODEL (local path or Hugging Face id), SERVED_MODEL_NAME, MAX_MODEL_LEN, DTYPE,
WEIGHT_TRANSFER_BACKEND (``nccl`` on GPU hosts; empty on CPU), VLLM_EXTRA_ARGS (appended verbatim).
"""

import os
import shlex
import sys
from pathlib import Path

PORT = 8000


def vllm_command(env: dict[str, str]) -> list[str]:
    """The ``vllm serve`` argument list for this environment."""
    model = env.get("MODEL", "/models/default")
    command = [
        "vllm",
        "serve",
        model,
        "--host",
        "0.0.0.0",
        "--port",
        str(PORT),
        "--served-model-name",
        env.get("SERVED_MODEL_NAME") or model,
        "--max-model-len",
        env.get("MAX_MODEL_LEN", "32768"),
        "--dtype",
        env.get("DTYPE", "auto"),
        # Token-exact training data: ids instead of strings, logprobs after sampling processing.
        "--return-tokens-as-token-ids",
        "--logprobs-mode",
        "processed_logprobs",
        "--max-logprobs",
        env.get("MAX_LOGPROBS", "20"),
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
        "--generation-config",
        "vllm",
    ]
    backend = env.get("WEIGHT_TRANSFER_BACKEND", "")
    if backend:
        command += ["--weight-transfer-config", f'{{"backend": "{backend}"}}']
    command += shlex.split(env.get("VLLM_EXTRA_ARGS", ""))
    return command


CACHE_VARIABLES = ("HF_HOME", "VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR")


def unwritable_caches(env: dict[str, str]) -> list[str]:
    """The cache folders named in ``env`` that this user cannot create files in (vLLM would fail
    there only after minutes of model download or compilation)."""
    bad = []
    for name in CACHE_VARIABLES:
        folder = env.get(name)
        if not folder:
            continue
        path = Path(folder)
        try:
            path.mkdir(parents=True, exist_ok=True)
            probe = path / f".rlstack-write-probe-{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as error:
            bad.append(f"{name}={folder} ({error.strerror or error})")
    return bad


def main() -> None:
    """Check the model is there and the caches writable, say where the server will listen, and exec vLLM."""
    env = dict(os.environ)
    model = env.get("MODEL", "/models/default")
    if model.startswith("/") and not (Path(model) / "config.json").exists():
        sys.exit(f"inference: no model at {model}; the model-init service creates it (`docker compose up model-init`)")
    bad = unwritable_caches(env)
    if bad:
        sys.exit(
            f"inference: cache folders not writable by uid {os.getuid()}: {', '.join(bad)}; "
            "a volume mounted there must belong to this user (docker volume rm it to recreate it)"
        )
    if env.get("VLLM_SERVER_DEV_MODE") != "1":
        sys.exit("inference: VLLM_SERVER_DEV_MODE=1 is required (weight reload and versioning endpoints)")
    command = vllm_command(env)
    print(
        f"inference: serving {model} as '{command[command.index('--served-model-name') + 1]}' on "
        f"http://0.0.0.0:{PORT} (OpenAI API under /v1, health at /health)",
        flush=True,
    )
    print("inference: " + shlex.join(command), flush=True)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main()

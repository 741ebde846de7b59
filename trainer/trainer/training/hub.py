"""``push_to_hub`` checked before anything long starts: a token, and a Hub that answers. Without
the check the run trains for an hour and fails at the push (or at once, with a traceback, where
transformers creates the repository)."""

import os

import httpx

from ..config import ConfigError

DEFAULT_ENDPOINT = "https://huggingface.co"


def hub_token(environ: dict[str, str] | None = None) -> str | None:
    """``HF_TOKEN``, else the token ``huggingface-cli login`` stored (None: neither)."""
    environ = os.environ if environ is None else environ
    if environ.get("HF_TOKEN"):
        return environ["HF_TOKEN"]
    try:
        from huggingface_hub import get_token
    except ImportError:
        return None
    return get_token()


def check_hub(
    section: str, hub_model_id: str | None, environ: dict[str, str] | None = None, timeout_s: float = 10.0
) -> None:
    """Raise ``ConfigError`` (one line) unless the Hub accepts this token: ``section`` names the
    config section that asked for the push."""
    environ = os.environ if environ is None else environ
    if environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes", "on"):
        raise ConfigError(f"{section}.push_to_hub is set but HF_HUB_OFFLINE is on: unset one of them")
    token = hub_token(environ)
    if not token:
        raise ConfigError(f"{section}.push_to_hub needs a Hugging Face token with write access: set HF_TOKEN")
    endpoint = environ.get("HF_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/")
    try:
        response = httpx.get(
            f"{endpoint}/api/whoami-v2", headers={"Authorization": f"Bearer {token}"}, timeout=timeout_s
        )
    except httpx.HTTPError as exc:
        raise ConfigError(
            f"{section}.push_to_hub: the Hugging Face Hub at {endpoint} does not answer ({type(exc).__name__}: {exc}); "
            "train without pushing (push_to_hub: false) and push final/ later"
        ) from None
    if response.status_code != 200:
        raise ConfigError(
            f"{section}.push_to_hub: the Hub at {endpoint} refuses the token (HTTP {response.status_code}); "
            "check HF_TOKEN"
        )
    user = response.json().get("name", "?")
    print(f"push_to_hub: as {user}, to {hub_model_id or '<user>/<output_dir name>'} at the end", flush=True)

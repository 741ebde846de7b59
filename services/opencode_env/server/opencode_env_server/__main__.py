"""``python -m opencode_env_server``: serve with uvicorn, configured from the environment."""

import logging

import uvicorn

from .app import create_app
from .settings import Settings


def main() -> None:
    """Run the service until interrupted."""
    settings = Settings.from_env()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uvicorn.run(create_app(settings), host="0.0.0.0", port=settings.port, log_level="info", access_log=False,
                ws="websockets-sansio", ws_per_message_deflate=False, timeout_graceful_shutdown=5)


if __name__ == "__main__":
    main()

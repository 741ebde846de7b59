"""``python -m reasoning_gym_env_server``: serve with uvicorn using settings from the environment."""

import logging

import uvicorn

from .app import create_app
from .settings import Settings


def main() -> None:
    """Run the server until interrupted."""
    settings = Settings.from_env()
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        access_log=False,
        # Frames above our own limit get an error reply; far larger ones are cut off by uvicorn.
        ws_max_size=4 * settings.max_message_bytes,
        ws="websockets-sansio",
        # Messages are small; compressing them costs more CPU than it saves on loopback/LAN.
        ws_per_message_deflate=False,
        ws_ping_interval=20.0,
        ws_ping_timeout=20.0,
        timeout_graceful_shutdown=5,
    )


if __name__ == "__main__":
    main()

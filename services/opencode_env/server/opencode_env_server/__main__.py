"""``python -m opencode_env_server``: serve with uvicorn, configured from the environment.

One server, several listening sockets: the API on ``0.0.0.0:PORT`` and one loopback proxy port
per sandbox seat (``SANDBOX_PROXY_PORT_BASE + seat``), the only address that seat's uid may reach.
"""

import logging
import socket

import uvicorn

from .api.http_limits import header_deadline
from .app import create_app
from .logs import RateLimit
from .settings import Settings


class Server(uvicorn.Server):
    """Tells the rollout manager at the first shutdown signal, so in-flight waits answer clearly."""

    def handle_exit(self, sig, frame) -> None:
        self.config.app.state.manager.stopping.set()
        super().handle_exit(sig, frame)


def listen(host: str, port: int) -> socket.socket:
    """A bound, listening TCP socket."""
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    return sock


def main() -> None:
    """Run the service until interrupted."""
    settings = Settings.from_env()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sockets = [listen("0.0.0.0", settings.port)]
    sockets += [listen("127.0.0.1", settings.sandbox_proxy_port(seat)) for seat in range(settings.seats)]
    # The stdlib event loop, not uvloop: its subprocesses close every descriptor but stdio
    # (close_fds); uvloop's keep inheritable ones, such as duplicates of their pipes, open in sandboxes.
    config = uvicorn.Config(
        create_app(settings),
        loop="asyncio",
        http=header_deadline(settings.header_timeout_s),
        log_level="info",
        access_log=False,
        ws="websockets-sansio",
        ws_per_message_deflate=False,
        timeout_graceful_shutdown=5,
    )
    limit = RateLimit()  # the service's and uvicorn's own handlers (uvicorn configured its loggers above)
    for name in ("", "uvicorn", "uvicorn.error"):
        for handler in logging.getLogger(name).handlers:
            handler.addFilter(limit)
    Server(config).run(sockets=sockets)


if __name__ == "__main__":
    main()

"""One OpenCode server (``opencode serve``) in a rollout's sandbox, driven over its HTTP API.

The agent is OpenCode's own server: we create a session, send the task as its prompt and follow the
server's event stream until the session is idle, as ``opencode run`` does, without the CLI's start-up
in the rollout's path. A server can be started and warmed up (one throwaway session through the
proxy's canned warm-up reply) before its rollout exists, so the rollout's first model call follows
its creation in well under a second; see ``RolloutManager``.
"""

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any, BinaryIO

import aiohttp
import orjson

from ..sandbox import usage
from ..sandbox.sandbox import Sandbox
from . import opencode

WARM_UP_PROMPT = "Reply with: ok"
API_TIMEOUT = aiohttp.ClientTimeout(total=30)


class AgentFailed(RuntimeError):
    """The OpenCode server did not start or stopped answering."""


class AgentServer:
    """``opencode serve`` as the sandbox's uid, listening on a loopback port only we may reach.

    Before anything is sent to the port (the password included), the service checks that the only
    socket listening on it belongs to the server it started: another uid that bound the port while
    this seat's server was down is never talked to (``AgentFailed``: an infrastructure failure).
    """

    def __init__(self, sandbox: Sandbox, port: int, http: aiohttp.ClientSession, binary: str = "opencode") -> None:
        self.sandbox, self.port, self.http, self.binary = sandbox, port, http, binary
        self.password = secrets.token_urlsafe(18)
        self.auth = aiohttp.BasicAuth("opencode", self.password)
        self.base = f"http://127.0.0.1:{port}"
        self.process: asyncio.subprocess.Process | None = None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def start(self, env: dict[str, str], log_file: BinaryIO, timeout_s: float = 60.0) -> None:
        """Spawn the server (``env`` must set OPENCODE_SERVER_PASSWORD to ``password``; output to
        ``log_file``) and wait until it answers."""
        deadline = time.monotonic() + timeout_s
        # The seat's previous server (killed with its sandbox) may hold the port while its last
        # threads exit: a new server must not start beside it. Another uid holding it is an attack.
        while held := usage.listeners(self.port):
            if any(uid != self.sandbox.uid for uid, _ in held) or time.monotonic() > deadline:
                raise AgentFailed(f"port {self.port} is held by another socket: (uid, inode) {held}")
            await asyncio.sleep(0.05)
        self.process = await self.sandbox.spawn(
            opencode.serve_command(self.binary, self.port), env, log_file, asyncio.subprocess.STDOUT
        )
        while time.monotonic() < deadline:
            if not self.alive:
                raise AgentFailed(f"opencode serve exited with {self.process.returncode} while starting")
            if not usage.listeners(self.port):
                await asyncio.sleep(0.05)
                continue
            self.check_listener()
            try:
                async with self.http.get(
                    f"{self.base}/global/health", auth=self.auth, timeout=aiohttp.ClientTimeout(total=2)
                ) as r:
                    if r.status == 200:
                        return
            except (TimeoutError, aiohttp.ClientError):
                pass
            await asyncio.sleep(0.05)
        raise AgentFailed(f"opencode serve did not answer within {timeout_s:g}s")

    def check_listener(self) -> None:
        """Raise ``AgentFailed`` unless our server is alive and every socket listening on its port is its own."""
        if not self.alive:
            raise AgentFailed(f"opencode serve is gone (exit code {self.process.returncode if self.process else None})")
        found = usage.listeners(self.port)
        ours = usage.socket_inodes_of_group(self.process.pid, self.sandbox.uid)
        foreign = [(uid, inode) for uid, inode in found if uid != self.sandbox.uid or inode not in ours]
        if not found or foreign:
            raise AgentFailed(
                f"port {self.port} is not served by this seat's OpenCode server "
                f"(listeners: {found or 'none'}; foreign: {foreign})"
            )

    async def warm_up(self, timeout_s: float = 60.0) -> None:
        """Run one throwaway session to its end and delete it.

        OpenCode loads its provider plugins and tools on a server's first prompt (about 2 s here); the
        proxy answers this session's model call with a canned reply (see ``chat_completions.WARM_UP_COMPLETION``).
        """
        await asyncio.wait_for(self.run_session(WARM_UP_PROMPT, None, delete=True), timeout_s)

    async def run_session(self, instruction: str, events_log: BinaryIO | None, delete: bool = False) -> int:
        """Prompt a new session and follow it until idle; 0 if it ended without an error, else 1.

        Every event but the token-by-token deltas goes to ``events_log`` as one JSON line. Permission
        requests are rejected, as the non-interactive ``opencode run`` does.
        """
        self.check_listener()
        session = await self._call("POST", "/session", {})
        failed = False
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
        try:
            async with self.http.get(f"{self.base}/event", auth=self.auth, timeout=timeout) as stream:
                if stream.status != 200:
                    raise AgentFailed(f"event stream answered {stream.status}")
                await self._call(
                    "POST", f"/session/{session['id']}/prompt_async", {"parts": [{"type": "text", "text": instruction}]}
                )
                async for event, raw in _events(stream):
                    kind, props = event.get("type"), event.get("properties") or {}
                    if kind == "message.part.delta" or props.get("sessionID", session["id"]) != session["id"]:
                        continue
                    if events_log is not None:
                        events_log.write(raw + b"\n")
                        events_log.flush()
                    if kind == "permission.asked":
                        await self._call(
                            "POST",
                            f"/permission/{props['id']}/reply",
                            {"reply": "reject", "message": "non-interactive rollout"},
                        )
                    elif kind == "session.error":
                        failed = True
                    elif kind == "session.idle":
                        break
                else:
                    raise AgentFailed(f"opencode serve closed its event stream (exit code {self.process.returncode})")
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise AgentFailed(f"opencode serve stopped answering: {type(exc).__name__}: {exc}") from None
        if delete:
            await self._call("DELETE", f"/session/{session['id']}")
        return 1 if failed else 0

    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        try:
            async with self.http.request(
                method,
                self.base + path,
                auth=self.auth,
                timeout=API_TIMEOUT,
                data=None if body is None else orjson.dumps(body),
                headers={"content-type": "application/json"},
            ) as response:
                text = await response.read()
                if response.status >= 400:
                    raise AgentFailed(f"{method} {path} answered {response.status}: {text[:300]!r}")
                return orjson.loads(text) if text else None
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise AgentFailed(f"{method} {path}: {type(exc).__name__}: {exc}") from None


async def _events(stream: aiohttp.ClientResponse) -> AsyncIterator[tuple[dict[str, Any], bytes]]:
    """(event, its JSON) for each ``data:`` line of a server-sent event stream, whatever its length."""
    buffer = b""
    async for data in stream.content.iter_any():
        buffer += data
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.startswith(b"data: "):
                yield orjson.loads(line[6:]), line[6:].rstrip(b"\r")

"""OpenEnv's protocol for the ``run_rollout`` tool, independent of the transport: JSON-RPC 2.0
requests (``POST /mcp``, and ``mcp`` frames on ``/ws``) and the ``/ws`` frames (``reset``, ``step``,
``state``, ``mcp``, ``close``), as openenv 0.10's ``MCPToolClient`` and ``GenericEnvClient`` send them."""

import asyncio
from typing import Any

import orjson
from opencode_env_client.models import RolloutResult, RunRolloutArguments
from pydantic import ValidationError

from . import run_rollout
from .openenv_sessions import OpenEnvSession, SessionError, SessionRegistry
from .service import RolloutService, ServiceError

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, SERVER_ERROR = -32700, -32600, -32601, -32602, -32000
READY = {"status": "ready", "message": "opencode_env ready. Call run_rollout(...) with a task."}


class RpcError(Exception):
    """A JSON-RPC error; ``tool_error`` is the ``ToolError`` type a ``/ws`` step reports it as."""

    def __init__(
        self, code: int, message: str, data: dict[str, Any] | None = None, tool_error: str = "execution_error"
    ) -> None:
        super().__init__(message)
        self.code, self.message, self.data, self.tool_error = code, message, data, tool_error


def rpc_error(request_id: Any, code: int, message: str, data: dict[str, Any] | None = None) -> dict[str, Any]:
    """A JSON-RPC error response."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def tool_result(text: str) -> dict[str, Any]:
    """A ``tools/call`` result in the shape FastMCP's ``CallToolResult`` serialises to (upstream's server)."""
    return {
        "content": [{"type": "text", "text": text}],
        "structured_content": {"result": text},
        "meta": None,
        "data": text,
        "is_error": False,
    }


def ws_error(message: str, code: str, **extra: Any) -> dict[str, Any]:
    """A ``/ws`` error frame (codes as openenv's ``WSErrorCode``)."""
    return {"type": "error", "data": {"message": message, "code": code, **extra}}


def describe(exc: ValidationError) -> str:
    """Pydantic errors in one line, unknown arguments named as such."""
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "arguments"
        parts.append(
            f"unknown argument {where!r}" if error["type"] == "extra_forbidden" else f"{where}: {error['msg']}"
        )
    return "; ".join(parts)


class OpenEnvProtocol:
    """Answers JSON-RPC requests and ``/ws`` frames for OpenEnv sessions."""

    def __init__(self, sessions: SessionRegistry, service: RolloutService) -> None:
        self.sessions = sessions
        self.service = service

    # --- JSON-RPC ------------------------------------------------------------------------
    async def handle_rpc(self, message: Any, bound: OpenEnvSession | None = None) -> dict[str, Any]:
        """One JSON-RPC request to its response; ``bound`` is the session of the ``/ws`` it came on."""
        if not isinstance(message, dict):
            return rpc_error(None, INVALID_REQUEST, "Invalid request: a JSON-RPC 2.0 request object is required")
        request_id = message.get("id")
        if not isinstance(request_id, (str, int, type(None))) or isinstance(request_id, bool):
            return rpc_error(None, INVALID_REQUEST, "Invalid request: 'id' must be a string, a number or null")
        method, params = message.get("method"), message.get("params", {})
        if (
            message.get("jsonrpc") != "2.0"
            or not isinstance(method, str)
            or set(message) - {"jsonrpc", "method", "params", "id"}
        ):
            return rpc_error(
                request_id, INVALID_REQUEST, "Invalid request: expected {jsonrpc: '2.0', method, params, id}"
            )
        if not isinstance(params, dict):
            return rpc_error(request_id, INVALID_PARAMS, "Params must be an object")
        try:
            return {"jsonrpc": "2.0", "id": request_id, "result": await self._dispatch(method, params, bound)}
        except RpcError as exc:
            return rpc_error(request_id, exc.code, exc.message, exc.data)

    async def _dispatch(self, method: str, params: dict[str, Any], bound: OpenEnvSession | None) -> Any:
        if method == "openenv/session/create":
            if bound is not None:
                return {"session_id": bound.id}
            try:
                return {"session_id": self.sessions.open().id}
            except SessionError as exc:
                raise RpcError(SERVER_ERROR, str(exc), exc.data) from None
        if method == "openenv/session/close":
            return await self._close(params, bound)
        if method == "tools/list":
            self._session_of(params, bound)
            return {"tools": [run_rollout.TOOL]}
        if method == "tools/call":
            name, arguments = params.get("name"), params.get("arguments", {})
            if not isinstance(name, str) or not name:
                raise RpcError(INVALID_PARAMS, "Missing 'name' in params")
            if not isinstance(arguments, dict):
                raise RpcError(INVALID_PARAMS, "'arguments' must be an object", tool_error="invalid_args")
            result = await self.call_tool(self._session_of(params, bound), name, arguments)
            return tool_result(result.model_dump_json())
        raise RpcError(METHOD_NOT_FOUND, f"Method not found: {method}")

    def _session_of(self, params: dict[str, Any], bound: OpenEnvSession | None) -> OpenEnvSession | None:
        """The session a request acts in: the ``/ws`` one, the one named by ``session_id``, or none."""
        if bound is not None:
            return bound
        session_id = params.get("session_id")
        if session_id is None:
            return None
        if not isinstance(session_id, str):
            raise RpcError(INVALID_PARAMS, "'session_id' must be a string")
        try:
            session = self.sessions.get(session_id)
        except SessionError as exc:
            raise RpcError(INVALID_PARAMS, str(exc)) from None
        session.touch()
        return session

    async def _close(self, params: dict[str, Any], bound: OpenEnvSession | None) -> dict[str, Any]:
        target = params.get("session_id")
        if not isinstance(target, str) or not target:
            raise RpcError(INVALID_PARAMS, "Invalid params - 'session_id' is required")
        if bound is not None and bound.id == target:
            raise RpcError(INVALID_REQUEST, "Cannot close active WebSocket-managed session via MCP method")
        session = self._session_of({"session_id": target}, None)
        if session.websocket_attached:  # closed once its WebSocket goes, as upstream
            session.close_when_detached = True
            return {"session_id": target, "closed": False, "closing": True}
        await self.sessions.close(session)
        return {"session_id": target, "closed": True}

    # --- the tool --------------------------------------------------------------------------
    async def call_tool(self, session: OpenEnvSession | None, name: str, arguments: dict[str, Any]) -> RolloutResult:
        """Run ``run_rollout`` (in ``session`` if any: closing it stops the rollout)."""
        if name != run_rollout.TOOL["name"]:
            raise RpcError(INVALID_PARAMS, f"Tool not found: {name}", tool_error="tool_not_found")
        try:
            args = RunRolloutArguments.model_validate(arguments)
        except ValidationError as exc:
            raise RpcError(INVALID_PARAMS, f"run_rollout: {describe(exc)}", tool_error="invalid_args") from None
        call = run_rollout.run(self.service, args)
        try:
            result: RolloutResult = await (session.run(call) if session is not None else call)
        except ValueError as exc:
            raise RpcError(INVALID_PARAMS, f"run_rollout: {exc}", tool_error="invalid_args") from None
        except ServiceError as exc:
            code = INVALID_PARAMS if exc.status < 500 else SERVER_ERROR
            raise RpcError(
                code,
                f"run_rollout: {exc.message}",
                exc.data or None,
                tool_error="invalid_args" if exc.status < 500 else "execution_error",
            ) from None
        except asyncio.CancelledError:
            if asyncio.current_task().cancelling():
                raise  # the request itself is being cancelled
            raise RpcError(
                SERVER_ERROR,
                "run_rollout: the session was closed while the rollout ran; the rollout was stopped and removed",
            ) from None
        if session is not None:
            state = session.state
            state.step_count += 1
            state.rollouts_completed += 1
            state.last_reward, state.last_task_id, state.last_sandbox_id = (
                result.reward,
                args.task_id or None,
                result.sandbox_id,
            )
        return result

    # --- /ws frames ----------------------------------------------------------------------
    async def handle_frame(self, raw: str, session: OpenEnvSession) -> dict[str, Any] | None:
        """One ``/ws`` frame to its reply frame (None: the client closes the session)."""
        try:
            frame = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            return ws_error(f"Invalid JSON: {exc}", "INVALID_JSON")
        kind = frame.get("type") if isinstance(frame, dict) else None
        data = frame.get("data", {}) if isinstance(frame, dict) else None
        session.touch()
        if kind == "close":
            return None
        if kind == "reset":
            session.reset()
            return {
                "type": "observation",
                "data": {"observation": {}, "reward": None, "done": False, "metadata": READY},
            }
        if kind == "state":
            return {"type": "state", "data": session.state.model_dump()}
        if kind == "mcp":
            return {"type": "mcp", "data": await self.handle_rpc(data, bound=session)}
        if kind == "step":
            return await self._step(data, session)
        return ws_error(f"Unknown message type: {kind!r}; use reset, step, state, mcp or close", "UNKNOWN_TYPE")

    async def _step(self, action: Any, session: OpenEnvSession) -> dict[str, Any]:
        if not isinstance(action, dict) or action.get("type") not in ("call_tool", "list_tools"):
            return ws_error("Invalid message: a step's data is a call_tool or list_tools action", "VALIDATION_ERROR")
        if action["type"] == "list_tools":
            session.state.step_count += 1
            return _observation({"tools": [run_rollout.TOOL]}, None, False)
        name = action.get("tool_name")
        try:
            result = await self.call_tool(session, str(name), action.get("arguments") or {})
        except RpcError as exc:
            error = {"error_type": exc.tool_error, "message": exc.message}
            return _observation({"tool_name": name, "result": None, "error": error}, None, False)
        return _observation(
            {"tool_name": name, "result": tool_result(result.model_dump_json()), "error": None}, result.reward, True
        )


def _observation(observation: dict[str, Any], reward: float | None, done: bool) -> dict[str, Any]:
    return {"type": "observation", "data": {"observation": observation, "reward": reward, "done": done}}

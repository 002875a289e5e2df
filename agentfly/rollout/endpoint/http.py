"""The HTTP side of the OpenAI-compatible endpoint (aiohttp, in the caller's event loop).

Routes:

- ``GET /v1/models`` and ``POST /v1/chat/completions``: the model alone (``agentfly serve``),
  behind ``api_key`` when one is set;
- ``GET /chains/{token}/v1/models`` and ``POST /chains/{token}/v1/chat/completions``: one
  harness chain's endpoint; its ``OPENAI_API_KEY`` is the token, checked on every request.

Every error is OpenAI's error object with a status: 400 for what cannot be served (naming the
field), 401 for a wrong key, 404 for an unknown chain, 410 for a chain whose run has ended, 504
for an engine past its deadline, 500 (naming the exception) for a fault of the server itself.
The server runs in the event loop that calls :meth:`ChatServer.start`, so the engine pool
batches its requests with the loop's other chains; it listens on ``127.0.0.1`` and a free port
unless told otherwise.
"""

from __future__ import annotations

import json
import logging
import secrets
from typing import Any

from aiohttp import web

from agentfly.rollout.endpoint.chain import ChainRecord
from agentfly.rollout.endpoint.openai_api import RequestError, models_body, parse_request
from agentfly.rollout.endpoint.service import ChatService

logger = logging.getLogger(__name__)


def _error(e: RequestError) -> web.Response:
    return web.json_response(e.body(), status=e.status)


class ChatServer:
    """The endpoint over a :class:`~agentfly.rollout.endpoint.service.ChatService`.

    Args:
        service: what answers the requests.
        host, port: where to listen (port 0: a free one).
        api_key: the key ``/v1/...`` requires as ``Authorization: Bearer <key>`` (None: none).
    """

    def __init__(self, service: ChatService, *, host: str = "127.0.0.1", port: int = 0,
                 api_key: str | None = None) -> None:
        self.service, self.host, self.port, self.api_key = service, host, port, api_key
        self.chains: dict[str, ChainRecord] = {}
        self._runner: web.AppRunner | None = None
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/chains/{token}/v1/models", self._chain_models)
        app.router.add_post("/chains/{token}/v1/chat/completions", self._chain_chat)
        self.app = app

    async def start(self) -> str:
        """Listen; returns the base URL (``http://host:port``)."""
        runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, reuse_address=True)
        await site.start()
        self._runner = runner
        self.port = runner.addresses[0][1]
        return self.url

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def open_chain(self, record: ChainRecord) -> tuple[str, str]:
        """Give ``record`` an endpoint; returns ``(base_url, token)`` (the token is its key)."""
        token = secrets.token_hex(12)
        self.chains[token] = record
        return f"{self.url}/chains/{token}/v1", token

    def close_chain(self, token: str) -> None:
        record = self.chains.pop(token, None)
        if record is not None:
            record.open = False

    # ------------------------------------------------------------------ handlers

    def _authorized(self, request: web.Request, key: str | None) -> bool:
        if key is None:
            return True
        given = request.headers.get("Authorization", "")
        return secrets.compare_digest(given, f"Bearer {key}")

    async def _body(self, request: web.Request) -> Any:
        try:
            return json.loads(await request.read())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise RequestError(f"the body is not JSON ({e})") from None

    async def _models(self, request: web.Request) -> web.Response:
        if not self._authorized(request, self.api_key):
            return _error(RequestError("wrong API key", status=401, code="invalid_api_key"))
        return web.json_response(models_body(self.service.model_name))

    async def _chat(self, request: web.Request) -> web.Response:
        if not self._authorized(request, self.api_key):
            return _error(RequestError("wrong API key", status=401, code="invalid_api_key"))
        return await self._answer(request, None)

    def _chain(self, request: web.Request) -> ChainRecord:
        token = request.match_info["token"]
        record = self.chains.get(token)
        if record is None:
            raise RequestError("no such chain (its run may have ended)", status=404, code="unknown_chain")
        if not self._authorized(request, token):
            raise RequestError("wrong API key for this chain (use its OPENAI_API_KEY)", status=401,
                               code="invalid_api_key")
        return record

    async def _chain_models(self, request: web.Request) -> web.Response:
        try:
            self._chain(request)
        except RequestError as e:
            return _error(e)
        return web.json_response(models_body(self.service.model_name))

    async def _chain_chat(self, request: web.Request) -> web.Response:
        try:
            record = self._chain(request)
        except RequestError as e:
            return _error(e)
        return await self._answer(request, record)

    async def _answer(self, request: web.Request, record: ChainRecord | None) -> web.Response:
        try:
            body = await self._body(request)
            try:
                chat = parse_request(body)
            except RequestError as e:
                if record is not None:
                    record.malformed.append(str(e))
                raise
            return web.json_response(await self.service.complete(chat, record))
        except RequestError as e:
            return _error(e)
        except Exception as e:  # a fault of the server: the caller gets its name, the log the trace
            logger.warning("chat completion failed: %r", e, exc_info=True)
            return _error(RequestError(f"the server failed: {type(e).__name__}: {e}", status=500,
                                       code="server_error"))

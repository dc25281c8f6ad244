"""The app in-process, through httpx's ASGI transport: the whole app, no socket (and no lifespan,
so no embedded dispatcher: job tests start their own); and the check every refusal passes."""

import asyncio
import threading

import httpx

from app.main import create_app


class Api:
    """A synchronous face over an httpx.AsyncClient on the ASGI app. Its event loop runs in a
    thread of its own: a test process may also hold Playwright's sync API (the browser tests'
    session-scoped Chromium), whose loop runs in the main thread, where no second loop can."""

    def __init__(self, app=None) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="api-loop", daemon=True)
        self._thread.start()
        self.app = app or create_app()
        transport = httpx.ASGITransport(app=self.app)
        self.client = httpx.AsyncClient(transport=transport, base_url="http://localhost")

    def _run(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def request(self, method: str, path: str, **kwargs) -> httpx.Response:
        return self._run(self.client.request(method, path, **kwargs))

    def get(self, path: str, **kwargs) -> httpx.Response:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, json=None, **kwargs) -> httpx.Response:
        return self.request("POST", path, json=json, **kwargs)

    def ok(self, path: str, body: dict) -> dict:
        """POST and insist on 200."""
        response = self.post(path, body)
        assert response.status_code == 200, response.text
        return response.json()

    def close(self) -> None:
        self._run(self.client.aclose())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


def assert_names_field(response: httpx.Response, field: str, status: int = 422) -> dict:
    """A 4xx whose message names `field`."""
    assert response.status_code == status, response.text
    body = response.json()
    assert any(item["field"] == field for item in body["detail"]), body
    assert field in body["message"], body
    return body

"""Headers on every page and static file: a Content-Security-Policy that lets a page load
scripts, styles, images and data only from this origin, run no inline script and sit in
no frame; no MIME sniffing; the Referer only to this origin. The templates keep to it: no
inline <script>, event handler or style= attribute (htmx's own indicator <style> is turned
off in base.html); /docs starts Swagger UI from static/docs.js. Chart.js and Swagger UI
set styles through CSSOM, which CSP allows.

The JSON API (/api/) is passed through untouched, so its requests pay nothing here.
"""

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "font-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
       "frame-ancestors 'none'")
HEADERS = [(b"content-security-policy", CSP.encode()), (b"x-content-type-options", b"nosniff"),
           (b"referrer-policy", b"same-origin")]


class PageHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith("/api/"):
            return await self.app(scope, receive, send)

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), *HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)

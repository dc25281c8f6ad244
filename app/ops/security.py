"""Two refusals before any route runs, in the usual error shape (app/api/errors.py):

- DNS rebinding: a Host the server does not answer to (TALLY_ALLOWED_HOSTS) gets a 400
  naming `host`. A page on another site whose name was rebound to 127.0.0.1 reaches the
  server under that name, so a loopback server answers only its loopback names.
- Heavy work for another site: a page's result fragment (/ui/..., which may run a layout search)
  asked for by another site (`Sec-Fetch-Site: cross-site`: a hostile page's <img> tags) gets the
  same 403; the pages themselves defer their heavy calculations (app/web/pages.py).
- Cross-site request forgery: a state-changing request (any method but GET, HEAD and
  OPTIONS) that a browser marks as coming from another site, `Sec-Fetch-Site: cross-site`
  or an `Origin` that is not this server's, gets a 403 naming `origin` (OWASP's fetch
  metadata defence). Browsers send Origin with every such request, from another port of
  the same host too; curl, scripts and the CLI send neither header, and pass.

Pure ASGI: a GET or POST that passes costs one pass over the headers and a dict lookup
(about 2 us in all).
"""

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.errors import error_body

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def hostname(host: str) -> str:
    """A Host header's name, as TALLY_ALLOWED_HOSTS lists it: "[::1]:8000" -> "::1",
    "Localhost:8000" -> "localhost"."""
    host = host.lower()
    if host.startswith("["):
        end = host.find("]")
        return host[1:end] if end > 0 else host
    return host.partition(":")[0] if host.count(":") == 1 else host


def _refusal(status: int, field: str, msg: str, kind: str) -> JSONResponse:
    return JSONResponse(error_body([{"loc": ["header", field], "field": field, "msg": msg, "type": kind}]),
                        status_code=status)


BAD_HOST = _refusal(400, "host", "this server does not answer to this Host (see TALLY_ALLOWED_HOSTS)",
                    "host_not_allowed")
CROSS_SITE = _refusal(403, "origin", "a request from another site may not change anything here "
                      "(Origin is not this server's, or Sec-Fetch-Site is cross-site)", "cross_site")
CROSS_SITE_FRAGMENT = _refusal(403, "origin", "a page's result fragments (/ui/...) answer this server's own "
                               "pages only (Sec-Fetch-Site is cross-site)", "cross_site")


class RequestGuard:
    """Refuses requests under a Host not in `allowed_hosts` (None: any), and cross-site
    requests that would change state."""

    def __init__(self, app: ASGIApp, allowed_hosts: frozenset[str] | None) -> None:
        self.app, self.allowed_hosts = app, allowed_hosts
        self._verdicts: dict[bytes, bool] = {}  # by raw Host header: parsing one costs ~1 us

    def _host_allowed(self, host: bytes) -> bool:
        verdict = self._verdicts.get(host)
        if verdict is None:
            if len(self._verdicts) >= 64:  # a client inventing names only undoes the cache
                self._verdicts.clear()
            verdict = self._verdicts[host] = hostname(host.decode("latin-1")) in self.allowed_hosts
        return verdict

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        host = origin = site = None
        for name, value in scope["headers"]:
            if name == b"host":
                host = value
            elif name == b"origin":
                origin = value
            elif name == b"sec-fetch-site":
                site = value
        if self.allowed_hosts is not None and (host is None or not self._host_allowed(host)):
            return await BAD_HOST(scope, receive, send)
        if site == b"cross-site" and scope["path"].startswith("/ui/"):
            return await CROSS_SITE_FRAGMENT(scope, receive, send)  # <img src=/ui/scale?...>: no search
        if scope["method"] not in SAFE_METHODS and (
                site == b"cross-site"
                # "http://host:port" against the Host header; "null" (a sandboxed or file: page)
                # matches nothing. The scheme is not compared: a TLS proxy in front changes it.
                or (origin is not None and origin.partition(b"://")[2].lower() != (host or b"").lower())):
            return await CROSS_SITE(scope, receive, send)
        return await self.app(scope, receive, send)

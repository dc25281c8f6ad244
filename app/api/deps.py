"""What routes take from the running app: its settings, its job store, the bearer check."""

import hmac

from fastapi import Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.api.errors import Unauthorized
from app.config import Settings
from app.jobs.store import Store

# auto_error=False: a missing token is ours to answer (401 in the usual error shape), and
# only when TALLY_API_TOKEN is set. The scheme still appears in the OpenAPI document.
bearer = HTTPBearer(auto_error=False, description="TALLY_API_TOKEN, when the server sets one.")


def settings(request: Request) -> Settings:
    return request.app.state.settings


def store(request: Request) -> Store:
    return request.app.state.store


def require_token(request: Request, credentials: HTTPAuthorizationCredentials | None) -> None:
    token = request.app.state.settings.api_token
    if token is None:
        return
    if credentials is None:
        raise Unauthorized("send Authorization: Bearer <token> (this server sets TALLY_API_TOKEN)")
    if not hmac.compare_digest(credentials.credentials.encode(), token.get_secret_value().encode()):
        raise Unauthorized("the bearer token is not this server's TALLY_API_TOKEN")

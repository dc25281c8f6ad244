"""What routes and pages take from the running app, as Annotated aliases: its settings
(SettingsDep), its job store (StoreDep), and the bearer-token check (Authorized)."""

import hmac
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException

from app.config import Settings

if TYPE_CHECKING:  # its module imports SQLAlchemy and the probes: `tally calc` builds routes without them
    from app.jobs.store import Store

# auto_error=False: a missing token is ours to answer (401 in the usual error shape), and
# only when TALLY_API_TOKEN is set. The scheme still appears in the OpenAPI document.
bearer = HTTPBearer(auto_error=False, description="TALLY_API_TOKEN, when the server sets one.")


class Unauthorized(HTTPException):
    """401, answered in the usual error shape (app/api/errors.py) naming `authorization`."""

    def __init__(self, why: str) -> None:
        super().__init__(401, why, headers={"WWW-Authenticate": "Bearer"})


# async: FastAPI runs a plain `def` dependency in its threadpool, which cost ~100 us a request
# (a thread hand-off each way) for what is an attribute read.
async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def store_of(request: Request) -> "Store":
    return request.app.state.store


async def get_store(request: Request) -> "Store":
    return store_of(request)


SettingsDep = Annotated[Settings, Depends(get_settings)]
StoreDep = Annotated["Store", Depends(get_store)]


def check_token(settings: Settings, token: str | None) -> None:
    """Unauthorized unless TALLY_API_TOKEN is unset or `token` is it (compared in constant time)."""
    if settings.api_token is None:
        return
    if token is None:
        raise Unauthorized("send Authorization: Bearer <token> (this server sets TALLY_API_TOKEN)")
    if not hmac.compare_digest(token.encode(), settings.api_token.get_secret_value().encode()):
        raise Unauthorized("the bearer token is not this server's TALLY_API_TOKEN")


def bearer_token(request: Request) -> str | None:
    """The credentials of an `Authorization: Bearer ...` header, as HTTPBearer reads them; None
    without one."""
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    return credentials.strip() or None if scheme.lower() == "bearer" else None


async def authorize(settings: SettingsDep,
              credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> None:
    check_token(settings, None if credentials is None else credentials.credentials)


Authorized = Annotated[None, Depends(authorize)]
"""A route parameter that answers 401 unless the bearer token is the server's."""

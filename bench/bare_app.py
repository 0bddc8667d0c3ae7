"""The baseline for bench/run.py: a bare Starlette app with one JSON endpoint, no middleware, no database.

Served by the same uvicorn options as callboard (`uvicorn bare_app:app --app-dir bench`), it measures what
the server stack alone costs per request, so callboard's numbers can be read as a fraction of it.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


async def ping(_: Request) -> JSONResponse:
    return JSONResponse({"status": "ok"})


app = Starlette(routes=[Route("/ping", ping, methods=["GET"])])

"""The baselines for bench/run.py: a bare Starlette app, no middleware, no ORM.

Served by the same uvicorn options as callboard (`uvicorn bare_app:app --app-dir bench`), it measures what
the server stack alone costs per request, so callboard's numbers can be read as a fraction of it.

- `GET /ping`: one JSON answer, no database (the floor of a read).
- `POST /write`: parse the JSON body, INSERT one row in a transaction, answer 201 (the floor of a write), on
  the database BENCH_BARE_DATABASE_URL names (the bench's own: a SQLite file in WAL mode through aiosqlite,
  or PostgreSQL through an asyncpg pool), into a table of its own.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

DATABASE_URL = os.environ.get("BENCH_BARE_DATABASE_URL", "")
TABLE = "bench_bare_writes"
_db: dict[str, Any] = {}


async def ping(_: Request) -> JSONResponse:
    return JSONResponse({"status": "ok"})


async def write(request: Request) -> JSONResponse:
    body = json.loads(await request.body())
    row_id, data = uuid.uuid4().hex, json.dumps(body)
    if "sqlite" in _db:
        conn = _db["sqlite"]
        async with _db["lock"]:  # one writer, as SQLite has
            await conn.execute("BEGIN IMMEDIATE")
            await conn.execute(f"INSERT INTO {TABLE} (id, body) VALUES (?, ?)", (row_id, data))
            await conn.commit()
    else:
        async with _db["pool"].acquire() as conn, conn.transaction():
            await conn.execute(f"INSERT INTO {TABLE} (id, body) VALUES ($1, $2)", row_id, data)
    return JSONResponse({"id": row_id}, status_code=201)


@asynccontextmanager
async def lifespan(_: Starlette) -> AsyncIterator[None]:
    create = f"CREATE TABLE IF NOT EXISTS {TABLE} (id TEXT PRIMARY KEY, body TEXT NOT NULL)"
    if DATABASE_URL.startswith("sqlite"):
        import asyncio

        import aiosqlite

        conn = await aiosqlite.connect(DATABASE_URL.split(":///", 1)[1], isolation_level=None)
        await conn.execute("PRAGMA journal_mode=WAL")
        await conn.execute("PRAGMA synchronous=NORMAL")
        await conn.execute(create)
        _db.update(sqlite=conn, lock=asyncio.Lock())
        yield
        await conn.close()
    elif DATABASE_URL:
        import asyncpg

        pool = await asyncpg.create_pool(DATABASE_URL.replace("postgresql+asyncpg://", "postgresql://"))
        await pool.execute(create)
        _db["pool"] = pool
        yield
        await pool.close()
    else:
        yield


app = Starlette(
    routes=[Route("/ping", ping, methods=["GET"]), Route("/write", write, methods=["POST"])],
    lifespan=lifespan,
)

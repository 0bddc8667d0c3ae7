"""What one statement and one unit of work cost in process, on a fresh database (no HTTP, no app):

    .venv/bin/python bench/uow_cost.py                                   # a temporary SQLite file
    .venv/bin/python bench/uow_cost.py postgresql+asyncpg://root@127.0.0.1:5432/<existing empty database>

Prints the CPU per call of a raw `SELECT 1`, a Core select and an ORM entity select inside one session, then
of a whole read and write unit of work (core.uow()) around one select: the difference is what each extra
transaction of a request costs, beside what each extra statement costs.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import select, text

from callboard_core.config import load_settings
from callboard_core.container import Core
from callboard_core.job_types.models import JobType
from callboard_core.seed import migrate_and_seed


async def main(url: str | None) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="callboard-uow-"))
    try:
        settings = load_settings(
            database_url=url or f"sqlite+aiosqlite:///{tmp / 'bench.db'}",
            env="development",
            secret_key="x" * 48,
            var_dir=tmp,
        )
        await migrate_and_seed(settings)
        core = Core.build(settings)
        key = JobType.key == "general"
        n = 2000
        for label, statement in (
            ("raw SELECT 1", text("SELECT 1")),
            ("Core select (one column)", select(JobType.id).where(key)),
            ("ORM entity select", select(JobType).where(key)),
        ):
            async with core.uow(write=False) as uow:
                for _ in range(50):  # warm: compiled cache, connection
                    (await uow.session.execute(statement)).all()
                cpu = time.process_time()
                for _ in range(n):
                    (await uow.session.execute(statement)).all()
                print(f"{label}, inside one session: {(time.process_time() - cpu) / n * 1e6:.0f} us CPU")
        for write in (False, True):
            runs = 500
            cpu = time.process_time()
            for _ in range(runs):
                async with core.uow(write=write) as uow:
                    (await uow.session.execute(select(JobType.id).where(key))).all()
            kind = "write" if write else "read"
            print(
                f"a {kind} unit of work around that select: {(time.process_time() - cpu) / runs * 1e6:.0f} us CPU"
            )
        await core.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else None))

"""Each benchmark's verdicts, written as JSON beside its Markdown report, so `bench/summary.py` can print every
target of `make bench` in one table (target, database, what was measured, PASS/FAIL/info)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class Verdict:
    target: str  # what is checked, with its threshold: "GET /api/v2/agents/me >= 0.6 of bare Starlette"
    database: str  # "sqlite" or "postgres"
    measured: str
    ok: bool | None  # None: shown for information

    @property
    def word(self) -> str:
        return "info" if self.ok is None else "PASS" if self.ok else "FAIL"


def write(path: Path, bench: str, run_at: str, verdicts: list[Verdict]) -> None:
    path.write_text(
        json.dumps({"bench": bench, "run_at": run_at, "verdicts": [asdict(v) for v in verdicts]}, indent=1)
        + "\n"
    )


def read(path: Path) -> tuple[str, str, list[Verdict]]:
    """(bench, run_at, verdicts) of one file written by `write`."""
    data = json.loads(path.read_text())
    return data["bench"], data["run_at"], [Verdict(**v) for v in data["verdicts"]]

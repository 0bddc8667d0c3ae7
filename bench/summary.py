"""Every target of `make bench` in one table: the verdicts the benchmarks wrote beside their reports
(bench/run.py on SQLite and PostgreSQL, bench/money.py on both), one row per target, one column per database,
plus the statement budgets the test suite enforces. Printed, and written to bench/summary.md.

    .venv/bin/python bench/summary.py            # after `make bench` (or any of its benchmarks)

A benchmark that has not run leaves its rows out and is named under the table; the exit code is 0 whether
the targets pass or fail (the benchmarks are reports, not gates).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

from verdicts import Verdict, read  # noqa: E402

SOURCES = {
    "bench/run.py (SQLite)": BENCH_DIR / "results.json",
    "bench/run.py (PostgreSQL)": BENCH_DIR / "results_postgres.json",
    "bench/money.py (both)": BENCH_DIR / "money_results.json",
}
DATABASES = ("sqlite", "postgres")


def table(sources: dict[str, Path]) -> str:
    rows: dict[str, dict[str, Verdict]] = {}
    runs: list[str] = []
    missing: list[str] = []
    for name, path in sources.items():
        if not path.exists():
            missing.append(name)
            continue
        _, run_at, judged = read(path)
        runs.append(f"{name}: {run_at}")
        for v in judged:
            rows.setdefault(v.target, {})[v.database] = v
    lines = ["| Target | SQLite | PostgreSQL |", "|---|---|---|"]
    for target, cells in rows.items():
        shown = [f"{c.measured}: **{c.word}**" if (c := cells.get(db)) else "not run" for db in DATABASES]
        lines.append(f"| {target} | " + " | ".join(shown) + " |")
    budgets = json.loads((BENCH_DIR / "statement_budgets.json").read_text())["budgets"]
    lines.append(
        "| SQL statements per write, counted through the real app (tests/test_statement_budgets.py fails on "
        "any change the budget file does not state) | "
        + " | ".join(
            ", ".join(f"{op} {b[db]}" for op, b in budgets.items()) + ": **enforced**" for db in DATABASES
        )
        + " |"
    )
    verdicts = [v for cells in rows.values() for v in cells.values()]
    failed = sum(v.ok is False for v in verdicts)
    passed = sum(v.ok is True for v in verdicts)
    lines += [
        "",
        f"{passed} PASS, {failed} FAIL, {len(verdicts) - passed - failed} info. Runs: " + "; ".join(runs),
    ]
    if missing:
        lines.append("Not run: " + ", ".join(missing))
    return "\n".join(lines) + "\n"


def main() -> int:
    text = "# callboard benchmark targets (make bench)\n\n" + table(SOURCES)
    (BENCH_DIR / "summary.md").write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())

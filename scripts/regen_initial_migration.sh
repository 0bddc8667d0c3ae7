#!/usr/bin/env bash
# Before the first release only: rebuild migrations/versions/0001_initial.py from the models.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
rm -f migrations/versions/0001_initial.py
.venv/bin/python - "$tmp" <<'PY'
import sys
from alembic import command
from callboard_core.db.migrate import alembic_config
cfg = alembic_config(f"sqlite+aiosqlite:///{sys.argv[1]}/empty.db")
command.revision(cfg, message="initial schema", autogenerate=True, rev_id="0001")
PY
f=$(ls migrations/versions/0001_*.py)
[ "$f" = migrations/versions/0001_initial.py ] || mv "$f" migrations/versions/0001_initial.py
.venv/bin/ruff format -q migrations/versions/0001_initial.py || true
rm -rf "$tmp"
echo "wrote migrations/versions/0001_initial.py"

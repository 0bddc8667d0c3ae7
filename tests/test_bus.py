"""The core's one message bus: one handler table built by Core.build, nothing process-global, a publish on
a session no core opened refused, after-commit handlers only after a commit (and never the caller's error),
every processor fact heard by someone."""

from __future__ import annotations

import ast
import logging
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from callboard_core import bus
from callboard_core.bus import AfterCommit, InTransaction, MessageBus
from callboard_core.container import Core
from callboard_core.ids import new_id
from callboard_core.ledger import service as ledger
from callboard_core.ledger.events import LedgerPosted
from callboard_core.processor.events import ProcessorFact
from callboard_core.processor.translate import TRANSLATORS, fact_of
from tests.conftest import listening, make_user

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("callboard_core", "http_api", "mcp_server")
MUTATORS = {"append", "add", "setdefault", "update", "pop", "remove", "discard", "clear", "extend", "insert"}
# Module state that is not a registry, and why it may stay:
ALLOWED = {
    # The process clock: swapped only by tests (freeze/travel); production never sets it.
    "callboard_core.clock._clock",
    # argon2 parameters by environment (cheap in tests), set by Core.build; the same for every core of a run.
    "callboard_core.security.passwords._hasher",
    # The job history's monotonic sequence: events written in one process read back in the order written.
    "callboard_core.jobs.events._last_seq",
    # Pure memos of discovery previews (each hit checked against its row), bounded; no behaviour hangs on them.
    "callboard_core.jobs.discovery._MEMO",
    "callboard_core.jobs.discovery._JSON",
    # Owners whose paid publishes add up earlier spending, as this process saw them: which lock a first
    # attempt takes; bounded, every answer checked under the lock (a miss costs one more attempt, no rule).
    "callboard_core.payments.service._SUMMING_OWNERS",
    # Requesters whose last publish here was paid: which read a publish's first attempt sends; bounded, a
    # hint of cost only (a miss costs a read, no rule).
    "callboard_core.payments.service._PAYING_REQUESTERS",
    # This process's commits, counted by SQLAlchemy's process-wide events (every engine of the process
    # writes the one database): the read cache's own-commit part of its version, overall and per scope.
    "callboard_core.db.readcache._Commits",
    "callboard_core.db.scopes.OwnCommits",
    # ... and the ones that have landed through the SQLite driver (`Connection.commits_landed`).
    "callboard_core.db.sqlite_driver.Connection",
    # The process's one access-log writer (one stderr), configured once at server start.
    "http_api.request_log.WRITER",
}


def _mutated_module_state(path: Path) -> set[str]:
    """Module-level names that a function rebinds (`global`) or mutates in place (a call of a mutating
    method, an item assignment or deletion)."""
    tree = ast.parse(path.read_text())
    names = set()
    for node in tree.body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        names |= {t.id for t in targets if isinstance(t, ast.Name)}
        if isinstance(node, ast.ClassDef):
            names.add(node.name)
    found = set()
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for n in ast.walk(fn):
            if isinstance(n, ast.Global):
                found.update(n.names)
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in MUTATORS:
                if isinstance(n.func.value, ast.Name):
                    found.add(n.func.value.id)
            elif isinstance(n, ast.Assign | ast.AugAssign | ast.Delete):
                for t in n.targets if isinstance(n, ast.Assign | ast.Delete) else [n.target]:
                    if isinstance(t, ast.Subscript):
                        t = t.value
                    # `name[...] = `, and a module-level class's attribute (`Counter.n += 1`, `C.d[k] = `)
                    while isinstance(t, ast.Attribute):
                        t = t.value
                    if isinstance(t, ast.Name) and t.id != "self":
                        found.add(t.id)
    return found & names


def test_no_module_keeps_a_registry_or_other_mutable_state() -> None:
    found = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            found |= {f"{module}.{name}" for name in _mutated_module_state(path)}
    assert found - ALLOWED == set(), (
        "module state a function changes: put it on the Core (its bus, its ports)"
    )
    assert found >= ALLOWED, "an allowed entry is gone: take it out of ALLOWED"


def test_the_scan_sees_a_registry(tmp_path: Path) -> None:
    sample = tmp_path / "registry.py"
    sample.write_text(
        "_hooks = []\n_seen = {}\n\ndef on(hook):\n    _hooks.append(hook)\n    _seen[hook] = 1\n"
    )
    assert _mutated_module_state(sample) == {"_hooks", "_seen"}
    sample.write_text(
        "class Counts:\n    n = 0\n    by = {}\n\nclass Quiet:\n    n = 0\n\n"
        "def count(key):\n    Counts.n += 1\n    Counts.by[key] = 1\n\n"
        "class Own:\n    def bump(self):\n        self.n = 1\n"
    )
    assert _mutated_module_state(sample) == {"Counts"}  # a class's attributes are module state too


def test_every_processor_fact_and_question_is_heard(core: Core) -> None:
    """Each fact the adapters' events become has a handler in the core's table (none is dropped unheard),
    and every question is answered in the asker's transaction."""
    kinds = set(core.bus.kinds())
    facts = set(ProcessorFact.__subclasses__())
    assert len(facts) == len(TRANSLATORS) and facts <= kinds
    questions = [k for k in kinds if issubclass(k, bus.Question)]
    assert len(questions) >= 4
    for kind in questions:
        assert all(isinstance(h, InTransaction) for h in core.bus.handlers(kind)), kind


def test_an_unknown_processor_event_is_no_fact() -> None:
    from datetime import UTC, datetime

    from callboard_core.processor.port import ProcessorEvent

    event = ProcessorEvent(
        id="evt_1", type="customer.created", data={"id": "cus_1"}, created=datetime.now(UTC)
    )
    assert fact_of(event) is None


async def test_a_session_no_core_opened_cannot_publish(core: Core) -> None:
    user = await make_user(core)
    async with core.db.session(write=True) as session, session.begin():
        with pytest.raises(RuntimeError, match="no message bus"):
            await ledger.top_up(session, user_id=user[0], amount_cents=100, processor_ref="pi_x")


async def test_two_cores_in_one_process_never_cross(core: Core) -> None:
    other = Core.build(core.settings)
    heard: list[str] = []

    async def mine(session: AsyncSession, event: LedgerPosted) -> None:
        heard.append(event.transaction.idempotency_key)

    try:
        user_id, _ = await make_user(core)
        with listening(other, {LedgerPosted: [InTransaction(mine)]}):
            async with core.uow() as uow:
                await ledger.top_up(
                    uow.session, user_id=user_id, amount_cents=100, processor_ref="pi_a", key="a:1"
                )
            assert heard == []
            async with other.uow() as uow:
                await ledger.top_up(
                    uow.session, user_id=user_id, amount_cents=100, processor_ref="pi_b", key="b:1"
                )
            assert heard == ["b:1"]
    finally:
        await other.db.dispose()


async def test_a_failing_after_commit_handler_is_logged_not_raised(
    core: Core, caplog: pytest.LogCaptureFixture
) -> None:
    user_id, _ = await make_user(core)

    async def broken(event: LedgerPosted) -> None:
        raise RuntimeError("the counter is down")

    with (
        listening(core, {LedgerPosted: [AfterCommit(broken)]}),
        caplog.at_level(logging.ERROR, "callboard.bus"),
    ):
        async with core.uow() as uow:
            await ledger.top_up(uow.session, user_id=user_id, amount_cents=250, processor_ref="pi_c")
    assert "the counter is down" in caplog.text
    async with core.uow(write=False) as uow:
        assert (await ledger.balances(uow.session, user_id)).available_cents == 250  # the posting stands


async def test_ask_one_refuses_a_question_nobody_answers(core: Core) -> None:
    from callboard_core.capabilities.service import AgentOfRequester

    bare = MessageBus()
    async with core.uow() as uow:
        with pytest.raises(RuntimeError, match="0 answerers"):
            await bare.ask_one(uow.session, AgentOfRequester(new_id("agt"), new_id("usr")))


async def test_background_work_is_drained(core: Core) -> None:
    done: list[Any] = []

    async def work() -> None:
        done.append(1)

    core.bus.spawn(work())
    await core.bus.drain()
    assert done == [1]


async def test_background_work_queues_behind_a_few_slots_and_a_failure_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A burst (a receipt mail for each of hundreds of top-ups) runs a few at a time, so it cannot take the
    connection pool from the requests; a failing piece is logged, the others still run."""
    import asyncio

    bare = MessageBus()
    running, peak, done = 0, 0, []

    async def piece(i: int) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.001)
        running -= 1
        if i == 3:
            raise RuntimeError("the mail server is down")
        done.append(i)

    with caplog.at_level(logging.ERROR, "callboard.bus"):
        for i in range(40):
            bare.spawn(piece(i))
        await bare.drain()
    assert peak == bus.BACKGROUND_SLOTS and len(done) == 39
    assert "the mail server is down" in caplog.text


async def test_before_commit_work_runs_once_per_key_inside_the_transaction_and_never_after_a_rollback(
    core: Core,
) -> None:
    """Work gathered from several events of one transaction runs once, as its last step, and commits with
    it; a transaction that fails or is discarded runs none of it."""
    from sqlalchemy import func, select

    from callboard_core.mail.models import OutboxMessage

    runs: list[list[str]] = []

    class Gathered:
        def __init__(self) -> None:
            self.parts: list[str] = []

        async def __call__(self, session: AsyncSession) -> None:
            runs.append(self.parts)
            session.add(OutboxMessage(kind="test", to_address="a@example.com", subject="x", body_text="y"))

    async def outbox_rows() -> int:
        async with core.uow(write=False) as uow:
            return int(await uow.session.scalar(select(func.count()).select_from(OutboxMessage)) or 0)

    async with core.uow() as uow:
        for part in ("a", "b"):
            uow.before_commit("gathered", Gathered()).parts.append(part)
    assert runs == [["a", "b"]] and await outbox_rows() == 1

    with pytest.raises(RuntimeError):
        async with core.uow() as uow:
            uow.before_commit("gathered", Gathered()).parts.append("c")
            await uow.session.execute(select(1))
            raise RuntimeError("the action failed")
    async with core.uow() as uow:
        uow.before_commit("gathered", Gathered()).parts.append("d")
        await uow.session.execute(select(1))
        await uow.discard()
    assert runs == [["a", "b"]] and await outbox_rows() == 1

    async def broken(session: AsyncSession) -> None:
        raise RuntimeError("the gathered work failed")

    with pytest.raises(RuntimeError, match="gathered work failed"):
        async with core.uow() as uow:
            uow.session.add(
                OutboxMessage(kind="test", to_address="b@example.com", subject="x", body_text="y")
            )
            uow.before_commit("broken", broken)
    assert await outbox_rows() == 1  # the transaction's own row went with it

"""Mail delivery: a real SMTP server (aiosmtpd) receives the magic link; the outbox row records the outcome."""

from __future__ import annotations

import email
import email.policy
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from callboard_core.container import Core
from callboard_core.mail.models import OutboxMessage
from http_api.app import create_app
from tests.conftest import BASE_URL, Collector, make_settings, make_user
from tests.netutil import free_port


def _smtp_core(core: Core, tmp_root: Path, port: int) -> Core:
    """A second Core on the same (migrated, wiped-after) database, mailing through SMTP."""
    settings = make_settings(
        core.settings.database_url, tmp_root, mail_backend="smtp", smtp_host="127.0.0.1", smtp_port=port
    )
    return Core.build(settings)


@pytest.fixture
async def smtp_core(core: Core, tmp_root: Path, smtp_server: tuple[Collector, int]) -> AsyncIterator[Core]:
    smtp = _smtp_core(core, tmp_root, smtp_server[1])
    try:
        yield smtp
    finally:
        await smtp.mailer.drain()
        await smtp.db.dispose()


async def outbox_rows(core: Core, to: str) -> list[OutboxMessage]:
    async with core.uow(write=False) as uow:
        return list(
            (await uow.session.execute(select(OutboxMessage).where(OutboxMessage.to_address == to))).scalars()
        )


async def ask_for_link(core: Core, address: str) -> httpx.Response:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(core=core)), base_url=BASE_URL
    ) as c:
        return await c.post("/auth/magic-link", json={"email": address})


async def test_magic_link_arrives_over_smtp(core, smtp_core, smtp_server):
    collector, _ = smtp_server
    address = f"smtp{uuid.uuid4().hex[:8]}@example.com"
    await make_user(core, email=address)
    response = await ask_for_link(smtp_core, address)
    assert response.status_code == 202
    await smtp_core.mailer.drain()

    (envelope,) = collector.envelopes
    assert envelope.rcpt_tos == [address]
    message = email.message_from_bytes(
        envelope.original_content or envelope.content, policy=email.policy.default
    )
    assert message["To"] == address
    assert "sign-in link" in message["Subject"]
    text = message.get_body(preferencelist=("plain",)).get_content()  # type: ignore[union-attr]
    assert f"{BASE_URL}/auth/magic?token=" in text
    (row,) = await outbox_rows(core, address)
    assert row.kind == "magic_link"
    assert row.status == "SENT" and row.sent_at is not None and row.error is None


async def test_unreachable_smtp_server_marks_failed(core, tmp_root):
    address = f"down{uuid.uuid4().hex[:8]}@example.com"
    await make_user(core, email=address)
    smtp = _smtp_core(core, tmp_root, free_port())  # nothing listens there
    try:
        assert (await ask_for_link(smtp, address)).status_code == 202
        await smtp.mailer.drain()
    finally:
        await smtp.db.dispose()
    (row,) = await outbox_rows(core, address)
    assert row.status == "FAILED" and row.error


async def test_default_outbox_backend_marks_logged(client, core):
    address = f"log{uuid.uuid4().hex[:8]}@example.com"
    await make_user(core, email=address)
    response = await client.post("/auth/magic-link", json={"email": address})
    assert response.status_code == 202
    await core.mailer.drain()
    (row,) = await outbox_rows(core, address)
    assert row.status == "LOGGED" and row.sent_at is not None
    assert "/auth/magic?token=" in row.body_text

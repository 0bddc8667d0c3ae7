"""The capability taxonomy: public reads, custom tag requests, and staff administration (categories, tags,
merges, request review).

The taxonomy is small and staff-curated, so text search (name, slug and the JSON alias list) runs in
Python over the candidate rows: one behaviour on SQLite and PostgreSQL, Unicode included.

The taxonomy knows nothing of agents (agents depend on it). What a taxonomy change means for the agents that
hold a tag, and whether a requester owns the agent a request names, is asked of the `TagHolders` that the
agents package provides (agents/capability_links.py, registered by `Core.build`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import selectinload

from callboard_core import bus, clock, states
from callboard_core.audit import service as audit
from callboard_core.capabilities import schemas as capability_schemas
from callboard_core.capabilities.models import (
    TAG_REQUEST_MOVES,
    CapabilityCategory,
    CapabilityTag,
    CapabilityTagRequest,
    TagRequestStatus,
    TaxonomyStatus,
)
from callboard_core.db.lookup import reread
from callboard_core.errors import Conflict, NotFound, field_error
from callboard_core.principals import Actor

# A person may keep this many requests waiting for review at once.
MAX_PENDING_PER_USER = 50

_SEPARATORS = re.compile(r"[\s\-_]+")


# --- the holders of tags (agents) -------------------------------------------------------------------


# The taxonomy never imports agents: it asks and tells the tags' holders through the bus (the agents'
# answers are in agents/capability_links.py, wired by callboard_core/handlers.py).


@dataclass(frozen=True)
class AgentOfRequester(bus.Question[None]):
    """A tag request's agent must be the requester's: the answer raises 404 otherwise."""

    agent_id: str
    user_id: str


@dataclass(frozen=True)
class TagRenamed(bus.Event):
    """The holders' copy of the tag's slug follows a rename (in the rename's transaction)."""

    tag_id: str
    slug: str


@dataclass(frozen=True)
class HoldersRepointed(bus.Question[int]):
    """The holders of a merged tag hold its target instead: how many were re-pointed."""

    tag_id: str
    into_tag_id: str
    into_slug: str


# --- text helpers --------------------------------------------------------------------------------


def normalize(text: str) -> str:
    """Lowercase, with runs of whitespace, hyphens and underscores collapsed to one hyphen."""
    return _SEPARATORS.sub("-", text.strip().lower()).strip("-")


def slugify(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:64].strip("-")


def _clean_aliases(aliases: Iterable[str], *, exclude: Iterable[str] = ()) -> list[str]:
    """Lowercase, normalized, without duplicates and without the tag's own slug."""
    skip = {normalize(x) for x in exclude}
    out: list[str] = []
    for alias in aliases:
        value = normalize(alias)
        if value and value not in skip and value not in out:
            out.append(value)
    return out


def _terms(tag: CapabilityTag) -> list[str]:
    return [tag.slug, tag.name.lower(), *(a.lower() for a in tag.aliases or [])]


def _exact(tag: CapabilityTag, normalized: str) -> bool:
    return any(normalize(term) == normalized for term in _terms(tag))


def _matches(tag: CapabilityTag, query: str) -> bool:
    """Case-insensitive substring match on name, slug or an alias (also in the normalized spelling)."""
    q = query.strip().lower()
    n = normalize(q)
    return any(q in term or (n and n in normalize(term)) for term in _terms(tag))


def _category_matches(category: CapabilityCategory, query: str) -> bool:
    q = query.strip().lower()
    n = normalize(q)
    return q in category.name.lower() or bool(n and n in category.slug)


# --- views ---------------------------------------------------------------------------------------


def category_ref(category: CapabilityCategory) -> capability_schemas.CategoryRef:
    return capability_schemas.CategoryRef(id=category.id, slug=category.slug, name=category.name)


def tag_view(
    tag: CapabilityTag, category: CapabilityCategory | None = None
) -> capability_schemas.CapabilityTag:
    category = category or tag.category
    return capability_schemas.CapabilityTag(
        id=tag.id,
        slug=tag.slug,
        name=tag.name,
        description=tag.description,
        category_id=tag.category_id,
        aliases=list(tag.aliases or []),
        sort_order=tag.sort_order,
        featured=tag.featured,
        status=tag.status,
        merged_into_tag_id=tag.merged_into_tag_id,
        category=category_ref(category) if category else None,
    )


def category_view(
    category: CapabilityCategory, tags: Sequence[CapabilityTag] | None = None
) -> capability_schemas.CapabilityCategory:
    return capability_schemas.CapabilityCategory(
        id=category.id,
        slug=category.slug,
        name=category.name,
        description=category.description,
        sort_order=category.sort_order,
        status=category.status,
        tags=None if tags is None else [tag_view(t, category) for t in tags],
    )


def request_view(
    request: CapabilityTagRequest, similar: int | None = None
) -> capability_schemas.CapabilityTagRequest:
    return capability_schemas.CapabilityTagRequest(
        id=request.id,
        raw_text=request.raw_text,
        normalized_text=request.normalized_text,
        suggested_category_id=request.suggested_category_id,
        explanation=request.explanation,
        requested_by_user_id=request.requested_by_user_id,
        agent_id=request.agent_id,
        status=request.status,
        reviewed_by_user_id=request.reviewed_by_user_id,
        resolved_tag_id=request.resolved_tag_id,
        decision_reason=request.decision_reason,
        created_at=request.created_at,
        updated_at=request.updated_at,
        reviewed_at=request.reviewed_at,
        similar_pending_count=similar,
    )


def _tag_order(tag: CapabilityTag) -> tuple[int, str]:
    return tag.sort_order, tag.name.lower()


# --- lookups -------------------------------------------------------------------------------------


async def get_category(
    session: AsyncSession, category_id: str, *, active_only: bool = False
) -> CapabilityCategory:
    category = await session.get(CapabilityCategory, category_id)
    if category is None or (active_only and category.status != TaxonomyStatus.ACTIVE):
        raise NotFound("No such capability category.", code="category_not_found", categoryId=category_id)
    return category


async def get_tag(session: AsyncSession, tag_id: str) -> CapabilityTag:
    tag = await session.get(CapabilityTag, tag_id)
    if tag is None:
        raise NotFound("No such capability tag.", code="tag_not_found", tagId=tag_id)
    return tag


async def tag_id_for(session: AsyncSession, slug: str, *, field: str) -> str:
    """The id of the tag with this slug; an unknown slug is a 422 `unknown_capability` on `field`."""
    tag_id = await session.scalar(select(CapabilityTag.id).where(CapabilityTag.slug == slug))
    if tag_id is None:
        raise field_error(
            field,
            f"'{slug}' is not a capability tag: use a slug of the capability taxonomy.",
            "unknown_capability",
        )
    return str(tag_id)


async def get_request(session: AsyncSession, request_id: str) -> CapabilityTagRequest:
    request = await session.get(CapabilityTagRequest, request_id)
    if request is None:
        raise NotFound("No such tag request.", code="tag_request_not_found", requestId=request_id)
    return request


async def _active_tags(session: AsyncSession) -> list[CapabilityTag]:
    """ACTIVE tags in ACTIVE categories: what the public sees and what matching uses."""
    rows = await session.execute(
        select(CapabilityTag)
        .join(CapabilityTag.category)
        .where(
            CapabilityTag.status == TaxonomyStatus.ACTIVE, CapabilityCategory.status == TaxonomyStatus.ACTIVE
        )
    )
    return list(rows.scalars())


async def find_existing(session: AsyncSession, text: str) -> CapabilityTag | None:
    """The active tag whose slug, name or alias is this text once normalized, if any."""
    normalized = normalize(text)
    for tag in await _active_tags(session):
        if _exact(tag, normalized):
            return tag
    return None


# --- public reads --------------------------------------------------------------------------------


async def _tree(
    session: AsyncSession, query: str | None, *, public: bool
) -> capability_schemas.CapabilityTree:
    stmt = select(CapabilityCategory).options(selectinload(CapabilityCategory.tags))
    if public:
        stmt = stmt.where(CapabilityCategory.status == TaxonomyStatus.ACTIVE)
    categories = sorted((await session.execute(stmt)).scalars(), key=lambda c: (c.sort_order, c.name.lower()))
    out: list[capability_schemas.CapabilityCategory] = []
    for category in categories:
        tags = [t for t in category.tags if not public or t.status == TaxonomyStatus.ACTIVE]
        if query and query.strip() and not _category_matches(category, query):
            tags = [t for t in tags if _matches(t, query)]
            if not tags:
                continue
        out.append(category_view(category, sorted(tags, key=_tag_order)))
    return capability_schemas.CapabilityTree(categories=out)


async def tree(session: AsyncSession, query: str | None = None) -> capability_schemas.CapabilityTree:
    """Active categories with their active (canonical) tags, in sort order; `query` narrows both."""
    return await _tree(session, query, public=True)


def _search(tags: Iterable[CapabilityTag], query: str | None, category_id: str | None) -> list[CapabilityTag]:
    hits = [
        t
        for t in tags
        if (category_id is None or t.category_id == category_id)
        and (not query or not query.strip() or _matches(t, query))
    ]
    normalized = normalize(query or "")

    def key(tag: CapabilityTag) -> tuple[bool, int, int, str]:
        return (
            not (normalized and _exact(tag, normalized)),
            tag.category.sort_order,
            tag.sort_order,
            tag.name.lower(),
        )

    return sorted(hits, key=key)


async def search_tags(
    session: AsyncSession, query: str | None = None, category_id: str | None = None
) -> capability_schemas.TagList:
    """Active tags whose name, slug or an alias contains `query` (case-insensitive); exact hits first."""
    return capability_schemas.TagList(
        tags=[tag_view(t) for t in _search(await _active_tags(session), query, category_id)]
    )


# --- custom tag requests -------------------------------------------------------------------------


async def _pending_counts(session: AsyncSession, normalized: Iterable[str]) -> dict[str, int]:
    texts = sorted(set(normalized))
    if not texts:
        return {}
    rows = await session.execute(
        select(CapabilityTagRequest.normalized_text, func.count())
        .where(
            CapabilityTagRequest.normalized_text.in_(texts),
            CapabilityTagRequest.status == TagRequestStatus.PENDING,
        )
        .group_by(CapabilityTagRequest.normalized_text)
    )
    return {text: int(n) for text, n in rows.all()}


async def _with_similar(
    session: AsyncSession, requests: Sequence[CapabilityTagRequest]
) -> list[capability_schemas.CapabilityTagRequest]:
    counts = await _pending_counts(session, (r.normalized_text for r in requests))
    return [
        request_view(r, counts.get(r.normalized_text, 0) - (1 if r.status == TagRequestStatus.PENDING else 0))
        for r in requests
    ]


async def request_tag(
    session: AsyncSession, actor: Actor, body: capability_schemas.TagRequestCreate
) -> capability_schemas.CapabilityTagRequest:
    """Ask staff for a tag the taxonomy lacks. Not used for matching until reviewed."""
    user_id = actor.require_user()
    normalized = normalize(body.raw_text)
    if not normalized:
        raise field_error("rawText", "Describe the capability in a few words.", "empty")
    existing = await find_existing(session, normalized)
    if existing is not None:
        raise Conflict(
            f"The tag '{existing.slug}' covers this already; use it.",
            code="tag_exists",
            slug=existing.slug,
            tagId=existing.id,
        )
    if body.suggested_category_id is not None:
        await get_category(session, body.suggested_category_id, active_only=True)
    if body.agent_id is not None:
        await bus.ask_one(session, AgentOfRequester(body.agent_id, user_id))
    # Asking twice for the same thing returns the request already waiting.
    mine = (
        await session.execute(
            select(CapabilityTagRequest)
            .where(
                CapabilityTagRequest.requested_by_user_id == user_id,
                CapabilityTagRequest.normalized_text == normalized,
                CapabilityTagRequest.status == TagRequestStatus.PENDING,
            )
            .limit(1)
        )
    ).scalar_one_or_none()
    if mine is None:
        waiting = (
            await session.execute(
                select(func.count())
                .select_from(CapabilityTagRequest)
                .where(
                    CapabilityTagRequest.requested_by_user_id == user_id,
                    CapabilityTagRequest.status == TagRequestStatus.PENDING,
                )
            )
        ).scalar_one()
        if waiting >= MAX_PENDING_PER_USER:
            raise Conflict(
                f"You have {waiting} tag requests waiting for review; wait for some to be reviewed.",
                code="too_many_pending_requests",
                limit=MAX_PENDING_PER_USER,
            )
        mine = CapabilityTagRequest(
            raw_text=body.raw_text,
            normalized_text=normalized,
            suggested_category_id=body.suggested_category_id,
            explanation=body.explanation,
            requested_by_user_id=user_id,
            agent_id=body.agent_id,
            status=TagRequestStatus.PENDING,
        )
        session.add(mine)
        await session.flush()
    return (await _with_similar(session, [mine]))[0]


# --- staff: reads --------------------------------------------------------------------------------


async def admin_tree(session: AsyncSession, query: str | None = None) -> capability_schemas.CapabilityTree:
    """Every category (HIDDEN and DEPRECATED included) with every tag."""
    return await _tree(session, query, public=False)


async def admin_search_tags(
    session: AsyncSession, query: str | None = None, category_id: str | None = None
) -> capability_schemas.TagList:
    tags = (await session.execute(select(CapabilityTag))).scalars()
    return capability_schemas.TagList(tags=[tag_view(t) for t in _search(tags, query, category_id)])


async def list_requests(
    session: AsyncSession, q: capability_schemas.TagRequestQuery
) -> capability_schemas.TagRequestList:
    stmt = select(CapabilityTagRequest)
    if q.status:
        stmt = stmt.where(CapabilityTagRequest.status == q.status)
    if q.query and q.query.strip():
        text = q.query.strip().lower()
        stmt = stmt.where(
            func.lower(CapabilityTagRequest.raw_text).contains(text, autoescape=True)
            | CapabilityTagRequest.normalized_text.contains(normalize(text) or text, autoescape=True)
        )
    stmt = stmt.order_by(CapabilityTagRequest.created_at.desc(), CapabilityTagRequest.id.desc()).limit(
        q.limit
    )
    requests = list((await session.execute(stmt)).scalars())
    return capability_schemas.TagRequestList(requests=await _with_similar(session, requests))


# --- staff: categories ---------------------------------------------------------------------------


def _record(
    session: AsyncSession, actor: Actor, action: str, target_type: str, target_id: str, **data: Any
) -> None:
    audit.by(session, actor, action, target_type, target_id, **data)


async def _flush_unique(session: AsyncSession, message: str, code: str, **details: Any) -> None:
    """Flush; a unique-slug race (two staff creating one slug) becomes a 409, not a 500."""
    try:
        async with session.begin_nested():
            await session.flush()
    except IntegrityError:
        raise Conflict(message, code=code, **details) from None


async def _category_slug_free(session: AsyncSession, slug: str, own_id: str | None = None) -> None:
    found = (
        await session.execute(select(CapabilityCategory.id).where(CapabilityCategory.slug == slug))
    ).scalar()
    if found is not None and found != own_id:
        raise Conflict(
            f"A category with the slug '{slug}' exists already.", code="category_slug_taken", slug=slug
        )


async def _tag_slug_free(session: AsyncSession, slug: str, own_id: str | None = None) -> None:
    found = (await session.execute(select(CapabilityTag.id).where(CapabilityTag.slug == slug))).scalar()
    if found is not None and found != own_id:
        raise Conflict(f"A tag with the slug '{slug}' exists already.", code="tag_slug_taken", slug=slug)


def _derive_slug(explicit: str | None, name: str) -> str:
    slug = explicit or slugify(name)
    if not slug:
        raise field_error("slug", "No slug can be made from this name; pass a slug.", "slug_required")
    return slug


async def create_category(
    session: AsyncSession, actor: Actor, body: capability_schemas.CategoryCreate
) -> capability_schemas.CapabilityCategory:
    slug = _derive_slug(body.slug, body.name)
    await _category_slug_free(session, slug)
    if body.sort_order is None:
        top = (await session.execute(select(func.max(CapabilityCategory.sort_order)))).scalar()
        sort_order = (top or 0) + 10
    else:
        sort_order = body.sort_order
    category = CapabilityCategory(
        slug=slug,
        name=body.name,
        description=body.description,
        sort_order=sort_order,
        status=body.status or TaxonomyStatus.ACTIVE,
    )
    session.add(category)
    await _flush_unique(
        session, f"A category with the slug '{slug}' exists already.", "category_slug_taken", slug=slug
    )
    _record(session, actor, "capability_category.create", "capability_category", category.id, slug=slug)
    return category_view(category, [])


async def update_category(
    session: AsyncSession, actor: Actor, category_id: str, body: capability_schemas.CategoryUpdate
) -> capability_schemas.CapabilityCategory:
    category = await get_category(session, category_id)
    data = body.model_dump(exclude_unset=True)
    if "slug" in data and data["slug"] != category.slug:
        await _category_slug_free(session, data["slug"], category.id)
    before = {k: getattr(category, k) for k in data}
    for field, value in data.items():
        setattr(category, field, value)
    category.updated_at = clock.now()
    await _flush_unique(
        session, "A category with this slug exists already.", "category_slug_taken", slug=data.get("slug")
    )
    _record(
        session,
        actor,
        "capability_category.update",
        "capability_category",
        category.id,
        changes={k: [before[k], v] for k, v in data.items() if before[k] != v},
    )
    tags = (
        await session.execute(select(CapabilityTag).where(CapabilityTag.category_id == category.id))
    ).scalars()
    return category_view(category, sorted(tags, key=_tag_order))


# --- staff: tags ---------------------------------------------------------------------------------


async def _new_tag(
    session: AsyncSession,
    *,
    name: str,
    category: CapabilityCategory,
    slug: str | None,
    description: str | None,
    aliases: Iterable[str] | None,
    sort_order: int | None,
    featured: bool | None,
    status: str | None,
) -> CapabilityTag:
    slug = _derive_slug(slug, name)
    await _tag_slug_free(session, slug)
    if sort_order is None:
        top = (
            await session.execute(
                select(func.max(CapabilityTag.sort_order)).where(CapabilityTag.category_id == category.id)
            )
        ).scalar()
        sort_order = (top or 0) + 10
    tag = CapabilityTag(
        slug=slug,
        name=name,
        description=description,
        category_id=category.id,
        aliases=_clean_aliases(aliases or [], exclude=[slug]),
        sort_order=sort_order,
        featured=bool(featured),
        status=status or TaxonomyStatus.ACTIVE,
    )
    session.add(tag)
    await _flush_unique(session, f"A tag with the slug '{slug}' exists already.", "tag_slug_taken", slug=slug)
    return tag


async def create_tag(
    session: AsyncSession, actor: Actor, body: capability_schemas.TagCreate
) -> capability_schemas.CapabilityTag:
    category = await get_category(session, body.category_id)
    tag = await _new_tag(
        session,
        name=body.name,
        category=category,
        slug=body.slug,
        description=body.description,
        aliases=body.aliases,
        sort_order=body.sort_order,
        featured=body.featured,
        status=body.status,
    )
    _record(
        session,
        actor,
        "capability_tag.create",
        "capability_tag",
        tag.id,
        slug=tag.slug,
        category_id=category.id,
    )
    return tag_view(tag, category)


async def update_tag(
    session: AsyncSession, actor: Actor, tag_id: str, body: capability_schemas.TagUpdate
) -> capability_schemas.CapabilityTag:
    tag = await get_tag(session, tag_id)
    data = body.model_dump(exclude_unset=True)
    category = await get_category(session, data["category_id"]) if "category_id" in data else tag.category
    new_slug = data.get("slug", tag.slug)
    if new_slug != tag.slug:
        await _tag_slug_free(session, new_slug, tag.id)
    if "aliases" in data:
        data["aliases"] = _clean_aliases(data["aliases"], exclude=[new_slug])
    elif new_slug != tag.slug:
        data["aliases"] = _clean_aliases(tag.aliases or [], exclude=[new_slug])
    before = {k: getattr(tag, k) for k in data}
    for field, value in data.items():
        setattr(tag, field, value)
    if "status" in data and data["status"] != TaxonomyStatus.DEPRECATED:
        tag.merged_into_tag_id = None  # reactivated: no longer an alias of another tag
    tag.updated_at = clock.now()
    await _flush_unique(
        session, f"A tag with the slug '{new_slug}' exists already.", "tag_slug_taken", slug=new_slug
    )
    if new_slug != before.get("slug", new_slug):
        # Agents keep the tag; their denormalized slug follows it.
        await bus.publish(session, TagRenamed(tag.id, new_slug))
    _record(
        session,
        actor,
        "capability_tag.update",
        "capability_tag",
        tag.id,
        changes={k: [before[k], v] for k, v in data.items() if before[k] != v},
    )
    return tag_view(tag, category)


async def merge_tag(
    session: AsyncSession, actor: Actor, tag_id: str, into_tag_id: str
) -> capability_schemas.CapabilityTag:
    """Fold a tag into another: it becomes DEPRECATED with mergedIntoTagId, its slug and aliases become
    aliases of the target, and agents holding it hold the target instead (no duplicates). Returns the target."""
    if tag_id == into_tag_id:
        raise field_error("intoTagId", "A tag cannot be merged into itself.", "merge_into_self")
    tag = await get_tag(session, tag_id)
    target = await get_tag(session, into_tag_id)
    if target.status == TaxonomyStatus.DEPRECATED:
        raise Conflict(
            "The target tag is deprecated; merge into a live tag.",
            code="merge_target_deprecated",
            intoTagId=target.id,
            mergedIntoTagId=target.merged_into_tag_id,
        )
    moved = [tag.slug, *(tag.aliases or [])]
    # Compare-and-set: of two merges of one tag, one wins.
    won = (
        await session.execute(
            update(CapabilityTag)
            .where(CapabilityTag.id == tag.id, CapabilityTag.merged_into_tag_id.is_(None))
            .values(status=TaxonomyStatus.DEPRECATED, merged_into_tag_id=target.id, aliases=[])
            .returning(CapabilityTag.id)
            .execution_options(synchronize_session=False)
        )
    ).scalar_one_or_none()
    if won is None:
        raise Conflict(
            "This tag has been merged already.",
            code="tag_already_merged",
            tagId=tag.id,
            mergedIntoTagId=tag.merged_into_tag_id,
        )
    target.aliases = _clean_aliases([*(target.aliases or []), *moved], exclude=[target.slug])
    target.updated_at = clock.now()
    await session.flush()
    repointed = await bus.ask_one(session, HoldersRepointed(tag.id, target.id, target.slug))
    _record(
        session,
        actor,
        "capability_tag.merge",
        "capability_tag",
        tag.id,
        into_tag_id=target.id,
        slug=tag.slug,
        into_slug=target.slug,
        agents_repointed=repointed,
    )
    await reread(session, tag)
    return tag_view(target)


# --- staff: request review -----------------------------------------------------------------------


async def review_request(
    session: AsyncSession, actor: Actor, request_id: str, body: capability_schemas.TagRequestReview
) -> capability_schemas.CapabilityTagRequest:
    request = await get_request(session, request_id)
    states.check(
        TAG_REQUEST_MOVES,
        request.status,
        what="tag request",
        code="tag_request_already_reviewed",
        message="This request has been reviewed already.",
    )
    resolved: CapabilityTag | None = None
    if body.action == "APPROVE_NEW":
        if body.category_id is None:
            raise field_error("categoryId", "APPROVE_NEW needs the category of the new tag.", "required")
        category = await get_category(session, body.category_id)
        name = body.name or request.raw_text.strip()
        resolved = await _new_tag(
            session,
            name=name,
            category=category,
            slug=body.slug or slugify(request.normalized_text),
            description=body.description,
            aliases=body.aliases,
            sort_order=None,
            featured=body.featured,
            status=TaxonomyStatus.ACTIVE,
        )
        status = TagRequestStatus.APPROVED
    elif body.action == "MAP_EXISTING":
        if body.resolved_tag_id is None:
            raise field_error("resolvedTagId", "MAP_EXISTING needs the tag to map to.", "required")
        resolved = await get_tag(session, body.resolved_tag_id)
        if resolved.status == TaxonomyStatus.DEPRECATED:
            raise Conflict(
                "That tag is deprecated; map to a live tag.",
                code="tag_deprecated",
                tagId=resolved.id,
                mergedIntoTagId=resolved.merged_into_tag_id,
            )
        status = TagRequestStatus.MAPPED
    elif body.action == "REJECT":
        status = TagRequestStatus.REJECTED
    else:
        status = TagRequestStatus.NEEDS_CLARIFICATION

    now = clock.now()
    values: dict[str, Any] = dict(
        reviewed_by_user_id=actor.require_user(),
        reviewed_at=now,
        updated_at=now,
        resolved_tag_id=resolved.id if resolved else None,
        decision_reason=body.decision_reason,
    )
    # Compare-and-set on the status this review read: a decision taken meanwhile wins (409).
    await states.move(
        session,
        CapabilityTagRequest,
        request.id,
        TAG_REQUEST_MOVES,
        status,
        CapabilityTagRequest.status == request.status,
        message="This request was reviewed meanwhile.",
        code="tag_request_already_reviewed",
        **values,
    )
    similar = 0
    if body.apply_to_similar:
        similar = len(
            await states.compare_and_set_where(
                session,
                CapabilityTagRequest,
                TAG_REQUEST_MOVES,
                status,
                CapabilityTagRequest.normalized_text == request.normalized_text,
                CapabilityTagRequest.status == TagRequestStatus.PENDING,
                CapabilityTagRequest.id != request.id,
                **values,
            )
        )
    if status == TagRequestStatus.MAPPED and resolved is not None:
        aliases = _clean_aliases(
            [*(resolved.aliases or []), request.normalized_text], exclude=[resolved.slug]
        )
        if aliases != list(resolved.aliases or []):
            resolved.aliases = aliases
            resolved.updated_at = now
            await session.flush()
    _record(
        session,
        actor,
        "capability_request.review",
        "capability_tag_request",
        request.id,
        decision=body.action,
        status=str(status),
        resolved_tag_id=resolved.id if resolved else None,
        applied_to_similar=similar,
    )
    await reread(session, request)
    return (await _with_similar(session, [request]))[0]

"""OpenAI's Conversations API: ``/v1/conversations`` and their items.

A conversation holds items as a response's input and output hold them (messages, function calls and their
outputs, reasoning). ``POST /v1/responses`` with ``conversation`` reads the conversation's items before its input
and, once the answer is finished, adds its input and output items to it. Conversations are kept in the worker's
memory (:mod:`engine.server.conversation_store`), as stored responses are.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from starlette.exceptions import HTTPException

from engine.errors import ConversationNotFound, InvalidRequest
from engine.server.answers import AnswerRoute
from engine.server.api_models import NullAsDefaultBody
from engine.server.conversation_store import ConversationFull
from engine.server.responses_routes import conversations, input_messages, page, with_ids

router = APIRouter(prefix="/v1", route_class=AnswerRoute)

#: Items one request may add, as OpenAI takes them.
MAX_ITEMS_PER_CALL = 20
#: Metadata: pairs, and the characters of a key and of a value (OpenAI's bounds).
METADATA_PAIRS, METADATA_KEY_CHARS, METADATA_VALUE_CHARS = 16, 64, 512


class ConversationBody(NullAsDefaultBody):
    items: list[Any] | None = None
    metadata: dict[str, Any] | None = None


class ConversationUpdate(NullAsDefaultBody):
    metadata: dict[str, Any] | None = None


class ItemsBody(NullAsDefaultBody):
    items: list[Any]


def _metadata(metadata: dict[str, Any] | None) -> dict[str, str]:
    metadata = metadata or {}
    if len(metadata) > METADATA_PAIRS:
        raise InvalidRequest(f"'metadata' may hold at most {METADATA_PAIRS} pairs; it has {len(metadata)}.", param="metadata")
    for key, value in metadata.items():
        if len(key) > METADATA_KEY_CHARS:
            raise InvalidRequest(f"A 'metadata' key may be at most {METADATA_KEY_CHARS} characters long.", param="metadata")
        if not isinstance(value, str) or len(value) > METADATA_VALUE_CHARS:
            raise InvalidRequest(f"Each 'metadata' value must be text of at most {METADATA_VALUE_CHARS} characters.",
                                 param="metadata")  # fmt: skip
    return dict(metadata)


async def _checked_items(request: Request, items: list[Any]) -> list[dict]:
    """The items as the conversation keeps them, each with its id; read as a response would read them first, so
    that one the model could not read is refused now, not when a response uses the conversation."""
    if len(items) > MAX_ITEMS_PER_CALL:
        raise InvalidRequest(f"At most {MAX_ITEMS_PER_CALL} items can be added at once; this request has {len(items)}. "
                             "Add them in several requests.", param="items")  # fmt: skip
    items = [dict(item) if isinstance(item, dict) else item for item in items]
    allow_remote = request.app.state.settings.allow_image_urls
    await asyncio.to_thread(input_messages, items, (), allow_remote, None, "items")  # pictures are read off the loop
    return with_ids(items)


def _full() -> InvalidRequest:
    return InvalidRequest("This conversation is as long as Hearth keeps one; start a new conversation, or delete some "
                          "of its items.", param="items")  # fmt: skip


def _resource(request: Request, cid: str) -> dict:
    found = conversations(request).get(cid)
    if found is None:
        raise ConversationNotFound(cid)
    return found


@router.post("/conversations")
async def create_conversation(request: Request, body: ConversationBody | None = None) -> dict:
    body = body or ConversationBody()
    metadata = _metadata(body.metadata)
    items = await _checked_items(request, body.items or [])
    try:
        return conversations(request).create(items, metadata)
    except ConversationFull as exc:
        raise _full() from exc


@router.get("/conversations/{cid}")
async def get_conversation(request: Request, cid: str) -> dict:
    return _resource(request, cid)


@router.post("/conversations/{cid}")
async def update_conversation(request: Request, cid: str, body: ConversationUpdate) -> dict:
    updated = conversations(request).update(cid, _metadata(body.metadata))
    if updated is None:
        raise ConversationNotFound(cid)
    return updated


@router.delete("/conversations/{cid}")
async def delete_conversation(request: Request, cid: str) -> dict:
    if not conversations(request).delete(cid):
        raise ConversationNotFound(cid)
    return {"id": cid, "object": "conversation.deleted", "deleted": True}


@router.get("/conversations/{cid}/items")
async def list_items(request: Request, cid: str, limit: int = 20, order: str = "desc", after: str | None = None) -> dict:
    items = conversations(request).items(cid)
    if items is None:
        raise ConversationNotFound(cid)
    return page(items, order, limit, after, cid)


@router.post("/conversations/{cid}/items")
async def add_items(request: Request, cid: str, body: ItemsBody) -> dict:
    _resource(request, cid)  # an unknown conversation is a 404 before its items are read
    items = await _checked_items(request, body.items)
    try:
        added = conversations(request).add(cid, items)
    except ConversationFull as exc:
        raise _full() from exc
    if not added:
        raise ConversationNotFound(cid)
    return {
        "object": "list",
        "data": items,
        "first_id": items[0]["id"] if items else None,
        "last_id": items[-1]["id"] if items else None,
        "has_more": False,
    }


@router.get("/conversations/{cid}/items/{iid}")
async def get_item(request: Request, cid: str, iid: str) -> dict:
    items = conversations(request).items(cid)
    if items is None:
        raise ConversationNotFound(cid)
    for item in items:
        if item.get("id") == iid:
            return item
    raise HTTPException(404, f"Conversation '{cid}' has no item with id '{iid}'; list its items to see their ids.")


@router.delete("/conversations/{cid}/items/{iid}")
async def delete_item(request: Request, cid: str, iid: str) -> dict:
    try:
        left = conversations(request).delete_item(cid, iid)
    except KeyError:
        raise HTTPException(404, f"Conversation '{cid}' has no item with id '{iid}'; list its items to see their ids.") from None
    if left is None:
        raise ConversationNotFound(cid)
    return left


__all__ = ["router", "MAX_ITEMS_PER_CALL"]

"""The checkpoint serializer, encoding each message of a session's history once.

Every checkpoint of a session holds its whole message history, and
langgraph-checkpoint-redis encodes each message anew for every checkpoint: LangChain's
``Serializable.to_json`` per message, in Python, which made the write of turn ``n`` cost
``O(n)`` of interpreted work (two thirds of a worker's CPU by turn 300).

:class:`MessageCachingSerializer` produces exactly the bytes of
``JsonPlusRedisSerializer``; while it encodes a checkpoint (:meth:`checkpoint`), the
constructor document of a message it encoded for that thread's previous checkpoint is
reused when it is the same object, unchanged. LangGraph treats state values as immutable,
and a reused entry is checked anyway: each field must still be the very object it was,
and every container field must still have its length. ``to_json`` leaves field values in
the document as they are (not copied), so a nested value changed in place is encoded as it
now is. Pending writes and everything outside a checkpoint are encoded afresh, as
upstream does.

Only the messages of the latest checkpoint of the ``threads`` most recent threads are
kept: the same objects the saver's checkpoint cache already holds.

Reading works the other way round. A worker reads a checkpoint back when another worker
wrote the session's last turn (its own cache is then stale), and upstream revives every
message of the history from its constructor document, one pydantic model at a time.
:meth:`MessageCachingSerializer._revive_if_needed` keeps the messages it revived (or
encoded) by a digest of their document: a document seen before gives back the same
message object, if it is unchanged since (the same check as above). Messages this
serializer encoded are kept the same way, by the digest of the document it wrote. Only
the latest ``messages`` documents are kept.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson
from langchain_core.messages import BaseMessage
from langgraph.checkpoint.redis.jsonplus_redis import JsonPlusRedisSerializer

_Fingerprint = tuple[tuple[str, int, int], ...]
_Entry = tuple[BaseMessage, _Fingerprint, Any]


def _fingerprint(message: BaseMessage) -> _Fingerprint:
    """Each field's identity, and the length of each container field."""
    return tuple(
        (name, id(value), len(value) if isinstance(value, list | dict) else -1)
        for name, value in message.__dict__.items()
    )


def _digest(document: Any) -> bytes:
    return hashlib.blake2b(
        orjson.dumps(document, option=orjson.OPT_SORT_KEYS), digest_size=16
    ).digest()


def _is_message_document(document: dict[str, Any]) -> bool:
    path = document.get("id")
    return (
        document.get("type") == "constructor"
        and isinstance(path, list)
        and len(path) > 1
        and path[0] in ("langchain", "langchain_core")
        and isinstance(path[-1], str)
        and path[-1].endswith("Message")
    )


class MessageCachingSerializer(JsonPlusRedisSerializer):
    def __init__(
        self, *args: Any, threads: int = 512, messages: int = 20_000, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self._threads = threads
        self._messages = messages
        self._revived: OrderedDict[bytes, tuple[BaseMessage, _Fingerprint]] = OrderedDict()
        self._previous: OrderedDict[str, dict[int, _Entry]] = OrderedDict()
        self._current: dict[int, _Entry] | None = None
        self._reusable: dict[int, _Entry] = {}

    @contextmanager
    def checkpoint(self, thread_id: str) -> Iterator[None]:
        """Encode one checkpoint of ``thread_id``: reuse what its previous one encoded."""
        self._reusable = self._previous.pop(thread_id, {})
        self._current = {}
        try:
            yield
            self._previous[thread_id] = self._current
            while len(self._previous) > self._threads:
                self._previous.popitem(last=False)
        finally:
            self._current = None
            self._reusable = {}

    def forget(self, thread_id: str) -> None:
        self._previous.pop(thread_id, None)

    def _default_handler(self, obj: Any) -> Any:
        current = self._current
        if current is None or not isinstance(obj, BaseMessage):
            return super()._default_handler(obj)
        key = id(obj)
        fingerprint = _fingerprint(obj)
        entry = self._reusable.get(key)
        if entry is None or entry[0] is not obj or entry[1] != fingerprint:
            entry = (obj, fingerprint, super()._default_handler(obj))
            self._keep_revived(entry[2], obj, fingerprint)
        current[key] = entry
        return entry[2]

    def _revive_if_needed(self, obj: Any) -> Any:
        if not (isinstance(obj, dict) and obj.get("lc") in (1, 2) and _is_message_document(obj)):
            return super()._revive_if_needed(obj)
        key = _digest(obj)
        kept = self._revived.get(key)
        if kept is not None and _fingerprint(kept[0]) == kept[1]:
            self._revived.move_to_end(key)
            return kept[0]
        message = super()._revive_if_needed(obj)
        if isinstance(message, BaseMessage):
            self._keep(key, message, _fingerprint(message))
        return message

    def _keep_revived(self, document: Any, message: BaseMessage, fingerprint: _Fingerprint) -> None:
        """A message just encoded: reading its document back gives this object."""
        try:
            key = _digest(document)
        except TypeError:  # a field orjson cannot encode by itself: never looked up
            return
        self._keep(key, message, fingerprint)

    def _keep(self, key: bytes, message: BaseMessage, fingerprint: _Fingerprint) -> None:
        self._revived[key] = (message, fingerprint)
        self._revived.move_to_end(key)
        while len(self._revived) > self._messages:
            self._revived.popitem(last=False)

    def _preprocess_redis_json(self, obj: Any, **kwargs: Any) -> Any:
        # A message is none of the types this walk rewrites: it is returned as it is
        # (and encoded by ``_default_handler``), without the upstream chain of checks.
        if isinstance(obj, BaseMessage):
            return obj
        return super()._preprocess_redis_json(obj, **kwargs)

"""The upstream internals this project leans on are still the ones it was written against.

Three libraries are used below their public surface, and each is pinned exactly in
pyproject.toml for that reason:

- langgraph-checkpoint-redis: ``workers.checkpoints.FencedRedisSaver`` rebuilds the
  documents ``AsyncRedisSaver.aput`` / ``aput_writes`` write (through the saver's own
  private helpers) and hands them to a fenced script; ``workers.pruning`` and
  ``wire.keys`` name the library's keys.
- kombu: ``wire.kombu_transport`` reuses a channel's client through ``_create_client``;
  ``workers.intake`` wraps ``_brpop_read``.
- celery: ``wire.run_envelope`` writes protocol 2 envelopes by hand
  (``tests/test_transport.py`` compares them field by field with Celery's own).

A bump of one of these pins that changes what we copied or call fails here, naming the
member, instead of somewhere far away (a checkpoint that no longer loads, a consumer that
stops reading). To take a new version: read the named upstream code, adapt ours, then
update the digest or signature below.
"""

from __future__ import annotations

import hashlib
import inspect
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kombu.transport.redis as kombu_redis
import pytest
from langgraph.checkpoint.redis.aio import AsyncRedisSaver
from langgraph.checkpoint.redis.key_registry import CheckpointKeyRegistry
from langgraph.checkpoint.redis.util import to_storage_safe_id

from wire.keys import Keys

ROOT = Path(__file__).resolve().parent.parent

PINNED = ("langgraph-checkpoint-redis", "kombu", "celery")
"""The distributions whose private members are used: each must be pinned with ``==``."""

COPIED: dict[str, tuple[Callable[..., Any], str]] = {
    # What FencedRedisSaver mirrors: a change here means its documents may differ now.
    "AsyncRedisSaver.aput": (AsyncRedisSaver.aput, "d0737df1d092f450"),
    "AsyncRedisSaver.aput_writes": (AsyncRedisSaver.aput_writes, "9faf89799f1d1002"),
    "AsyncRedisSaver._dump_checkpoint": (AsyncRedisSaver._dump_checkpoint, "68862e1b6b538efb"),
    "AsyncRedisSaver._dump_metadata": (AsyncRedisSaver._dump_metadata, "8e9c09cf05d0caf6"),
    "AsyncRedisSaver._encode_blob": (AsyncRedisSaver._encode_blob, "689a6f5599e2519a"),
    "AsyncRedisSaver._make_redis_checkpoint_key": (
        AsyncRedisSaver._make_redis_checkpoint_key,
        "21664e3d6291d10e",
    ),
    "AsyncRedisSaver._make_redis_checkpoint_key_cached": (
        AsyncRedisSaver._make_redis_checkpoint_key_cached,
        "7978e5662b616daa",
    ),
    "AsyncRedisSaver._make_redis_checkpoint_latest_key": (
        AsyncRedisSaver._make_redis_checkpoint_latest_key,
        "04ad195f20a7363c",
    ),
    "AsyncRedisSaver._make_redis_checkpoint_writes_key_cached": (
        AsyncRedisSaver._make_redis_checkpoint_writes_key_cached,
        "6594665e24c9cec3",
    ),
    # What the kombu transport calls and wraps.
    "kombu Channel._create_client": (kombu_redis.Channel._create_client, "dae92bc4075dafb9"),
    "kombu Channel._brpop_read": (kombu_redis.Channel._brpop_read, "c42518699709f2df"),
}


def _digest(function: Callable[..., Any]) -> str:
    return hashlib.sha256(inspect.getsource(function).encode()).hexdigest()[:16]


def _requirements() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found: dict[str, str] = {}
    for requirement in project["dependencies"]:
        name = requirement.split("[")[0].split("=")[0].split(">")[0].split("<")[0].strip()
        found[name] = requirement
    return found


@pytest.mark.parametrize("distribution", PINNED)
def test_each_library_used_below_its_surface_is_pinned_exactly(distribution: str) -> None:
    requirement = _requirements().get(distribution)
    assert requirement is not None, f"{distribution} is not a declared dependency"
    assert "==" in requirement, (
        f"{requirement!r}: this project uses private members of {distribution}; pin it "
        "with == and move the pin only together with tests/test_upstream_drift.py"
    )


@pytest.mark.parametrize("member", sorted(COPIED))
def test_the_upstream_code_we_copy_or_call_is_unchanged(member: str) -> None:
    function, recorded = COPIED[member]
    assert _digest(function) == recorded, (
        f"upstream {member} changed (source digest {_digest(function)}, recorded "
        f"{recorded}): read it, adapt what this project builds on it (see this module's "
        "docstring), then record the new digest"
    )


def test_the_key_names_we_build_are_the_savers_own() -> None:
    keys = Keys("drift")
    # Built with its default prefixes, as the workers build theirs; nothing connects.
    saver = AsyncRedisSaver(redis_url="redis://127.0.0.1:1/0")
    thread = to_storage_safe_id(keys.thread_id("s1"))
    assert keys.checkpoint_latest("s1") == saver._make_redis_checkpoint_latest_key(
        thread, "__empty__"
    )
    checkpoint = saver._make_redis_checkpoint_key(thread, "__empty__", "c1")
    assert checkpoint.startswith(f"checkpoint:{thread}:__empty__:")  # as workers.pruning
    registry = CheckpointKeyRegistry.make_write_keys_zset_key(thread, "__empty__", "c1")
    assert registry.startswith(f"write_keys_zset:{thread}:__empty__:")

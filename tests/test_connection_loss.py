"""Which errors of a turn count as a lost Redis connection (resumed, not Failed)."""

from __future__ import annotations

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redisvl.exceptions import RedisSearchError

from wire.backoff import connection_lost


def _raised_from(error: BaseException, cause: BaseException) -> BaseException:
    try:
        raise error from cause
    except BaseException as raised:
        return raised


def test_a_checkpoint_search_cut_by_a_redis_restart_is_a_lost_connection() -> None:
    """Seen in the soak: a Redis restart during a turn's checkpoint search reached the
    run as redisvl's ``RedisSearchError`` raised from the ``ConnectionError``; the task
    ended Failed instead of resuming."""
    refused = RedisConnectionError("Error 111 connecting to 127.0.0.1:6379.")
    assert connection_lost(refused)
    assert connection_lost(_raised_from(RedisSearchError("Error while searching"), refused))


def test_other_errors_are_not() -> None:
    assert not connection_lost(None)
    assert not connection_lost(ResponseError("WRONGTYPE"))
    assert not connection_lost(_raised_from(RedisSearchError("bad query"), ValueError("x")))

"""Which broker queue a task runs on, and which queues a deployment has: the one rule.

A profile may name its queue (``AgentProfile.queue``); one that names none runs on the
deployment's ``AHP_QUEUE``. The caller records the queue in the task record when it
starts the task (``start_task.lua``), and every later message of that task goes to the
queue its record names: the first publish, the resume after an approval, the promotion
of a task queued behind another, and every republish by a sweeper (a hand-back, a lost
worker, a start taken and never claimed). A worker serves the queues it was given
(``ahp-celery worker --queues``, ``AHP_WORKER_QUEUES``; default ``AHP_QUEUE``) and its
sweeper judges unclaimed starts of those queues only. A task whose queue no worker
serves waits on that queue.

Queue names follow the id rule of ``wire.keys`` (they name kombu's Redis lists, and the
record's field is compared by the scripts), so one name is one list, never two.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from .queue_names import QUEUE_RULE, parse_queues, require_queue_name

if TYPE_CHECKING:
    from .profiles import AgentProfile
    from .settings import Settings


def queue_of(profile: AgentProfile, settings: Settings) -> str:
    """The queue a task of ``profile`` is started on: the profile's, else ``AHP_QUEUE``."""
    return profile.queue if profile.queue is not None else settings.queue


def deployment_queues(settings: Settings, profiles: Mapping[str, AgentProfile]) -> tuple[str, ...]:
    """Every queue the deployment's tasks may run on: ``AHP_QUEUE`` first, then each
    queue a profile of ``profiles`` names, in registry order, each once."""
    return _unique((settings.queue, *(queue_of(p, settings) for p in profiles.values())))


def served_queues(settings: Settings) -> tuple[str, ...]:
    """The queues a worker of ``settings`` serves by default: ``AHP_WORKER_QUEUES``, or
    ``AHP_QUEUE`` when that is unset."""
    return parse_queues(settings.worker_queues) or (settings.queue,)


def _unique(names: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))


__all__ = [
    "QUEUE_RULE",
    "deployment_queues",
    "parse_queues",
    "queue_of",
    "require_queue_name",
    "served_queues",
]

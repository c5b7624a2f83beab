"""The outcomes a task gets when its worker is lost, as the deployment declares them."""

from __future__ import annotations

from agent_harness_protocol import Failed, FailureKind, TaskId, Unresolved, UnresolvedReason

from wire.codec import dumps, outcome_to_json
from wire.settings import Settings, WorkerLossPolicy
from wire.store import LossPolicy


def loss_policy(settings: Settings, task: TaskId) -> LossPolicy:
    lost = Unresolved(
        task,
        UnresolvedReason.OBSERVATION_LOST,
        "the worker running this task was lost; whether its work finished is unknown",
    )
    exhausted = Failed(
        task,
        FailureKind.UNKNOWN,
        f"the worker running this task was lost {settings.max_deliveries} times "
        "(max_deliveries); it is not run again",
    )
    return LossPolicy(
        resume=settings.on_worker_loss is WorkerLossPolicy.RESUME,
        max_deliveries=settings.max_deliveries,
        lost_outcome=dumps(outcome_to_json(lost)),
        exhausted_outcome=dumps(outcome_to_json(exhausted)),
    )


__all__ = ["loss_policy"]

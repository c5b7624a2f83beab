"""One-request runs: ``POST /v1/tasks`` and ``POST /v1/tasks/stream``.

A run creates a single-task session and starts the task in it; the step that settles the
task releases the session. Observations: the model boundary (where the model runs), the
keys in Redis, and what the API answers.
"""

from __future__ import annotations

import redis

from harness.transport import PublishError, TaskPublisher, classify
from wire.keys import Keys
from wire.settings import Settings

from .support.api import (
    api_harness,
    auth,
    in_process,
    keyspace,
    live_server,
    post_stream,
    problem_of,
    read_events,
)
from .support.boundary import ModelBoundary
from .support.start_control import StartBoundary
from .support.waiting import wait_for


def _session_keys(client: redis.Redis, settings: Settings) -> set[str]:
    prefix = Keys(settings.namespace).session("")
    return {str(key) for key in client.scan_iter(match=f"{prefix}*", count=1000)}


def _named(client: redis.Redis, ident: str) -> set[str]:
    return {
        str(key)
        for key in client.scan_iter(match=f"*{ident}*", count=1000)
        if not str(key).startswith("ahp-test:")
    }


async def test_run_and_stream_sends_the_task_and_its_events_then_its_session_is_gone(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    async with in_process(api_harness(settings, boundary, profile="slow")) as client:
        async with client.stream(
            "POST",
            "/v1/tasks/stream",
            json={"input": "run and stream", "instructions": "Answer in one word."},
            headers=auth(),
        ) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            streamed = await read_events(response)
        created, rest = streamed[0], streamed[1:]
        assert (created.event, created.id) == ("task_created", "0-0")
        task_id, session_id = created.data["id"], created.data["session_id"]
        assert response.headers["location"] == f"/v1/tasks/{task_id}"
        assert rest[0].event == "task_started"
        assert rest[-1].event == "task_completed"
        deltas = [event.data["text"] for event in rest if event.event == "message_delta"]
        assert deltas == [f"chunk{index} " for index in range(20)] + ["native-result"]
        # The model ran it once, with the instructions and the input.
        calls = boundary.calls()
        assert [call["task"] for call in calls] == [task_id]
        assert "Answer in one word." in str(calls[0]["texts"])
        assert "run and stream" in str(calls[0]["texts"])
        # The session ended with its task: nothing of it is left, the task stays readable.
        await wait_for(lambda: not _named(sync_redis, session_id))
        gone = await client.get(f"/v1/sessions/{session_id}", headers=auth())
        assert gone.status_code == 404
        task = await client.get(f"/v1/tasks/{task_id}", headers=auth())
        assert task.json()["state"] == "completed"
        # Its events resume like any task's.
        async with client.stream(
            "GET",
            f"/v1/tasks/{task_id}/events",
            headers={**auth(), "Last-Event-ID": streamed[3].id},
        ) as again:
            resumed = await read_events(again)
        assert [e.id for e in resumed] == [e.id for e in streamed[4:]]


async def test_run_and_wait_answers_the_settled_task(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    async with in_process(api_harness(settings, boundary)) as client:
        reply = await client.post(
            "/v1/tasks", json={"input": "run and wait"}, params={"wait": 30}, headers=auth()
        )
        assert reply.status_code == 201, reply.text
        body = reply.json()
        assert reply.headers["location"] == f"/v1/tasks/{body['id']}"
        assert body["state"] == "completed"
        assert body["outcome"]["type"] == "completed"
        assert body["outcome"]["output"]["text"] == "native-result"
        assert [call["task"] for call in boundary.calls()] == [body["id"]]
        await wait_for(lambda: not _named(sync_redis, body["session_id"]))
        # Another tenant sees the task as unknown.
        other = await client.get(f"/v1/tasks/{body['id']}", headers=auth("beta"))
        assert other.status_code == 404
        # Its session takes no second task: it is gone.
        again = await client.post(
            f"/v1/sessions/{body['session_id']}/tasks", json={"input": "x"}, headers=auth()
        )
        assert again.status_code == 404


async def test_a_run_that_keeps_its_session_leaves_it_open_for_more_tasks(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    async with in_process(api_harness(settings, boundary)) as client:
        # The session and its first task in one request, streamed.
        streamed = await post_stream(
            client, "/v1/tasks/stream", {"input": "first turn", "on_completion": "keep"}
        )
        assert streamed[0].event == "task_created"
        assert streamed[-1].event == "task_completed"
        first, session_id = streamed[0].data["id"], streamed[0].data["session_id"]
        # Settled, the session is still there, open, and only for its tenant.
        session = await client.get(f"/v1/sessions/{session_id}", headers=auth())
        assert session.status_code == 200, session.text
        assert (session.json()["closed"], session.json()["active_task_id"]) == (False, None)
        assert _named(sync_redis, session_id)
        other = await client.get(f"/v1/sessions/{session_id}", headers=auth("beta"))
        assert other.status_code == 404
        # A second task runs in it, on the same context: the model sees the first turn.
        second = await client.post(
            f"/v1/sessions/{session_id}/tasks",
            json={"input": "second turn"},
            params={"wait": 30},
            headers=auth(),
        )
        assert second.status_code == 201, second.text
        assert second.json()["outcome"]["type"] == "completed"
        calls = boundary.calls()
        assert [call["task"] for call in calls] == [first, second.json()["id"]]
        assert "first turn" in str(calls[1]["texts"])
        # The waiting form keeps its session too.
        waited = await client.post(
            "/v1/tasks",
            json={"input": "kept and waited", "on_completion": "keep"},
            params={"wait": 30},
            headers=auth(),
        )
        assert waited.status_code == 201, waited.text
        assert waited.json()["outcome"]["type"] == "completed"
        kept = waited.json()["session_id"]
        assert (await client.get(f"/v1/sessions/{kept}", headers=auth())).status_code == 200
        # Released like any session: then nothing of it is left.
        for ident in (session_id, kept):
            released = await client.delete(f"/v1/sessions/{ident}", headers=auth())
            assert released.status_code in (200, 204), released.text
            await wait_for(lambda ident=ident: not _named(sync_redis, ident))


async def test_a_second_task_in_a_runs_session_is_refused_while_it_runs(
    settings: Settings, boundary: ModelBoundary
) -> None:
    async with in_process(api_harness(settings, boundary)) as client:
        boundary.hold()
        run = await client.post("/v1/tasks", json={"input": "hold"}, headers=auth())
        assert run.status_code == 201
        session_id = run.json()["session_id"]
        await wait_for(lambda: boundary.in_flight() == 1)
        for policy in ("reject", "enqueue"):
            second = await client.post(
                f"/v1/sessions/{session_id}/tasks",
                json={"input": "second", "if_busy": policy},
                headers=auth(),
            )
            assert second.status_code == 409, second.text
            assert "takes one task" in problem_of(second)["detail"]
        boundary.release()
        assert [str(call["texts"][-1]) for call in boundary.calls()] == ["hold"]  # type: ignore[index]


async def test_refused_runs_write_nothing(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    async with in_process(api_harness(settings, boundary)) as client:
        before = keyspace(sync_redis)
        refusals = {
            "idempotency": (
                {"input": "x"},
                {"Idempotency-Key": "k-1"},
                422,
                "header.Idempotency-Key",
            ),
            "input": ({"input": "x" * 600_000}, {}, 413, "body.input"),
            "instructions": (
                {"input": "x", "instructions": "i" * 300_000},
                {},
                413,
                "body.instructions",
            ),
            "tool": ({"input": "x", "tools": ["no_such_tool"]}, {}, 422, None),
            "if_busy": ({"input": "x", "if_busy": "enqueue"}, {}, 422, "body.if_busy"),
            "webhook": (
                {"input": "x", "webhook": {"url": "http://evil.example/hook"}},
                {},
                422,
                None,
            ),
            "empty": ({"input": ""}, {}, 422, "body.input"),
            "on_completion": (
                {"input": "x", "on_completion": "forever"},
                {},
                422,
                "body.on_completion",
            ),
        }
        for name, (body, headers, status, path) in refusals.items():
            for route in ("/v1/tasks", "/v1/tasks/stream"):
                reply = await client.post(route, json=body, headers={**auth(), **headers})
                assert reply.status_code == status, (name, route, reply.text)
                problem = problem_of(reply)
                if path is not None:
                    assert path in str(problem), (name, problem)
        unauthenticated = await client.post("/v1/tasks", json={"input": "x"})
        assert unauthenticated.status_code == 401
        assert keyspace(sync_redis) == before
    assert boundary.calls() == []


async def test_a_run_the_broker_refused_leaves_no_session(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    starts = StartBoundary()
    harness = api_harness(settings, boundary, publisher_factory=starts.publisher)
    async with in_process(harness) as client:
        sessions_before = _session_keys(sync_redis, settings)
        starts.reject_before_delivery("broker down")
        refused = await client.post("/v1/tasks", json={"input": "refused"}, headers=auth())
        assert refused.status_code == 503
        assert problem_of(refused)["retry"] == "safe"
        assert _session_keys(sync_redis, settings) == sessions_before
        repeated = await client.post(
            "/v1/tasks", json={"input": "refused"}, params={"wait": 30}, headers=auth()
        )
        assert repeated.json()["state"] == "completed"
    assert [call["task"] for call in boundary.calls()] == [repeated.json()["id"]]


async def test_an_unconfirmed_run_names_its_task_and_leaves_no_session(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    starts = StartBoundary()
    harness = api_harness(settings, boundary, publisher_factory=starts.publisher)
    async with in_process(harness) as client:
        starts.lose_acceptance_acknowledgement(True)
        unconfirmed = await client.post("/v1/tasks", json={"input": "maybe"}, headers=auth())
        assert unconfirmed.status_code == 503
        body = problem_of(unconfirmed)
        assert body["type"].endswith("/start-unconfirmed")
        assert body["retry"] == "unsafe"
        task_id, session_id = body["task_id"], body["session_id"]
        # The task settles (cancelled if no worker claimed it before the release, else
        # however its run ended) and nothing of its session is left.
        fate = await client.get(f"/v1/tasks/{task_id}", params={"wait": 30}, headers=auth())
        assert fate.json()["state"] in {"cancelled", "completed"}, fate.text
        await wait_for(lambda: not _named(sync_redis, session_id))
    assert len([c for c in boundary.calls() if c["task"] == task_id]) <= 1


class _ClaimedThenLost:
    """A publisher whose message reaches the broker and is claimed by a worker (its
    model call is under way) before the acknowledgement is lost: the start is
    unconfirmed although the task runs."""

    def __init__(self, settings: Settings, boundary: ModelBoundary) -> None:
        self._real = TaskPublisher(settings)
        self._boundary = boundary

    async def publish(
        self, task_id: str, session_id: str | None = None, queue: str | None = None
    ) -> None:
        await self._real.publish(task_id, session_id, queue)
        await wait_for(lambda: self._boundary.calls_for(task_id))
        error = ConnectionResetError("connection reset before the acknowledgement arrived")
        raise PublishError(classify(error), error)

    async def revoke(self, task_id: str) -> None:
        await self._real.revoke(task_id)

    def close(self) -> None:
        self._real.close()


async def test_an_unconfirmed_run_already_running_is_stopped_not_cut_off(
    settings: Settings, boundary: ModelBoundary, sync_redis: redis.Redis
) -> None:
    """The release of the run's session after its unconfirmed start stops the running
    task within the cleanup budget (Cancelled, seen by the model as a cancellation),
    instead of taking its lease mid-run (which left it Unresolved, observation lost)."""
    boundary.hold()
    harness = api_harness(
        settings, boundary, publisher_factory=lambda s: _ClaimedThenLost(s, boundary)
    )
    async with in_process(harness) as client:
        unconfirmed = await client.post("/v1/tasks", json={"input": "running"}, headers=auth())
        assert unconfirmed.status_code == 503
        body = problem_of(unconfirmed)
        assert body["type"].endswith("/start-unconfirmed")
        task_id, session_id = body["task_id"], body["session_id"]
        fate = await client.get(f"/v1/tasks/{task_id}", params={"wait": 30}, headers=auth())
        assert fate.json()["state"] == "cancelled", fate.text
        assert boundary.was_cancelled(task_id)
        boundary.release()
        await wait_for(lambda: not _named(sync_redis, session_id))


async def test_a_run_served_by_uvicorn_streams_to_its_end(
    settings: Settings, boundary: ModelBoundary
) -> None:
    import httpx

    with live_server(api_harness(settings, boundary)) as server:
        async with (
            httpx.AsyncClient(base_url=server.url, timeout=60) as client,
            client.stream(
                "POST", "/v1/tasks/stream", json={"input": "over the wire"}, headers=auth()
            ) as response,
        ):
            streamed = await read_events(response)
            # A run that keeps its session: its next task streams in the same session.
            kept = await post_stream(
                client, "/v1/tasks/stream", {"input": "keep it", "on_completion": "keep"}
            )
            session_id = kept[0].data["session_id"]
            again = await post_stream(
                client, f"/v1/sessions/{session_id}/tasks/stream", {"input": "again"}
            )
            released = await client.delete(f"/v1/sessions/{session_id}", headers=auth())
    assert streamed[0].event == "task_created"
    assert streamed[-1].event == "task_completed"
    assert streamed[-1].data["outcome"]["output"]["text"] == "native-result"
    assert [kept[-1].event, again[-1].event] == ["task_completed", "task_completed"]
    assert again[0].data["session_id"] == session_id
    assert released.status_code in (200, 204), released.text

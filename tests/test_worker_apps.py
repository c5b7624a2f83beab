"""Each deployment's Celery app runs its own task function, also beside another app."""

from __future__ import annotations

from uuid import uuid4

import pytest

from wire.celery_config import RUN_TASK
from wire.settings import Settings
from workers.celery_app import create_app


def test_two_deployments_in_one_process_each_run_their_own_task(settings: Settings) -> None:
    """Importing ``workers.main`` (as ``celery -A workers.main`` and the compose check do)
    beside a test's or an embedder's own app must not hand the second app the first
    app's function: it would refuse every message of its own deployment."""
    first, second = (
        settings.model_copy(update={"namespace": f"apps-{uuid4().hex[:8]}"}) for _ in range(2)
    )
    apps = [create_app(first), create_app(second)]
    for app, own in zip(apps, (first, second), strict=True):
        task = app.tasks[RUN_TASK]
        with pytest.raises(ValueError, match=f"a worker of '{own.namespace}'"):
            task.run(namespace="elsewhere", task_id=uuid4().hex)


def test_the_broker_url_in_the_worker_banner_shows_a_mask_only_for_a_password() -> None:
    """kombu masks a password that is not there (``redis://:**@host``); the workers'
    connection shows the mask only when the URL has one."""
    for url, shown in (
        ("redis://127.0.0.1:6390/0", "redis-guarded://127.0.0.1:6390/0"),
        ("redis://user@127.0.0.1:6390/0", "redis-guarded://user@127.0.0.1:6390/0"),
        ("redis://:s3cret@127.0.0.1:6390/0", "redis-guarded://:**@127.0.0.1:6390/0"),
    ):
        app = create_app(Settings(redis_url=url))
        assert app.connection().as_uri() == shown, url
        assert "s3cret" not in app.connection_for_write().as_uri()

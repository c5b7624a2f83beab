"""Worker processes of one deployment, as the fault tests break and replace them."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from uuid import uuid4

from tooling.worker_process import Pool as WorkerPool
from tooling.worker_process import WorkerProcess
from wire.settings import Settings


def fault_settings(settings: Settings, **changes: object) -> Settings:
    """A deployment of its own (namespace and queue) beside the session's, with a short
    lease and a quick sweeper: a lost worker's task is taken over within seconds."""
    suffix = uuid4().hex[:6]
    update: dict[str, object] = {
        "namespace": f"{settings.namespace}-fault-{suffix}",
        "queue": f"{settings.queue}.fault.{suffix}",
        "lease_ttl": timedelta(seconds=2),
        "sweep_interval": timedelta(seconds=0.25),
        "max_deliveries": 3,
        **changes,
    }
    return settings.model_copy(update=update)


class Pool:
    """Worker processes of one deployment; replaced as tests kill them."""

    def __init__(
        self,
        settings: Settings,
        size: int = 2,
        *,
        layout: WorkerPool = "threads",
        name: str = "fault",
    ) -> None:
        """``layout``: ``threads`` (the deployment's: every run of a process on its loop)
        or ``prefork`` (one run per child process, which Celery replaces when it dies)."""
        self.settings = settings
        self.layout: WorkerPool = layout
        self.name = name
        self.workers = [self._worker() for _ in range(size)]

    def _worker(self) -> WorkerProcess:
        return WorkerProcess(self.settings, concurrency=2, pool=self.layout, name=self.name)

    def start(self) -> None:
        with ThreadPoolExecutor(len(self.workers)) as starting:
            list(starting.map(WorkerProcess.start, self.workers))

    def owner_of(self, pid: int) -> WorkerProcess:
        group = os.getpgid(pid)
        return next(worker for worker in self.workers if worker.pid == group)

    def replace(self, worker: WorkerProcess, *, kill: bool = True) -> WorkerProcess:
        if kill:
            worker.kill()
        self.workers.remove(worker)
        fresh = self._worker()
        fresh.start()
        self.workers.append(fresh)
        return fresh

    def heal(self) -> None:
        """Replace every worker that is no longer running (a test that killed one and
        failed before replacing it leaves the pool whole for the next)."""
        for worker in [worker for worker in self.workers if not worker.running]:
            self.replace(worker)

    def stop(self) -> None:
        for worker in self.workers:
            worker.kill()

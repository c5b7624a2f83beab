"""The workers' broker connection: kombu's, printed without a password it does not have.

kombu's ``Connection.as_uri()`` masks the password whether or not there is one, so the
worker banner and its "Connected to" line read ``redis-guarded://:**@127.0.0.1:6379/0``
for a Redis without a password, which suggests one is set. Here the mask appears only
when the connection has a password. The app takes it through Celery's ``amqp`` class
(``Celery(amqp=...)``), the hook Celery offers for its connection class.
"""

from __future__ import annotations

from typing import Any

from celery.app.amqp import AMQP
from kombu.connection import Connection


class BrokerConnection(Connection):
    def as_uri(self, include_password: Any = False, mask: Any = "**", getfields: Any = None) -> str:
        if getfields is None:
            uri: str = super().as_uri(include_password, mask)
        else:
            uri = super().as_uri(include_password, mask, getfields)
        if not include_password and not self.password:
            uri = uri.replace(f":{mask}@", "@" if self.userid else "", 1)
        return uri


class WorkerAMQP(AMQP):  # type: ignore[misc]
    Connection = BrokerConnection


__all__ = ["BrokerConnection", "WorkerAMQP"]

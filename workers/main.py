"""The worker app configured from the environment: ``celery -A workers.main worker``."""

from wire.settings import Settings

from .celery_app import create_app

app = create_app(Settings())

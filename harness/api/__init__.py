"""The thin HTTP submit API over the harness (FastAPI, served by uvicorn).

``create_app`` builds it (``uvicorn --factory harness.api.app:create_app``, or
``ahp-celery api``); ``ApiSettings`` configures it from ``AHP_API_*``.
"""

from .app import create_app
from .settings import ApiSettings

__all__ = ["ApiSettings", "create_app"]

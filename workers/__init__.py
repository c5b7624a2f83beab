"""Worker side: the Celery app, task entry points, and the runner of one AHP task.

Checkpoint deserialization is locked down to strict msgpack before LangGraph is imported.
"""

import os

os.environ.setdefault("LANGGRAPH_STRICT_MSGPACK", "true")

"""The test suite.

Strict msgpack for checkpoint deserialization, as the workers lock it down
(``workers/__init__.py``) before LangGraph is imported: set here, first, so the in-process
workers run with it whichever test module happens to import LangGraph first."""

import os

os.environ.setdefault("LANGGRAPH_STRICT_MSGPACK", "true")

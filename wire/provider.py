"""The provider identity this adapter reports, on both sides."""

from agent_harness_protocol import ProviderId

PROVIDER = ProviderId("langgraph-celery")

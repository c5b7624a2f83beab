"""The contract both sides import: Redis keys, encodings, atomic scripts, settings, profiles.

Nothing heavy lives here: no LangGraph, no LangChain, no Celery worker runtime.
"""

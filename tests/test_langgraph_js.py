"""The official LangGraph JS client (``@langchain/langgraph-sdk`` 1.15.0, pinned with its
peer ``@langchain/core`` by ``tests/js/package-lock.json``) run by ``node`` against an
``ahp-celery api`` process, as a deployment runs it (issue 22): a thread, a streamed run
with the modes useStream asks for, and a join of its stream from the start.

``tests/js/flows.mjs`` drives the client and prints one JSON line per step. Without
``tests/js/node_modules`` the test installs the lockfile itself (``npm ci``). Without
``node`` or ``npm`` it is skipped locally and fails in CI (``CI`` set): there the JS
client is a test dependency like ``langgraph-sdk``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from wire.settings import Settings

from .support.api import TOKENS, api_process
from .support.boundary import ModelBoundary
from .support.langgraph import assert_unique_ids, model_inputs, text_of

JS = Path(__file__).resolve().parent / "js"
FLOWS = JS / "flows.mjs"
TIMEOUT = 120


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        reason = f"`{name}` is not on PATH: the LangGraph JS client test needs Node.js and npm"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return found


async def _run(*command: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *command,
        cwd=JS.parent.parent,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(TIMEOUT):
            out, err = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise AssertionError(f"{command} took more than {TIMEOUT} s") from None
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def _installed() -> str:
    """``node``, with the lockfile's packages installed under ``tests/js``."""
    node = _tool("node")
    if not (JS / "node_modules" / "@langchain" / "langgraph-sdk").is_dir():
        npm = _tool("npm")
        code, out, err = await _run(npm, "ci", "--prefix", str(JS), "--no-audit", "--no-fund")
        assert code == 0, f"npm ci failed ({code}):\n{out}\n{err}"
    return node


def _client_environment() -> dict[str, str]:
    """This process's environment with the tenant's key as ``LANGGRAPH_API_KEY``, the
    variable the JS client reads first; no other LangSmith/LangChain key can leak in."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"LANGSMITH_API_KEY", "LANGCHAIN_API_KEY"}
    }
    env["LANGGRAPH_API_KEY"] = TOKENS["alpha"]
    return env


async def test_the_js_client_streams_a_run_on_a_thread_and_joins_its_stream(
    settings: Settings, boundary: ModelBoundary, tmp_path: Path
) -> None:
    node = await _installed()
    # "slow" (the assistant the flows name): twenty chunks then the reply, each streamed
    # as the model produces it. The API process's runs carry no boundary scope: the
    # boundary sees the unscoped calls made since it was opened.
    async with api_process(settings, tmp_path / "api.log", {"AHP_PROFILE": "slow"}) as api:
        code, out, err = await _run(node, str(FLOWS), api.url, "slow", env=_client_environment())
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert code == 0, f"flows.mjs exited {code}:\n{out}\n{err}"
    steps: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        steps.setdefault(line["step"], []).append(line)
    assert "error" not in steps, steps.get("error")
    assert [line["step"] for line in lines][-1] == "done"

    (thread,) = (line["thread"] for line in steps["thread"])
    assert thread["metadata"] == {"client": "js"}
    (created,) = (line["run"] for line in steps["run_created"])
    assert created["thread_id"] == thread["thread_id"]
    parts = [line["part"] for line in steps["stream"]]
    assert parts[0]["event"] == "metadata"
    assert parts[0]["data"]["run_id"] == created["run_id"]
    assert parts[-1]["event"] == "end"
    assert parts[-1]["data"]["status"] == "success"
    assert_unique_ids(parts)

    # Tokens as `messages` events ([chunk, metadata]), one id for the message's chunks.
    tokens = [part["data"] for part in parts if part["event"] == "messages"]
    assert len({chunk["id"] for chunk, _ in tokens}) == 1
    answer = "".join(text_of(chunk) for chunk, _ in tokens)
    assert answer == "".join(f"chunk{i} " for i in range(20)) + "native-result"
    final = [part["data"] for part in parts if part["event"] == "values"][-1]
    assert [m["type"] for m in final["messages"]] == ["human", "ai"]
    assert text_of(final["messages"][-1]) == answer
    assert any(part["event"] == "updates" for part in parts)

    # The join from "-1" is the same stream, event for event.
    joined = [line["part"] for line in steps["join"]]
    assert joined == parts
    (state,) = (line["state"] for line in steps["state"])
    assert text_of(state["values"]["messages"][-1]) == answer
    assert state["checkpoint"] is not None
    (run,) = (line["run"] for line in steps["run"])
    assert run["status"] == "success"
    (waited,) = (line["values"] for line in steps["wait"])
    assert text_of(waited["messages"][-1]) == answer

    # At the model: the thread's run and the stateless one, each once.
    assert model_inputs(boundary.calls()) == ["hello from js", "stateless from js"]

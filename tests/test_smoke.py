from agent_harness_protocol import Completed, SessionSpec, TaskRequest, TextInput, TextOutput

from harness import CeleryHarness
from wire.settings import Settings

from .support.boundary import ModelBoundary


async def test_one_task_runs_on_a_worker(settings: Settings, boundary: ModelBoundary) -> None:
    async with CeleryHarness(settings, profile="confirmed") as harness:
        session = await harness.create_session(SessionSpec(instructions="be brief"))
        task = await session.start_task(TaskRequest(TextInput("hello marker-1")))
        outcome = await task.await_outcome()
        assert isinstance(outcome, Completed), outcome
        assert outcome.output == TextOutput("native-result")
        assert any("marker-1" in context for context in boundary.observed_contexts)

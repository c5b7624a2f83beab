"""``RuntimePersistenceConformanceTests`` with its two replaced assertions.

The suite expects ``PersistenceRequirement(across_process_restart=True)`` to be rejected.
This harness keeps the context in Redis, and any harness in any process of the
deployment reopens it, so that requirement is admitted; ``tests/test_faults.py`` proves
the claim by reopening, from the test process, a session whose creating process was
SIGKILLed. Everything else in the test is the suite's own.

``RuntimeProfileConformanceTests`` hard-codes ``StructuredOutputRequirement`` as the
task requirement a harness cannot serve. This harness serves it (``support`` reports
``STRUCTURED_OUTPUT`` supported): the worker asks the model for a document and judges the
answer with ``jsonschema`` (Draft 2020-12) before settling. So the suite's request is
asserted admitted instead, and the rest of the test (refused before any model call, with
nothing sent) is run with the structured-output request this harness does refuse, one
whose schema is not a usable JSON Schema. ``tests/test_structured_output.py`` proves the
claim through real workers: valid, invalid and non-JSON answers are reported as such, an
unusable schema is refused (also with 422 over HTTP).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from agent_harness_protocol import (
    CompatibilityStatus,
    Completed,
    IncompatibleRequirementError,
    PersistenceRequirement,
    PersistentSessions,
    SessionRequirements,
    StorageNamespace,
    StructuredOutputRequirement,
    TaskRequest,
    TaskRequirements,
    TextInput,
)
from agent_harness_protocol.conformance import RuntimePersistenceConformanceTests
from agent_harness_protocol.conformance._support import managed, within


class RuntimePersistenceAdmittingProcessRestart(RuntimePersistenceConformanceTests):
    async def test_unsupported_task_requirements_rejected_before_model_call(self) -> None:
        async with managed(self.boundary()) as boundary, self.harness(boundary) as harness:
            session = await harness.create_session(self.spec())
            before = len(boundary.observed_contexts)
            # The replaced assertion (the suite expects this request to be INCOMPATIBLE).
            served = TaskRequest(
                TextInput("structured"),
                TaskRequirements(StructuredOutputRequirement('{"type":"object"}')),
            )
            assert session.validate(served).status is CompatibilityStatus.COMPATIBLE
            request = TaskRequest(
                TextInput("structured"),
                TaskRequirements(StructuredOutputRequirement('{"type":"objekt"}')),
            )
            assert session.validate(request).status is CompatibilityStatus.INCOMPATIBLE
            with pytest.raises(IncompatibleRequirementError):
                await session.start_task(request)
            assert len(boundary.observed_contexts) == before

    async def test_persistent_reopen_preserves_context_and_desired_instructions(self) -> None:
        async with managed(self.boundary()) as boundary:
            configured = replace(
                self.spec(),
                requirements=SessionRequirements(persistence=PersistenceRequirement()),
            )
            async with self.harness(boundary) as first_harness:
                session = await first_harness.create_session(configured)
                task = await session.start_task(TaskRequest(TextInput("durable marker-delta")))
                assert isinstance(await within(60, task.await_outcome()), Completed)
                reference = session.persistent_ref
                assert reference is not None
                await session.release()
            async with self.harness(boundary) as harness:
                assert isinstance(harness, PersistentSessions)
                before = len(boundary.observed_contexts)
                desired = replace(configured, instructions="AHP_REOPEN_INSTRUCTION")
                if not self.supports_changed_instructions_on_reopen:
                    with pytest.raises(IncompatibleRequirementError):
                        await harness.reopen_session(reference, desired)
                    assert len(boundary.observed_contexts) == before
                reopened = await harness.reopen_session(
                    reference,
                    desired if self.supports_changed_instructions_on_reopen else configured,
                )
                task = await reopened.start_task(TaskRequest(TextInput("after harness recreation")))
                assert isinstance(await within(60, task.await_outcome()), Completed)
                actual = " ".join(boundary.observed_contexts[before:])
                assert "marker-delta" in actual
                if self.supports_changed_instructions_on_reopen:
                    assert "AHP_REOPEN_INSTRUCTION" in actual
                with pytest.raises(ValueError, match="cannot be reopened"):
                    await harness.reopen_session(
                        replace(reference, namespace=StorageNamespace("foreign")), configured
                    )
                across_processes = replace(
                    configured,
                    requirements=replace(
                        configured.requirements,
                        persistence=PersistenceRequirement(across_process_restart=True),
                    ),
                )
                # The replaced assertion (the suite expects IncompatibleRequirementError).
                admitted = await harness.create_session(across_processes)
                assert admitted.persistent_ref is not None

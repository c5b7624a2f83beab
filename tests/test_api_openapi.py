"""A property-based run of the published OpenAPI document against the live server
(schemathesis): no 5xx, and every response (status, headers, media type, body) conforms
to the schema. CI-sized: a few dozen examples per operation, with a valid bearer token,
half of them aimed at a real session and task of that tenant."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.config import SchemathesisConfig
from schemathesis.core.parameters import ParameterLocation

from wire.settings import Settings

from .support.api import api_harness, api_settings, auth, live_server
from .support.boundary import ModelBoundary

EXAMPLES = 30
EXCLUDED = [schemathesis.checks.positive_data_acceptance]
"""A schema-valid request may still be refused (422) for a rule a schema cannot state:
a webhook host outside the allow-list, an idempotency key reused with another input,
requirements the agent profile cannot serve. Every other check runs."""
REFUSALS = [
    *SchemathesisConfig().projects.default.checks.negative_data_rejection.expected_statuses,
    "413",
]
"""How a request that breaks the schema may be refused: schemathesis's own list, and 413,
the server's answer to a body over its limit (a string generated past its ``maxLength``
can be megabytes long), which it sends before it reads the body."""
CONFIG = SchemathesisConfig.from_dict(
    {"checks": {"negative_data_rejection": {"expected-statuses": REFUSALS}}}
)


def _seed(url: str) -> dict[str, str]:
    """A session with a settled task, for generated requests to aim at."""
    with httpx.Client(base_url=url, timeout=60) as client:
        session_id = client.post("/v1/sessions", json={}, headers=auth()).json()["id"]
        task = client.post(
            f"/v1/sessions/{session_id}/tasks",
            json={"input": "seed"},
            params={"wait": 30},
            headers=auth(),
        ).json()
    assert task["state"] == "completed"
    return {"session_id": session_id, "task_id": task["id"]}


def _exercise(operation: Any, url: str, known: dict[str, str], checked: dict[str, int]) -> None:
    """Run generated requests of one operation against the server at ``url``: valid ones
    and (negative mode) ones that break the schema, which must be refused with a 4xx."""
    cases = st.one_of(
        operation.as_strategy(GenerationMode.POSITIVE),
        operation.as_strategy(GenerationMode.NEGATIVE),
    )

    @given(case=cases, aim=st.booleans())
    @hypothesis_settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Any, aim: bool) -> None:
        negative = case.meta.is_negative_at if case.meta else (lambda _: False)
        # A component generated to break the schema stays broken: no valid token is
        # added to a broken header set, no real id replaces a broken path.
        if aim and case.path_parameters and not negative(ParameterLocation.PATH):
            for name in ("session_id", "task_id"):
                if name in case.path_parameters:
                    case.path_parameters[name] = known[name]
        headers = {} if negative(ParameterLocation.HEADER) else auth()
        response = case.call(base_url=url, headers=headers)
        assert response.status_code < 500, (case.as_curl_command(), response.text)
        case.validate_response(response, headers=headers, excluded_checks=EXCLUDED)
        mode = (
            "negative" if case.meta and "negative" in str(case.meta.generation.mode) else "positive"
        )
        key = f"{operation.label} {mode}"
        checked[key] = checked.get(key, 0) + 1

    run()


# schemathesis draws from ``random`` inside its strategies, which Hypothesis deprecates.
@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")
def test_every_operation_answers_within_its_published_schema(
    settings: Settings, boundary: ModelBoundary
) -> None:
    limits = api_settings(max_wait=timedelta(seconds=1))
    with live_server(api_harness(settings, boundary), limits) as server:
        schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json", config=CONFIG)
        operations = [result.ok() for result in schema.get_all_operations()]
        labels = {operation.label for operation in operations}
        assert {
            "POST /v1/sessions",
            "GET /v1/sessions/{session_id}",
            "DELETE /v1/sessions/{session_id}",
            "POST /v1/sessions/{session_id}/reopen",
            "POST /v1/sessions/{session_id}/tasks",
            "GET /v1/tasks/{task_id}",
            "GET /v1/tasks/{task_id}/events",
            "POST /v1/tasks/{task_id}/cancel",
            "POST /v1/tasks/{task_id}/interactions/{interaction_id}",
            "GET /metrics",
        } <= labels
        checked: dict[str, int] = {}
        for operation in operations:
            # A fresh session per operation: an earlier operation's DELETE released its own.
            _exercise(operation, server.url, _seed(server.url), checked)
        assert {key.rsplit(" ", 1)[0] for key in checked} == labels

"""The Grafana dashboards under docs/dashboards/ query what the API's /metrics exports:
every metric a panel names is a sample the API serves, with the labels the panel groups
by, so a renamed metric or label breaks this test instead of a dashboard."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from wire.settings import Settings

from .support.api import api_harness, auth, in_process
from .support.boundary import ModelBoundary

DASHBOARDS = sorted((Path(__file__).resolve().parents[1] / "docs" / "dashboards").glob("*.json"))
_METRIC = re.compile(r"\b(ahp_[a-z_]+)\b")
_BY = re.compile(r"\bby \(([^)]*)\)")
_LEGEND = re.compile(r"\{\{(\w+)\}\}")


def _targets(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [target for panel in dashboard["panels"] for target in panel["targets"]]


@pytest.mark.parametrize("path", DASHBOARDS, ids=[path.name for path in DASHBOARDS])
def test_a_dashboard_is_a_grafana_dashboard_model(path: Path) -> None:
    dashboard = json.loads(path.read_text())
    assert dashboard["title"]
    assert dashboard["uid"]
    assert isinstance(dashboard["schemaVersion"], int)
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert {"x", "y", "w", "h"} <= panel["gridPos"].keys()
        assert panel["datasource"]["type"] == "prometheus"
        assert panel["targets"], panel["title"]
        refs = [target["refId"] for target in panel["targets"]]
        assert len(refs) == len(set(refs))
    (variable,) = dashboard["templating"]["list"]
    assert variable["type"] == "datasource"


async def test_every_metric_and_label_a_dashboard_queries_is_exported(
    settings: Settings, boundary: ModelBoundary
) -> None:
    assert DASHBOARDS
    async with in_process(api_harness(settings, boundary)) as client:
        task = await client.post(
            "/v1/tasks", json={"input": "for the dashboards"}, params={"wait": 30}, headers=auth()
        )
        assert task.json()["state"] == "completed"
        response = await client.get("/metrics")
    labels: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            labels.setdefault(sample.name, set()).update(sample.labels)
    for path in DASHBOARDS:
        for target in _targets(json.loads(path.read_text())):
            expr = target["expr"]
            names = _METRIC.findall(expr)
            assert names, expr
            missing = [name for name in names if name not in labels]
            assert not missing, f"{path.name}: {expr} names metrics /metrics lacks: {missing}"
            offered = set().union(*(labels[name] for name in names))
            grouped = {label.strip() for group in _BY.findall(expr) for label in group.split(",")}
            assert grouped <= offered, f"{path.name}: {expr} groups by {grouped - offered}"
            shown = set(_LEGEND.findall(target.get("legendFormat", "")))
            assert shown <= grouped, f"{path.name}: legend {shown - grouped} is not grouped"

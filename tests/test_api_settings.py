"""The API's configuration: tenants and their tokens, from the environment or a file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from harness.api import ApiSettings
from harness.api.auth import Tenants


def test_tokens_come_from_the_environment_and_a_file_and_rotate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secrets = tmp_path / "tokens.json"
    secrets.write_text(json.dumps({"beta": "beta-token-from-the-file"}))
    monkeypatch.setenv(
        "AHP_API_TOKENS", json.dumps({"alpha": ["alpha-old-token-123", "alpha-new-token-456"]})
    )
    monkeypatch.setenv("AHP_API_TOKENS_FILE", str(secrets))
    settings = ApiSettings()
    tenants = Tenants(settings.tenant_tokens())
    assert tenants.tenant_of("alpha-old-token-123") == "alpha"
    assert tenants.tenant_of("alpha-new-token-456") == "alpha"
    assert tenants.tenant_of("beta-token-from-the-file") == "beta"
    assert tenants.tenant_of("beta-token-from-the-fil") is None
    assert tenants.tenant_of("") is None
    # Secrets never show in a representation of the settings.
    assert "alpha-old-token-123" not in repr(settings)
    assert "alpha-old-token-123" not in str(settings.model_dump())


@pytest.mark.parametrize(
    "tokens",
    [
        {"bad tenant": "a-token-long-enough"},
        {"../etc": "a-token-long-enough"},
        {"alpha": "short"},
        {"alpha": ["a-token-long-enough", "short"]},
    ],
)
def test_tenants_must_be_ids_and_tokens_long_enough(tokens: dict[str, object]) -> None:
    with pytest.raises(ValidationError) as raised:
        ApiSettings(tokens=tokens)
    assert "a-token-long-enough" not in str(raised.value)


def test_an_unreadable_tokens_file_is_refused_without_echoing_it(tmp_path: Path) -> None:
    secrets = tmp_path / "tokens.json"
    secrets.write_text('{"alpha": 12345678901234567890}')
    with pytest.raises(ValidationError, match="must map tenants"):
        ApiSettings(tokens_file=secrets)
    secrets.write_text("not json secret-material")
    with pytest.raises(ValidationError) as raised:
        ApiSettings(tokens_file=secrets)
    assert "secret-material" not in str(raised.value)
    with pytest.raises(ValidationError):
        ApiSettings(tokens_file=tmp_path / "missing.json")


def test_webhook_hosts_read_as_a_list_or_comma_separated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AHP_API_WEBHOOK_HOSTS", "Hooks.Example, other.example:8443")
    assert ApiSettings().webhook_hosts == ("hooks.example", "other.example:8443")
    monkeypatch.setenv("AHP_API_WEBHOOK_HOSTS", '["a.example"]')
    assert ApiSettings().webhook_hosts == ("a.example",)


@pytest.mark.parametrize(("value", "seconds"), [(None, 75), ("PT90S", 90), ("30", 30), ("1.5", 2)])
def test_the_keep_alive_reaches_the_server_in_whole_seconds(
    monkeypatch: pytest.MonkeyPatch, value: str | None, seconds: int
) -> None:
    if value is not None:
        monkeypatch.setenv("AHP_API_KEEP_ALIVE", value)
    assert ApiSettings().uvicorn_options() == {"timeout_keep_alive": seconds}


@pytest.mark.parametrize("value", ["0", "0.5", "-3", "soon"])
def test_a_keep_alive_under_a_second_is_refused(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("AHP_API_KEEP_ALIVE", value)
    with pytest.raises(ValidationError, match="keep_alive"):
        ApiSettings()

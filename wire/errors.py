"""Errors of the wire contract.

WireError (ValueError)
├── DecodeError          a stored record or event is not in the expected encoding
├── ProfileError         a profile registry or profile name cannot be resolved
└── OutputSchemaError    a required output schema is not a usable JSON Schema
"""


class WireError(ValueError):
    """Root of every error raised by the wire contract."""


class DecodeError(WireError):
    """A stored record, stream entry or message does not match the wire encoding."""


class ProfileError(WireError):
    """A profile registry could not be loaded, or a profile name is unknown."""


class OutputSchemaError(WireError):
    """A task's required output schema is not a usable Draft 2020-12 JSON Schema."""

    def __init__(self, problems: tuple[str, ...]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))

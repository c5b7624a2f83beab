"""Errors of the wire contract.

WireError (ValueError)
├── DecodeError          a stored record or event is not in the expected encoding
└── ProfileError         a profile registry or profile name cannot be resolved
"""


class WireError(ValueError):
    """Root of every error raised by the wire contract."""


class DecodeError(WireError):
    """A stored record, stream entry or message does not match the wire encoding."""


class ProfileError(WireError):
    """A profile registry could not be loaded, or a profile name is unknown."""

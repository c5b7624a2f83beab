"""The atomic Lua scripts every state change goes through, one ``.lua`` file each.

Each file's header lists its KEYS and ARGV. Terminal states are final: every script
that could change a task first checks that it is not terminal, so a task is settled
exactly once no matter which side (caller, worker, a second worker) races to settle it.
Worker writes carry the lease value ``"<fence>:<token>"``; a write whose value is not
the current lease is refused, so a worker whose lease was taken over cannot write.

A line ``--! include NAME`` in a script is replaced by ``lua/_NAME.lua`` (shared helpers:
``clock`` for the server's clock, ``prelude`` for terminal states, usage sums and the one
``settle`` every settling script calls). A line ``--! const NAME`` is replaced by
``local NAME = {...}``, the strings of the Python constant of that name in
:data:`CONSTANTS`: field lists the Lua scripts share with the Python side are declared
once, on the Python side.
"""

from __future__ import annotations

import re
from functools import cache
from importlib.resources import files

from .usage import USAGE_FIELDS

_INCLUDE = re.compile(r"^--! include (\w+)$", re.MULTILINE)
_CONST = re.compile(r"^--! const (\w+)$", re.MULTILINE)

CONSTANTS: dict[str, tuple[str, ...]] = {"USAGE_FIELDS": USAGE_FIELDS}
"""The string lists a script may declare with ``--! const NAME``."""


def _lua_list(name: str) -> str:
    values = CONSTANTS[name]
    if any("'" in value or "\\" in value for value in values):
        raise ValueError(f"{name}: a value cannot be written as a plain Lua string")
    return f"local {name} = {{" + ",".join(f"'{value}'" for value in values) + "}"


@cache
def load(name: str) -> str:
    """The source of ``lua/<name>.lua`` with its includes expanded."""
    text = files(__package__).joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")
    text = _INCLUDE.sub(lambda match: load(f"_{match.group(1)}"), text)
    return _CONST.sub(lambda match: _lua_list(match.group(1)), text)


START_TASK = load("start_task")
ROLLBACK_START = load("rollback_start")
RECORD_TRACE = load("record_trace")
CONFIRM_START = load("confirm_start")
BLOCK_UNCONFIRMED = load("block_unconfirmed")
CLAIM = load("claim")
APPEND = load("append")
SETTLE = load("settle")
CANCEL = load("cancel")
RENEW_MANY = load("renew_many")
RELEASE = load("release")
HAND_BACK = load("hand_back")
LAPSED = load("lapsed")
RECOVER = load("recover")
RECOVER_STARTING = load("recover_starting")
REOPEN = load("reopen")
TOUCH_HANDLES = load("touch_handles")
CHECKPOINT_PUT = load("checkpoint_put")
CHECKPOINT_WRITES = load("checkpoint_writes")
RELEASE_SESSION = load("release_session")
PRUNE_STARTING = load("prune_starting")
MAINTENANCE_HEARTBEAT = load("maintenance_heartbeat")
PRUNE_CHECKPOINTS = load("prune_checkpoints")
DROP_CHECKPOINTS = load("drop_checkpoints")
PAUSE = load("pause")
RESPOND = load("respond")
TOOL_ATTEMPT = load("tool_attempt")
DEAD_LETTER = load("dead_letter")
DISPATCH_TENANTS = load("dispatch_tenants")

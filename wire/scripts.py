"""The atomic Lua scripts every state change goes through.

Each script's header lists its KEYS and ARGV. Terminal states are final: every script
that could change a task first checks that it is not terminal, so a task is settled
exactly once no matter which side (caller, worker, a second worker) races to settle it.
Worker writes carry the lease value ``"<fence>:<token>"``; a write whose value is not
the current lease is refused, so a worker whose lease was taken over cannot write.
"""

from __future__ import annotations

_CLOCK = """
-- The server's clock in milliseconds (one clock for every worker and caller).
local function now_ms()
  local now = redis.call('TIME')
  return tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
end
"""

_PRELUDE = (
    _CLOCK
    + """
local TERMINAL = {completed=true, failed=true, cancelled=true, unresolved=true}
local FIELDS = {'input_tokens','cached_input_tokens','output_tokens','reasoning_tokens',
                'total_tokens','cache_write_input_tokens'}
local function usage_zero()
  local r = {}
  for _, f in ipairs(FIELDS) do r[f] = 0 end
  return r
end
local function usage_add(a, b)
  local r = {}
  for _, f in ipairs(FIELDS) do
    local x, y = a[f], b[f]
    if x == nil or y == nil or x == cjson.null or y == cjson.null then
      r[f] = cjson.null
    else
      r[f] = x + y
    end
  end
  return r
end
-- Record a terminal outcome: commit session usage once, append the terminal event,
-- free the session when no graph run holds it any more, and bound the retention.
local function settle(task, session, events, lease, running, task_id, state, outcome,
                      lease_value, run_ended, retention)
  local session_usage = cjson.null
  if redis.call('EXISTS', session) == 1 then
    local stored = redis.call('HGET', session, 'usage')
    local current = stored and cjson.decode(stored) or usage_zero()
    session_usage = usage_add(current, outcome.usage)
    redis.call('HSET', session, 'usage', cjson.encode(session_usage))
  end
  outcome.session_usage = session_usage
  local encoded = cjson.encode(outcome)
  redis.call('HSET', task, 'state', state, 'outcome', encoded)
  redis.call('XADD', events, '*', 'k', 'e', 't', 'terminal', 'd', encoded)
  redis.call('ZREM', running, task_id)
  if state == 'completed' and redis.call('EXISTS', session) == 1 then
    -- A completed turn wrote a checkpoint: the session now has stored history.
    redis.call('HINCRBY', session, 'turns', 1)
  end
  local held = redis.call('GET', lease)
  if run_ended and held and held == lease_value then
    redis.call('DEL', lease)
    held = false
  end
  if not held and redis.call('HGET', session, 'active') == task_id then
    redis.call('HSET', session, 'active', '')
  end
  if retention > 0 then
    redis.call('EXPIRE', task, retention)
    redis.call('EXPIRE', events, retention)
  end
  return encoded
end
"""
)

# KEYS[1] session hash, KEYS[2] task hash, KEYS[3] session lease, KEYS[4] starting set
# ARGV[1] task id, ARGV[2] input JSON, ARGV[3] task key prefix, ARGV[4] session id
# Returns {'ok'} | {'unknown'} | {'closed'} | {'unconfirmed', ref} | {'busy', task id}
#         | {'outlived', task id}
START_TASK = (
    _PRELUDE
    + """
if redis.call('EXISTS', KEYS[1]) == 0 then return {'unknown'} end
local record = redis.call('HMGET', KEYS[1], 'closed', 'active', 'blocked')
if record[1] == '1' then return {'closed'} end
if record[3] and record[3] ~= '' then return {'unconfirmed', record[3]} end
local active = record[2]
if active and active ~= '' then
  local state = redis.call('HGET', ARGV[3] .. active, 'state')
  if state and not TERMINAL[state] then return {'busy', active} end
end
if redis.call('EXISTS', KEYS[3]) == 1 then return {'outlived', active or ''} end
redis.call('HSET', KEYS[2], 'session', ARGV[4], 'state', 'starting', 'input', ARGV[2],
           'deliveries', 0)
redis.call('HSET', KEYS[1], 'active', ARGV[1])
redis.call('ZADD', KEYS[4], now_ms(), ARGV[1])
return {'ok'}
"""
)

# KEYS[1] session hash, KEYS[2] task hash
# ARGV[1] task id
# Undo a start whose message surely never reached the broker. Returns 1 if undone.
ROLLBACK_START = """
if redis.call('HGET', KEYS[2], 'state') ~= 'starting' then return 0 end
if redis.call('HGET', KEYS[2], 'deliveries') ~= '0' then return 0 end
redis.call('DEL', KEYS[2])
if redis.call('HGET', KEYS[1], 'active') == ARGV[1] then
  redis.call('HSET', KEYS[1], 'active', '')
end
return 1
"""

# KEYS[1] session hash
# ARGV[1] reference of the start whose delivery is unknown
# The session stays blocked: retrying could run the task twice.
BLOCK_UNCONFIRMED = """
redis.call('HSET', KEYS[1], 'blocked', ARGV[1])
return 1
"""

# KEYS[1] task hash, KEYS[2] session lease, KEYS[3] session fence counter, KEYS[4] events,
# KEYS[5] session hash, KEYS[6] running set, KEYS[7] starting set
# ARGV[1] worker token, ARGV[2] lease milliseconds, ARGV[3] the session id the message names,
# ARGV[4] task id, ARGV[5] worker-loss policy ('resume' | 'unresolved'),
# ARGV[6] most deliveries, ARGV[7] outcome JSON if the lost run may not resume,
# ARGV[8] outcome JSON if the deliveries are exhausted, ARGV[9] retention seconds
# A task found 'running' without a lease lost its worker: it resumes under a higher fence,
# or is settled by the deployment's policy, its cancel request or the delivery bound.
# Returns {'claimed', lease value, previous state, deliveries, task fields, session fields}
#         | {'missing'} | {'terminal'} | {'busy'} (another live run holds the session)
#         | {'lost'} | {'exhausted'} (settled here)
CLAIM = (
    _PRELUDE
    + """
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {'missing'} end
if redis.call('HGET', KEYS[1], 'session') ~= ARGV[3] then return {'missing'} end
redis.call('ZREM', KEYS[7], ARGV[4])
if TERMINAL[state] then return {'terminal'} end
if redis.call('EXISTS', KEYS[2]) == 1 then return {'busy'} end
local retention = tonumber(ARGV[9])
if state == 'running' then
  -- A lost run of a task whose cancellation was requested is not resumed: nobody saw
  -- whether it stopped.
  if ARGV[5] ~= 'resume' or redis.call('HGET', KEYS[1], 'cancel') == '1' then
    settle(KEYS[1], KEYS[5], KEYS[4], KEYS[2], KEYS[6], ARGV[4], 'unresolved',
           cjson.decode(ARGV[7]), '', false, retention)
    return {'lost'}
  end
  if tonumber(redis.call('HGET', KEYS[1], 'deliveries') or '0') >= tonumber(ARGV[6]) then
    settle(KEYS[1], KEYS[5], KEYS[4], KEYS[2], KEYS[6], ARGV[4], 'failed',
           cjson.decode(ARGV[8]), '', false, retention)
    return {'exhausted'}
  end
end
local deliveries = redis.call('HINCRBY', KEYS[1], 'deliveries', 1)
local fence = redis.call('INCR', KEYS[3])
local value = fence .. ':' .. ARGV[1]
local now = now_ms()
redis.call('SET', KEYS[2], value, 'PX', ARGV[2])
redis.call('HSET', KEYS[1], 'state', 'running', 'fence', fence, 'claimed_ms', now)
redis.call('HDEL', KEYS[1], 'recover_at')
redis.call('ZADD', KEYS[6], now, ARGV[4])
if state == 'starting' then
  redis.call('XADD', KEYS[4], '*', 'k', 'e', 't', 'started', 'd', '{}')
end
return {'claimed', value, state, deliveries, redis.call('HGETALL', KEYS[1]),
        redis.call('HGETALL', KEYS[5])}
"""
)

# KEYS[1] task hash, KEYS[2] session lease, KEYS[3] events
# ARGV[1] lease value, ARGV[2] the run's batch number, ARGV[3..] triples (kind, tag, payload)
# Returns the number of entries appended, 0 if the task is terminal, -1 if the lease is
# not held by this run (stale fence). Idempotent per batch: a resend of the batch the
# task last recorded for this lease (its reply was lost) appends nothing again.
APPEND = (
    _PRELUDE
    + """
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return -1 end
local state = redis.call('HGET', KEYS[1], 'state')
if not state or TERMINAL[state] then return 0 end
local count = (#ARGV - 2) / 3
local mark = ARGV[1] .. '#' .. ARGV[2]
if redis.call('HGET', KEYS[1], 'appended') == mark then return count end
for i = 3, #ARGV, 3 do
  redis.call('XADD', KEYS[3], '*', 'k', ARGV[i], 't', ARGV[i + 1], 'd', ARGV[i + 2])
end
redis.call('HSET', KEYS[1], 'appended', mark)
return count
"""
)

# KEYS[1] task hash, KEYS[2] session hash, KEYS[3] events, KEYS[4] session lease,
# KEYS[5] running set
# ARGV[1] lease value ('' when the caller settles without holding the lease)
# ARGV[2] terminal state, ARGV[3] outcome JSON, ARGV[4] '1' if the settling run ended,
# ARGV[5] task id, ARGV[6] retention seconds of the task record and stream
# Returns {'settled', outcome, released} | {'terminal', outcome, released} | {'stale'}
#         | {'missing'}; released is '1' when the session is closed and not persistent.
SETTLE = (
    _PRELUDE
    + """
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {'missing'} end
local flags = redis.call('HMGET', KEYS[2], 'closed', 'persistent')
local released = (flags[1] == '1' and flags[2] ~= '1') and '1' or '0'
if TERMINAL[state] then
  return {'terminal', redis.call('HGET', KEYS[1], 'outcome'), released}
end
if ARGV[1] ~= '' and redis.call('GET', KEYS[4]) ~= ARGV[1] then return {'stale'} end
local encoded = settle(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[5], ARGV[2],
                       cjson.decode(ARGV[3]), ARGV[1], ARGV[4] == '1', tonumber(ARGV[6]))
return {'settled', encoded, released}
"""
)

# KEYS[1] task hash, KEYS[2] session hash, KEYS[3] events, KEYS[4] session lease,
# KEYS[5] running set
# ARGV[1] task id, ARGV[2] cancel channel, ARGV[3] retention seconds
# Records the request durably (once). A task no worker claimed yet is settled Cancelled
# with measured-zero usage right here, so it can never start; a running one is told at
# once over the channel (the durable flag covers a missed message).
# Returns {'settled', outcome} | {'requested', first (1|0)} | {'terminal'} | {'missing'}
CANCEL = (
    _PRELUDE
    + """
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {'missing'} end
if TERMINAL[state] then return {'terminal'} end
local first = redis.call('HSETNX', KEYS[1], 'cancel', '1')
if state == 'starting' then
  local outcome = {type='cancelled', task_id=ARGV[1], output=cjson.null, usage=usage_zero()}
  local encoded = settle(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[1], 'cancelled',
                         outcome, '', false, tonumber(ARGV[3]))
  return {'settled', encoded}
end
redis.call('PUBLISH', ARGV[2], ARGV[1])
return {'requested', first}
"""
)

# KEYS[1] session lease, KEYS[2] task hash
# ARGV[1] lease value, ARGV[2] lease milliseconds
# Returns {held (1|0), cancel requested ('1'|'')}
RENEW = """
local cancel = redis.call('HGET', KEYS[2], 'cancel') or ''
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {0, cancel} end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, cancel}
"""

# KEYS[1] session lease, KEYS[2] session hash, KEYS[3] task hash
# ARGV[1] lease value, ARGV[2] task id
# The graph run ended after its task was settled elsewhere: free the session.
RELEASE = (
    _PRELUDE
    + """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local state = redis.call('HGET', KEYS[3], 'state')
if (not state or TERMINAL[state]) and redis.call('HGET', KEYS[2], 'active') == ARGV[2] then
  redis.call('HSET', KEYS[2], 'active', '')
end
return 1
"""
)

# KEYS[1] running set
# ARGV[1] task key prefix, ARGV[2] session key prefix, ARGV[3] lease key suffix
# One read of the whole running set per sweep: returns {task id, session id, ...} of the
# running tasks whose lease lapsed and whose republish hold-off has passed (RECOVER then
# decides each atomically), and drops members that are no longer running.
LAPSED = (
    _CLOCK
    + """
local now = now_ms()
local out = {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local record = redis.call('HMGET', ARGV[1] .. id, 'state', 'session', 'recover_at')
  if record[1] ~= 'running' then
    redis.call('ZREM', KEYS[1], id)
  elseif redis.call('EXISTS', ARGV[2] .. record[2] .. ARGV[3]) == 0
      and tonumber(record[3] or '0') <= now then
    table.insert(out, id)
    table.insert(out, record[2])
  end
end
return out
"""
)

# KEYS[1] task hash, KEYS[2] session lease, KEYS[3] session hash, KEYS[4] events,
# KEYS[5] running set
# ARGV[1] task id, ARGV[2] worker-loss policy, ARGV[3] outcome JSON if the lost run may not
# resume, ARGV[4] milliseconds before another sweep may republish it, ARGV[5] retention
# A claimed task whose lease lapsed lost its worker. Returns {'gone'} (settled or not
# running) | {'alive'} (its lease is held) | {'pending'} (republished moments ago)
# | {'lost'} (settled Unresolved here) | {'republish'} (the caller publishes it again).
RECOVER = (
    _PRELUDE
    + """
local state = redis.call('HGET', KEYS[1], 'state')
if state ~= 'running' then
  redis.call('ZREM', KEYS[5], ARGV[1])
  return {'gone'}
end
if redis.call('EXISTS', KEYS[2]) == 1 then return {'alive'} end
local now = now_ms()
local at = tonumber(redis.call('HGET', KEYS[1], 'recover_at') or '0')
if at > now then return {'pending'} end
if ARGV[2] ~= 'resume' or redis.call('HGET', KEYS[1], 'cancel') == '1' then
  settle(KEYS[1], KEYS[3], KEYS[4], KEYS[2], KEYS[5], ARGV[1], 'unresolved',
         cjson.decode(ARGV[3]), '', false, tonumber(ARGV[5]))
  return {'lost'}
end
redis.call('HSET', KEYS[1], 'recover_at', now + tonumber(ARGV[4]))
redis.call('HINCRBY', KEYS[1], 'recoveries', 1)
return {'republish'}
"""
)

# KEYS[1] starting set, KEYS[2..] the broker's lists of the run queue
# ARGV[1] task key prefix, ARGV[2] milliseconds a start may stay unclaimed, ARGV[3]
# milliseconds before another sweep may republish it, ARGV[4] most queued messages to search
# A task still 'starting' long after its start, whose message is in no queue list, was
# taken by a worker that died before claiming it (kombu keeps such a message unacked until
# the visibility timeout). Each task is looked at once per unclaimed period, and the queue
# is read only when some task is due. Returns {task id, session id, ...} to publish again;
# nothing when the backlog is longer than ARGV[4] (its messages are most likely waiting).
RECOVER_STARTING = (
    _CLOCK
    + """
local now = now_ms()
local stale = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]),
                         'LIMIT', 0, 100)
local out = {}
local due = {}
for _, id in ipairs(stale) do
  local record = redis.call('HMGET', ARGV[1] .. id, 'state', 'recover_at', 'session')
  if record[1] ~= 'starting' then
    redis.call('ZREM', KEYS[1], id)
  elseif tonumber(record[2] or '0') <= now then
    table.insert(due, {id, record[3]})
  end
end
if #due == 0 then return out end
local total = 0
for i = 2, #KEYS do total = total + redis.call('LLEN', KEYS[i]) end
if total > tonumber(ARGV[4]) then return out end
-- The ids each waiting message names (its task id among them), read once.
local waiting = {}
for i = 2, #KEYS do
  for _, item in ipairs(redis.call('LRANGE', KEYS[i], 0, -1)) do
    for named in string.gmatch(item, '"id": ?"([%w_%.%-]+)"') do waiting[named] = true end
  end
end
for _, task in ipairs(due) do
  if waiting[task[1]] then
    -- Still queued: look again one unclaimed period later, not at every sweep.
    redis.call('HSET', ARGV[1] .. task[1], 'recover_at', now + tonumber(ARGV[2]))
  else
    redis.call('HSET', ARGV[1] .. task[1], 'recover_at', now + tonumber(ARGV[3]))
    table.insert(out, task[1])
    table.insert(out, task[2])
  end
end
return out
"""
)

# KEYS[1] session hash, KEYS[2] session handles, KEYS[3] session lease,
# KEYS[4] the thread's latest-checkpoint pointer
# ARGV[1] task key prefix, ARGV[2] spec JSON, ARGV[3] handle id, ARGV[4] handle TTL ms,
# ARGV[5] profile name, ARGV[6] profile digest
# Opens one more handle on a persistent session. The configuration (spec) may change only
# while no other handle is open. Returns {'ok'} | {'unknown'} | {'profile'}
# | {'unconfirmed', ref} | {'busy', task id} | {'outlived'} | {'configured'}
# | {'unavailable'} (the record has history but the checkpoint thread is gone)
REOPEN = (
    _PRELUDE
    + """
if redis.call('EXISTS', KEYS[1]) == 0 then return {'unknown'} end
local record = redis.call('HMGET', KEYS[1], 'persistent', 'closed', 'blocked', 'active',
                          'spec', 'profile', 'profile_digest', 'turns')
if record[1] ~= '1' or record[2] == '1' then return {'unknown'} end
if record[6] ~= ARGV[5] or record[7] ~= ARGV[6] then return {'profile'} end
if record[3] and record[3] ~= '' then return {'unconfirmed', record[3]} end
local active = record[4]
if active and active ~= '' then
  local state = redis.call('HGET', ARGV[1] .. active, 'state')
  if state and not TERMINAL[state] then return {'busy', active} end
end
if redis.call('EXISTS', KEYS[3]) == 1 then return {'outlived'} end
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if record[5] ~= ARGV[2] and redis.call('ZCARD', KEYS[2]) > 0 then return {'configured'} end
if tonumber(record[8] or '0') > 0 then
  local latest = redis.call('GET', KEYS[4])
  if not latest or redis.call('EXISTS', latest) == 0 then return {'unavailable'} end
end
redis.call('HSET', KEYS[1], 'spec', ARGV[2])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[4]), ARGV[3])
return {'ok'}
"""
)

# KEYS[1] session handles
# ARGV[1] handle TTL ms, ARGV[2..] handle ids
# Registers or refreshes open handles (the caller's heartbeat).
TOUCH_HANDLES = (
    _CLOCK
    + """
local expiry = now_ms() + tonumber(ARGV[1])
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], expiry, ARGV[i]) end
return #ARGV - 1
"""
)

# KEYS[1] session lease
# ARGV[1] lease value
# Whether the lease is still this run's (checked before every checkpoint write).
HOLDS = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return 1 end
return 0
"""

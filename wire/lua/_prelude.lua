-- Shared by the scripts that change task state: terminal states, usage sums, settle().
--! include clock
local TERMINAL = {completed=true, failed=true, cancelled=true, unresolved=true}
--! const USAGE_FIELDS
local FIELDS = USAGE_FIELDS
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
-- A session usage nothing measured (every field unknown) is reported as no snapshot.
local function usage_snapshot(usage)
  if usage == nil or usage == cjson.null then return cjson.null end  -- no session record
  for _, f in ipairs(FIELDS) do
    if usage[f] ~= nil and usage[f] ~= cjson.null then return usage end
  end
  return cjson.null
end
local function absent(value)
  return value == nil or value == cjson.null
end
-- The deployment's task statistics (Keys.task_statistics): the scripts that settle, claim
-- and promote get the starting set's key, '<namespace>:starting', and name the hash
-- beside it.
local function statistics_key(starting)
  return string.sub(starting, 1, #starting - #'starting') .. 'stats:tasks'
end
-- Histogram bounds in seconds (Prometheus 'le' labels); each observation counts in the
-- first bucket it fits (the reader makes them cumulative), with a sum and a count.
local BOUNDS = {'0.005', '0.01', '0.025', '0.05', '0.1', '0.25', '0.5', '1', '2.5', '5', '10',
                '30', '60', '300'}
local function observe(stats, name, ms)
  if ms < 0 then ms = 0 end
  local le = '+Inf'
  for _, bound in ipairs(BOUNDS) do
    if ms <= tonumber(bound) * 1000 then le = bound; break end
  end
  redis.call('HINCRBY', stats, name .. ':' .. le, 1)
  redis.call('HINCRBY', stats, name .. ':sum_ms', ms)
  redis.call('HINCRBY', stats, name .. ':count', 1)
end
-- Tenants (docs/tenants.md; keys as Keys.tenant_*, named here from the starting set's
-- key). A tenant with a running limit has at most that many tasks admitted (started,
-- past their session's queue, not settled); the others are parked, oldest first, with no
-- run message, and every settle of an admitted task admits the oldest parked one.
local function namespace_of(starting)
  return string.sub(starting, 1, #starting - #'starting')
end
local function tenant_key(starting, tenant, suffix)
  return namespace_of(starting) .. 'tenant:' .. tenant .. suffix
end
-- Whether the tenant may have one more task admitted (always, without a running limit).
local function tenant_room(starting, tenant)
  local limit = tonumber(redis.call('HGET', tenant_key(starting, tenant, ''), 'running') or '')
  return not limit or redis.call('SCARD', tenant_key(starting, tenant, ':admitted')) < limit
end
local function tenant_limited(starting, tenant)
  return redis.call('HEXISTS', tenant_key(starting, tenant, ''), 'running') == 1
end
local function admit(task, task_id, tenant, starting)
  redis.call('SADD', tenant_key(starting, tenant, ':admitted'), task_id)
  redis.call('HSET', task, 'admitted', '1')
end
local function park(task, task_id, tenant, starting)
  redis.call('HSET', task, 'parked', '1')
  redis.call('RPUSH', tenant_key(starting, tenant, ':parked'), task_id)
  redis.call('SADD', namespace_of(starting) .. 'tenants:parked', tenant)
  redis.call('HINCRBY', statistics_key(starting), 'parked', 1)
end
-- Admit the tenant's parked tasks while it has room, oldest first. Each is owed its
-- publish as a promoted task is: a worker's dispatcher publishes it at once
-- (Keys.dispatch_queue), the sweeper after the hold-off if that publish is lost (it is
-- due in the starting set at once, score 0). Returns how many were admitted.
local function dispatch_parked(starting, tenant)
  local parked = tenant_key(starting, tenant, ':parked')
  local prefix = namespace_of(starting) .. 'task:'
  local admitted = 0
  while tenant_room(starting, tenant) do
    local next_id = redis.call('LPOP', parked)
    if not next_id then break end
    local key = prefix .. next_id
    if redis.call('HGET', key, 'parked') == '1' then
      redis.call('HDEL', key, 'parked')
      redis.call('HINCRBY', statistics_key(starting), 'parked', -1)
      admit(key, next_id, tenant, starting)
      redis.call('HSET', key, 'published', '1', 'recover_at', now_ms() + 3000)
      redis.call('ZADD', starting, 0, next_id)
      redis.call('RPUSH', namespace_of(starting) .. 'dispatch', next_id)
      admitted = admitted + 1
    end
  end
  if redis.call('EXISTS', parked) == 0 then
    redis.call('SREM', namespace_of(starting) .. 'tenants:parked', tenant)
  end
  return admitted
end
-- The task a settle or release promoted from its session's queue ('' if none): the
-- script that ran it returns it, so its caller publishes the run at once.
local PROMOTED = ''
-- The session is free: start the first task queued behind the one that ended (the
-- 'enqueue' strategy), strictly in order. Queued tasks settled meanwhile (cancelled)
-- are skipped. The promoted task is STARTING with its publish owed ('published' 1): the
-- party that promoted it publishes it; if that party dies first, the sweeper publishes
-- it after the hold-off (it is due in the starting set at once, score 0).
local function promote(session, prefix, starting)
  if redis.call('HGET', session, 'closed') == '1' then return end
  local queue = session .. ':queue'
  while true do
    local next_id = redis.call('LPOP', queue)
    if not next_id then return end
    local key = prefix .. next_id
    if redis.call('HGET', key, 'state') == 'starting' then
      redis.call('HSET', session, 'active', next_id)
      redis.call('HDEL', key, 'queued')
      redis.call('HINCRBY', statistics_key(starting), 'queued', -1)
      local tenant = redis.call('HGET', key, 'tenant') or ''
      if tenant_limited(starting, tenant) then
        if not tenant_room(starting, tenant) then
          -- Its session is free, its tenant is not: it waits in the tenant's line.
          park(key, next_id, tenant, starting)
          return
        end
        admit(key, next_id, tenant, starting)
      end
      redis.call('HSET', key, 'published', '1', 'recover_at', now_ms() + 3000)
      redis.call('ZADD', starting, 0, next_id)
      PROMOTED = next_id
      return
    end
  end
end
-- Resolve every pending interaction of the task as cleared (an interaction is pending
-- while its id, a field of '<task>:interactions', has no field in '<task>:responses'),
-- each once, and announce it (InteractionResolved). Returns how many were cleared.
local function clear_pending(task, events, reason)
  local responses = task .. ':responses'
  local cleared = 0
  for _, id in ipairs(redis.call('HKEYS', task .. ':interactions')) do
    local resolution = {type='cleared', reason=reason}
    if redis.call('HSETNX', responses, id, cjson.encode(resolution)) == 1 then
      redis.call('XADD', events, '*', 'k', 'e', 't', 'resolved', 'd',
                 cjson.encode({interaction_id=id, resolution=resolution}))
      cleared = cleared + 1
    end
  end
  return cleared
end
-- The usage a paused task's runs measured before it paused (unknown if none recorded).
local function paused_usage(task)
  local stored = redis.call('HGET', task, 'paused_usage')
  if stored and stored ~= '' then return cjson.decode(stored) end
  local unknown = {}
  for _, f in ipairs(FIELDS) do unknown[f] = cjson.null end
  return unknown
end
-- A single-task session (Keys.session, field 'single' '1') ends with its task: the step
-- that settles the task forgets the session as release_session.lua does (record, lease,
-- fence, handles, queue and grants: a run still going has lost its lease, so its fenced
-- writes are refused) and queues the deletion of its checkpoint thread for any worker, so
-- the session leaves nothing behind whoever settles its task and whether or not the caller
-- that started it is still alive. The namespace's maintenance queue is named from the
-- starting set's key ('<namespace>:starting' -> '<namespace>:maintenance'), the thread id
-- is the session id (Keys.thread_id) and the request is a MaintenanceRequest's JSON (no
-- reply: nobody waits for it).
local function end_single_task_session(session, lease, starting, task_id)
  if redis.call('HGET', session, 'single') ~= '1' then return end
  local prefix = string.sub(starting, 1, #starting - #'starting')
  local session_id = string.sub(session, #prefix + #'session:' + 1)
  redis.call('DEL', session, lease, session .. ':fence', session .. ':handles',
             session .. ':queue', session .. ':grants')
  redis.call('RPUSH', prefix .. 'maintenance',
             cjson.encode({id=task_id, op='delete_thread', thread_id=session_id, reply=false}))
end
-- Record a terminal outcome: clear pending interactions (task ended), commit session usage once, keep the answer text streamed
-- so far as the partial output of an outcome that carries none, append the terminal
-- event, free the session when no graph run holds it any more, take the task out of the
-- running and starting sets, and bound the retention of the record and the stream (every
-- settling path goes through here, so every settled task expires).
local function settle(task, session, events, lease, running, starting, task_id, state,
                      outcome, lease_value, run_ended, retention)
  local session_usage = cjson.null
  if redis.call('EXISTS', session) == 1 then
    local stored = redis.call('HGET', session, 'usage')
    local current = stored and cjson.decode(stored) or usage_zero()
    session_usage = usage_add(current, outcome.usage)
    redis.call('HSET', session, 'usage', cjson.encode(session_usage))
  end
  outcome.session_usage = usage_snapshot(session_usage)
  if state ~= 'completed' and absent(outcome.output) then
    local partial = redis.call('HGET', task, 'partial')
    if partial and partial ~= '' then
      outcome.output = {text=partial, complete=false}
    end
  end
  local encoded = cjson.encode(outcome)
  local now = now_ms()
  local stats = statistics_key(starting)
  local waits = redis.call('HMGET', task, 'queued', 'parked', 'admitted', 'tenant')
  if waits[1] == '1' then
    -- Settled while waiting behind another task (cancelled, or its session released).
    redis.call('LREM', session .. ':queue', 0, task_id)
    redis.call('HDEL', task, 'queued')
    redis.call('HINCRBY', stats, 'queued', -1)
  end
  local tenant = waits[4] or ''
  if waits[2] == '1' then
    -- Settled while waiting for its tenant's running limit (cancelled).
    redis.call('LREM', tenant_key(starting, tenant, ':parked'), 0, task_id)
    redis.call('HDEL', task, 'parked')
    redis.call('HINCRBY', stats, 'parked', -1)
  end
  if waits[3] == '1' then
    redis.call('SREM', tenant_key(starting, tenant, ':admitted'), task_id)
  end
  clear_pending(task, events, 'task_ended')
  redis.call('HSET', task, 'state', state, 'outcome', encoded, 'settled_ms', now)
  redis.call('HINCRBY', stats, 'settled:' .. state, 1)
  local created = tonumber(redis.call('HGET', task, 'created_ms') or '')
  if created then observe(stats, 'duration', now - created) end
  -- The record's settled view rides with the terminal entry, so a reader of the stream
  -- has the settled record without reading it (TerminalRecord in wire.records).
  local record = redis.call('HMGET', task, 'claimed_ms', 'cancel')
  redis.call('XADD', events, '*', 'k', 'e', 't', 'terminal', 'd', encoded, 'settled_ms', now,
             'claimed_ms', record[1] or '', 'cancel', record[2] or '')
  redis.call('ZREM', running, task_id)
  redis.call('ZREM', starting, task_id)
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
    promote(session, string.sub(task, 1, #task - #task_id), starting)
  end
  if waits[3] == '1' then dispatch_parked(starting, tenant) end
  redis.call('EXPIRE', task, retention)
  redis.call('EXPIRE', events, retention)
  redis.call('EXPIRE', task .. ':interactions', retention)
  redis.call('EXPIRE', task .. ':responses', retention)
  redis.call('EXPIRE', task .. ':tool_attempts', retention)
  end_single_task_session(session, lease, starting, task_id)
  return encoded
end

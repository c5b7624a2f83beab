-- Shared by the scripts that change task state: terminal states, usage sums, settle().
--! include clock
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
-- Record a terminal outcome: commit session usage once, keep the answer text streamed
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
  redis.call('HSET', task, 'state', state, 'outcome', encoded)
  redis.call('XADD', events, '*', 'k', 'e', 't', 'terminal', 'd', encoded)
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
  end
  redis.call('EXPIRE', task, retention)
  redis.call('EXPIRE', events, retention)
  return encoded
end

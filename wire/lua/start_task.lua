-- KEYS[1] session hash, KEYS[2] task hash, KEYS[3] session lease, KEYS[4] starting set,
-- KEYS[5] the session's queue, KEYS[6] the idempotency key (read and written only when
-- ARGV[6] is not ''), KEYS[7] task statistics
-- ARGV[1] task id, ARGV[2] input JSON, ARGV[3] task key prefix, ARGV[4] session id,
-- ARGV[5] 'reject' | 'enqueue' (when the session is busy), ARGV[6] request fingerprint
-- ('' without an idempotency key), ARGV[7] idempotency retention seconds, ARGV[8] the
-- broker queue the task runs on (kept in the record for every later message of it),
-- ARGV[9..13] the tenant's limits (wire.tenants.TenantLimits.script_args; all '' for
-- none): running, queued, starts per second, bucket size, the limits record's TTL (s);
-- ARGV[13] '' passes no limits at all (a start that knows none: nothing is changed), a
-- TTL with ARGV[9] '' lifts a running limit the tenant had
-- Returns {'ok', created ms} | {'queued', created ms} | {'parked', created ms}
--         | {'rate_limited', ms until a start is allowed} | {'queue_full', parked}
--         | {'replay', task id}
--         | {'adopted', task id} (a replay whose first attempt never published: publish it)
--         | {'reused', task id}
--         | {'unknown'} | {'closed'} | {'unconfirmed', ref} | {'busy', task id}
--         | {'outlived', task id} | {'spent', task id} (a single-task session's task)
-- A replayed key answers before any other check: a retried request gets the task its
-- first attempt started, whatever the session does now. If that attempt died between
-- recording the start and publishing it (the task is still 'starting', its publish never
-- confirmed nor reported unconfirmed), the first retry to find it adopts it: that retry
-- publishes its message ('adopted' is set here, so no later retry publishes it again).
-- Should the first attempt be alive after all and publish too, the claim still runs the
-- task once.
--! include prelude
if ARGV[6] ~= '' then
  local prior = redis.call('GET', KEYS[6])
  if prior then
    local space = string.find(prior, ' ', 1, true)
    local task_id = string.sub(prior, 1, space - 1)
    if string.sub(prior, space + 1) ~= ARGV[6] then return {'reused', task_id} end
    local task_key = ARGV[3] .. task_id
    local fields = redis.call('HMGET', task_key, 'state', 'published', 'queued', 'adopted',
                              'parked')
    -- (A task waiting in its session's queue or its tenant's line has no message by design.)
    if fields[1] == 'starting' and fields[2] == '0' and fields[3] ~= '1' and not fields[4]
        and fields[5] ~= '1' then
      redis.call('HSET', task_key, 'adopted', now_ms())
      return {'adopted', task_id}
    end
    return {'replay', task_id}
  end
end
if redis.call('EXISTS', KEYS[1]) == 0 then return {'unknown'} end
local record = redis.call('HMGET', KEYS[1], 'closed', 'active', 'blocked', 'tenant', 'single')
if record[1] == '1' then return {'closed'} end
-- A single-task session takes one task (it ends when that task settles).
if record[5] == '1' and record[2] and record[2] ~= '' then return {'spent', record[2]} end
if record[3] and record[3] ~= '' then return {'unconfirmed', record[3]} end
local enqueue = ARGV[5] == 'enqueue'
local active = record[2] or ''
local waiting = false
if active ~= '' then
  local state = redis.call('HGET', ARGV[3] .. active, 'state')
  if state and not TERMINAL[state] then
    if not enqueue then return {'busy', active} end
    waiting = true
  end
end
if not waiting and redis.call('EXISTS', KEYS[3]) == 1 then
  -- A graph run outlived its settled task; a queued task starts when it ends.
  if not enqueue then return {'outlived', active} end
  waiting = true
end
if not waiting and redis.call('LLEN', KEYS[5]) > 0 then waiting = enqueue end
local now = now_ms()
-- The tenant's limits (docs/tenants.md), checked before anything is written: a start
-- refused by one leaves no trace. A start behind its session's task meets the running
-- limit when promote() frees the session.
local tenant = record[4] or ''
local running = tonumber(ARGV[9])
if running and not waiting and ARGV[10] ~= '' then
  local parked = redis.call('LLEN', tenant_key(KEYS[4], tenant, ':parked'))
  local free = running - redis.call('SCARD', tenant_key(KEYS[4], tenant, ':admitted'))
  if free < 0 then free = 0 end
  if parked >= free and parked - free >= tonumber(ARGV[10]) then
    return {'queue_full', parked}
  end
end
if ARGV[11] ~= '' then
  -- A token bucket in thousandths of a start: full when absent, refilled at the rate.
  local rate, size = tonumber(ARGV[11]), tonumber(ARGV[12]) * 1000
  local bucket_key = tenant_key(KEYS[4], tenant, ':rate')
  local bucket = redis.call('HMGET', bucket_key, 'tokens', 'at')
  local tokens = tonumber(bucket[1]) or size
  local at = tonumber(bucket[2]) or now
  if now > at then tokens = math.min(size, tokens + (now - at) * rate) end
  if tokens < 1000 then return {'rate_limited', math.ceil((1000 - tokens) / rate)} end
  redis.call('HSET', bucket_key, 'tokens', math.floor(tokens - 1000), 'at', now)
  -- Kept a minute past the time it takes to fill (an absent bucket is full).
  redis.call('PEXPIRE', bucket_key, math.ceil(size / rate) + 60000)
end
-- 'published' turns 1 once the caller saw the publish return (see confirm_start.lua).
redis.call('HSET', KEYS[2], 'session', ARGV[4], 'state', 'starting', 'input', ARGV[2],
           'deliveries', 0, 'published', 0, 'created_ms', now, 'tenant', record[4] or '',
           'queue', ARGV[8])
redis.call('HINCRBY', KEYS[7], 'started', 1)
if ARGV[6] ~= '' then
  redis.call('SET', KEYS[6], ARGV[1] .. ' ' .. ARGV[6], 'EX', ARGV[7])
  redis.call('HSET', KEYS[2], 'idempotency', KEYS[6])
end
local limits = tenant_key(KEYS[4], tenant, '')
if running then
  redis.call('HSET', limits, 'running', running)
  if ARGV[10] ~= '' then redis.call('HSET', limits, 'queued', ARGV[10])
  else redis.call('HDEL', limits, 'queued') end
  redis.call('EXPIRE', limits, ARGV[13])
elseif ARGV[13] ~= '' and redis.call('HDEL', limits, 'running', 'queued') > 0 then
  -- The limit was lifted: what it parked goes now.
  dispatch_parked(KEYS[4], tenant)
end
if waiting then
  -- Behind the running task: no message yet, not in the starting set; the settle that
  -- frees the session promotes it (see promote() in the prelude).
  redis.call('HSET', KEYS[2], 'queued', '1')
  redis.call('HINCRBY', KEYS[7], 'queued', 1)
  redis.call('RPUSH', KEYS[5], ARGV[1])
  return {'queued', now}
end
redis.call('HSET', KEYS[1], 'active', ARGV[1])
if running then
  -- Parked starts go first (a limit raised since is applied here).
  dispatch_parked(KEYS[4], tenant)
  if not tenant_room(KEYS[4], tenant) then
    park(KEYS[2], ARGV[1], tenant, KEYS[4])
    return {'parked', now}
  end
  admit(KEYS[2], ARGV[1], tenant, KEYS[4])
end
redis.call('ZADD', KEYS[4], now, ARGV[1])
return {'ok', now}

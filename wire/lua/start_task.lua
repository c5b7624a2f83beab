-- KEYS[1] session hash, KEYS[2] task hash, KEYS[3] session lease, KEYS[4] starting set,
-- KEYS[5] the session's queue, KEYS[6] the idempotency key (read and written only when
-- ARGV[6] is not ''), KEYS[7] task statistics
-- ARGV[1] task id, ARGV[2] input JSON, ARGV[3] task key prefix, ARGV[4] session id,
-- ARGV[5] 'reject' | 'enqueue' (when the session is busy), ARGV[6] request fingerprint
-- ('' without an idempotency key), ARGV[7] idempotency retention seconds, ARGV[8] the
-- broker queue the task runs on (kept in the record for every later message of it)
-- Returns {'ok', created ms} | {'queued', created ms} | {'replay', task id}
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
    local fields = redis.call('HMGET', task_key, 'state', 'published', 'queued', 'adopted')
    if fields[1] == 'starting' and fields[2] == '0' and fields[3] ~= '1' and not fields[4] then
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
-- 'published' turns 1 once the caller saw the publish return (see confirm_start.lua).
redis.call('HSET', KEYS[2], 'session', ARGV[4], 'state', 'starting', 'input', ARGV[2],
           'deliveries', 0, 'published', 0, 'created_ms', now, 'tenant', record[4] or '',
           'queue', ARGV[8])
redis.call('HINCRBY', KEYS[7], 'started', 1)
if ARGV[6] ~= '' then
  redis.call('SET', KEYS[6], ARGV[1] .. ' ' .. ARGV[6], 'EX', ARGV[7])
  redis.call('HSET', KEYS[2], 'idempotency', KEYS[6])
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
redis.call('ZADD', KEYS[4], now, ARGV[1])
return {'ok', now}

-- KEYS[1] task hash, KEYS[2] session lease, KEYS[3] session fence counter, KEYS[4] events,
-- KEYS[5] session hash, KEYS[6] running set, KEYS[7] starting set, KEYS[8] claim statistics,
-- KEYS[9] dead-letter stream, KEYS[10] dead-letter counts
-- ARGV[1] worker token, ARGV[2] lease milliseconds, ARGV[3] the session id the message names,
-- ARGV[4] task id, ARGV[5] worker-loss policy ('resume' | 'unresolved'),
-- ARGV[6] most deliveries, ARGV[7] outcome JSON if the lost run may not resume,
-- ARGV[8] outcome JSON if the deliveries are exhausted, ARGV[9] retention seconds,
-- ARGV[10] most dead letters kept
-- A task found 'running' without a lease lost its worker: it resumes under a higher fence,
-- or is settled by the deployment's policy, its cancel request or the delivery bound.
-- One handed back by a stopping worker (field 'handed_back') was not lost: it resumes
-- whatever the policy, without counting against the bound; if its cancellation was
-- requested meanwhile it is settled Cancelled here (its run was seen to end), usage
-- unknown. Only lost deliveries count: a hand-back returned the delivery it used.
-- Returns {'claimed', lease value, previous state ('handed_back' after a hand-back),
--          deliveries, task fields, session fields}
--         | {'missing'} | {'terminal'} | {'busy'} (another live run holds the session)
--         | {'lost'} | {'exhausted'} | {'cancelled'} | {'released'} (settled here)
--         | {'waiting'} (paused for the caller, not answered yet)
-- A task of a released session (closed and not persistent, or its record gone: then no
-- fence is issued for it ever again) never runs: one never claimed is settled Cancelled
-- with measured-zero usage (no model was called), a lost run by the lost-run outcome. A
-- run of it still holding the lease is left to end on its own (busy).
-- A task paused for the caller ('awaiting_response') is claimed only once every interaction
-- it waits for is resolved ('resume'); then its run resumes the graph from the interrupt,
-- under a new fence, without counting a delivery. Else the message is dropped ('waiting').
-- Every result is counted in KEYS[8] (field: the result), in this same step: a test or an
-- operator can see that a message was consumed by the claim, not only taken off the queue.
--! include prelude
--! include dead_letters
local function counted(result)
  redis.call('HINCRBY', KEYS[8], result, 1)
  return {result}
end
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return counted('missing') end
if redis.call('HGET', KEYS[1], 'session') ~= ARGV[3] then return counted('missing') end
redis.call('ZREM', KEYS[7], ARGV[4])
if TERMINAL[state] then return counted('terminal') end
-- Queued behind another task, or parked by its tenant's running limit: no message of it
-- should exist before its promotion.
local waits = redis.call('HMGET', KEYS[1], 'queued', 'parked')
if waits[1] == '1' or waits[2] == '1' then return counted('busy') end
local paused = state == 'awaiting_response'
if paused and redis.call('HGET', KEYS[1], 'resume') ~= '1' then return counted('waiting') end
local retention = tonumber(ARGV[9])
local flags = redis.call('HMGET', KEYS[5], 'closed', 'persistent')
local released = redis.call('EXISTS', KEYS[5]) == 0 or (flags[1] == '1' and flags[2] ~= '1')
local held = redis.call('EXISTS', KEYS[2]) == 1
if released and (state == 'starting' or not held) then
  if state == 'starting' then
    local outcome = {type='cancelled', task_id=ARGV[4], output=cjson.null, usage=usage_zero()}
    settle(KEYS[1], KEYS[5], KEYS[4], KEYS[2], KEYS[6], KEYS[7], ARGV[4], 'cancelled',
           outcome, '', false, retention)
  elseif paused then
    -- Nothing runs a paused task: it ends Cancelled with what its runs measured.
    local outcome = {type='cancelled', task_id=ARGV[4], output=cjson.null,
                     usage=paused_usage(KEYS[1])}
    settle(KEYS[1], KEYS[5], KEYS[4], KEYS[2], KEYS[6], KEYS[7], ARGV[4], 'cancelled',
           outcome, '', false, retention)
  else
    settle(KEYS[1], KEYS[5], KEYS[4], KEYS[2], KEYS[6], KEYS[7], ARGV[4], 'unresolved',
           cjson.decode(ARGV[7]), '', false, retention)
  end
  return counted('released')
end
if held then return counted('busy') end
local previous = state
if state == 'running' and redis.call('HGET', KEYS[1], 'handed_back') == '1' then
  previous = 'handed_back'
  redis.call('HDEL', KEYS[1], 'handed_back')
  if redis.call('HGET', KEYS[1], 'cancel') == '1' then
    local unknown = {}
    for _, f in ipairs(FIELDS) do unknown[f] = cjson.null end
    local outcome = {type='cancelled', task_id=ARGV[4], output=cjson.null, usage=unknown}
    settle(KEYS[1], KEYS[5], KEYS[4], KEYS[2], KEYS[6], KEYS[7], ARGV[4], 'cancelled', outcome,
           '', false, retention)
    return counted('cancelled')
  end
elseif state == 'running' then
  -- A lost run of a task whose cancellation was requested is not resumed: nobody saw
  -- whether it stopped.
  if ARGV[5] ~= 'resume' or redis.call('HGET', KEYS[1], 'cancel') == '1' then
    settle(KEYS[1], KEYS[5], KEYS[4], KEYS[2], KEYS[6], KEYS[7], ARGV[4], 'unresolved',
           cjson.decode(ARGV[7]), '', false, retention)
    return counted('lost')
  end
  if tonumber(redis.call('HGET', KEYS[1], 'deliveries') or '0') >= tonumber(ARGV[6]) then
    -- The task is given up: settled Failed and recorded as a dead letter in this one step.
    local exhausted = cjson.decode(ARGV[8])
    local cause = exhausted.message or ''
    local owner = redis.call('HMGET', KEYS[1], 'tenant', 'queue')
    settle(KEYS[1], KEYS[5], KEYS[4], KEYS[2], KEYS[6], KEYS[7], ARGV[4], 'failed',
           exhausted, '', false, retention)
    dead_letter(KEYS[9], KEYS[10], retention * 1000, tonumber(ARGV[10]), 'max_deliveries',
                ARGV[4], ARGV[3], owner[1] or '', owner[2] or '', ARGV[4], cause)
    return counted('exhausted')
  end
end
local deliveries
if paused then
  -- A resume is no lost delivery: the bound counts runs lost to their workers.
  deliveries = tonumber(redis.call('HGET', KEYS[1], 'deliveries') or '0')
  redis.call('HDEL', KEYS[1], 'resume', 'awaiting')
else
  deliveries = redis.call('HINCRBY', KEYS[1], 'deliveries', 1)
end
local fence = redis.call('INCR', KEYS[3])
local value = fence .. ':' .. ARGV[1]
local now = now_ms()
redis.call('SET', KEYS[2], value, 'PX', ARGV[2])
redis.call('HSET', KEYS[1], 'state', 'running', 'fence', fence, 'claimed_ms', now)
-- A resumed run starts its answer over: the lost run's streamed text is superseded.
-- (A run resuming from an interrupt goes on with the answer of the run that paused.)
redis.call('HDEL', KEYS[1], 'recover_at')
if not paused then redis.call('HDEL', KEYS[1], 'partial') end
redis.call('ZADD', KEYS[6], now, ARGV[4])
if state == 'starting' then
  redis.call('XADD', KEYS[4], '*', 'k', 'e', 't', 'started', 'd', '{}')
  local created = tonumber(redis.call('HGET', KEYS[1], 'created_ms') or '')
  if created then observe(statistics_key(KEYS[7]), 'wait', now - created) end
end
redis.call('HINCRBY', KEYS[8], 'claimed', 1)
return {'claimed', value, previous, deliveries, redis.call('HGETALL', KEYS[1]),
        redis.call('HGETALL', KEYS[5])}

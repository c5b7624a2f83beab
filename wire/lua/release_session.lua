-- KEYS[1] session hash, KEYS[2] session lease, KEYS[3] session fence counter,
-- KEYS[4] session handles, KEYS[5] running set, KEYS[6] starting set; with an unconfirmed
-- start of this handle: KEYS[7] its task hash, KEYS[8] its events
-- ARGV[1] task key prefix, ARGV[2] 'close' | 'forget', ARGV[3] the unconfirmed start's task
-- id ('' if none), ARGV[4] retention seconds of a settled task's record and stream
-- Releases a non-persistent session. 'close' marks it closed (no task may start any more);
-- an unconfirmed start no worker has claimed yet can then never run, so it is settled
-- Cancelled with measured-zero usage here, as is an active task its tenant's running limit
-- parked (its record tells the caller what became of it;
-- a claim that came first runs it to its end). When none of its tasks is unsettled, the
-- session is forgotten in the same step. 'forget' (after the caller stopped its task)
-- forgets it whatever still runs. Forgetting deletes the record, lease, fence and handle
-- keys (and its approval grants): a run still going has lost its lease, so its fenced writes are refused, and a later
-- claim finds no record, so the task is settled without running and no fence of the
-- session is ever issued again (fences never repeat).
-- Returns {'forgotten', ran} | {'closed', active task id} | {'unknown'}; ran is '1' when
-- a run of the session was ever claimed (its fence counter existed), '0' when none was:
-- then no checkpoint of it was ever written, and its thread holds nothing to delete.
--! include prelude
if redis.call('EXISTS', KEYS[1]) == 0 then return {'unknown'} end
local queue = KEYS[1] .. ':queue'
if ARGV[2] == 'close' then
  redis.call('HSET', KEYS[1], 'closed', '1')
  -- Tasks queued behind the active one never run now: settled Cancelled, zero usage.
  for _, queued in ipairs(redis.call('LRANGE', queue, 0, -1)) do
    local key = ARGV[1] .. queued
    if redis.call('HGET', key, 'state') == 'starting' then
      local outcome = {type='cancelled', task_id=queued, output=cjson.null, usage=usage_zero()}
      settle(key, KEYS[1], key .. ':events', KEYS[2], KEYS[5], KEYS[6], queued,
             'cancelled', outcome, '', false, tonumber(ARGV[4]))
    end
  end
  redis.call('DEL', queue)
  if #KEYS >= 8 and ARGV[3] ~= '' and redis.call('HGET', KEYS[7], 'state') == 'starting' then
    local outcome = {type='cancelled', task_id=ARGV[3], output=cjson.null, usage=usage_zero()}
    settle(KEYS[7], KEYS[1], KEYS[8], KEYS[2], KEYS[5], KEYS[6], ARGV[3], 'cancelled', outcome,
           '', false, tonumber(ARGV[4]))
  end
  local active = redis.call('HGET', KEYS[1], 'active') or ''
  local parked_key = ARGV[1] .. active
  if active ~= '' and redis.call('HGET', parked_key, 'parked') == '1' then
    -- Waiting for its tenant's running limit, with no run message: it never runs now.
    local outcome = {type='cancelled', task_id=active, output=cjson.null, usage=usage_zero()}
    settle(parked_key, KEYS[1], parked_key .. ':events', KEYS[2], KEYS[5], KEYS[6], active,
           'cancelled', outcome, '', false, tonumber(ARGV[4]))
  end
  if active ~= '' then
    local state = redis.call('HGET', ARGV[1] .. active, 'state')
    if state and not TERMINAL[state] then return {'closed', active} end
  end
end
local ran = redis.call('EXISTS', KEYS[3])
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], queue, KEYS[1] .. ':grants')
return {'forgotten', tostring(ran)}

-- KEYS[1] session hash, KEYS[2] session lease, KEYS[3] session fence counter,
-- KEYS[4] session handles
-- ARGV[1] task key prefix, ARGV[2] 'close' | 'forget'
-- Releases a non-persistent session. 'close' marks it closed (no task may start any more)
-- and, when none of its tasks is unsettled, forgets it in the same step. 'forget' (after
-- the caller stopped its task) forgets it whatever still runs. Forgetting deletes the
-- record, lease, fence and handle keys: a run still going has lost its lease, so its
-- fenced writes are refused, and a later claim finds no record, so the task is settled
-- without running and no fence of the session is ever issued again (fences never repeat).
-- Returns {'forgotten'} | {'closed', active task id} | {'unknown'}
--! include prelude
if redis.call('EXISTS', KEYS[1]) == 0 then return {'unknown'} end
if ARGV[2] == 'close' then
  local active = redis.call('HGET', KEYS[1], 'active') or ''
  if active ~= '' then
    local state = redis.call('HGET', ARGV[1] .. active, 'state')
    if state and not TERMINAL[state] then
      redis.call('HSET', KEYS[1], 'closed', '1')
      return {'closed', active}
    end
  end
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
return {'forgotten'}

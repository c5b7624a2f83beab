-- KEYS[1] session hash, KEYS[2] session handles, KEYS[3] session lease,
-- KEYS[4] the thread's latest-checkpoint pointer
-- ARGV[1] task key prefix, ARGV[2] spec JSON, ARGV[3] handle id, ARGV[4] handle TTL ms,
-- ARGV[5] profile name, ARGV[6] profile digest
-- Opens one more handle on a persistent session. The configuration (spec) may change only
-- while no other handle is open. Returns {'ok'} | {'unknown'} | {'profile'}
-- | {'unconfirmed', ref} | {'busy', task id} | {'outlived'} | {'configured'}
-- | {'unavailable'} (the record has history but the checkpoint thread is gone)
--! include prelude
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

-- KEYS[1] session hash, KEYS[2] task hash, KEYS[3] session lease, KEYS[4] starting set
-- ARGV[1] task id, ARGV[2] input JSON, ARGV[3] task key prefix, ARGV[4] session id
-- Returns {'ok'} | {'unknown'} | {'closed'} | {'unconfirmed', ref} | {'busy', task id}
--         | {'outlived', task id}
--! include prelude
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
-- 'published' turns 1 once the caller saw the publish return (see confirm_start.lua).
redis.call('HSET', KEYS[2], 'session', ARGV[4], 'state', 'starting', 'input', ARGV[2],
           'deliveries', 0, 'published', 0)
redis.call('HSET', KEYS[1], 'active', ARGV[1])
redis.call('ZADD', KEYS[4], now_ms(), ARGV[1])
return {'ok'}

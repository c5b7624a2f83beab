-- KEYS[1] session lease, KEYS[2] session hash, KEYS[3] task hash
-- ARGV[1] lease value, ARGV[2] task id
-- The graph run ended after its task was settled elsewhere: free the session.
--! include prelude
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local state = redis.call('HGET', KEYS[3], 'state')
if (not state or TERMINAL[state]) and redis.call('HGET', KEYS[2], 'active') == ARGV[2] then
  redis.call('HSET', KEYS[2], 'active', '')
end
return 1

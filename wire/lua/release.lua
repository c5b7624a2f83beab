-- KEYS[1] session lease, KEYS[2] session hash, KEYS[3] task hash
-- ARGV[1] lease value, ARGV[2] task id
-- KEYS[4] starting set
-- The graph run ended after its task was settled elsewhere: free the session, and
-- promote the task queued behind it, if any.
-- Returns {freed (1|0), promoted task id or ''}
--! include prelude
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
if redis.call('EXISTS', KEYS[1]) == 1 then return {0, ''} end
local state = redis.call('HGET', KEYS[3], 'state')
if (not state or TERMINAL[state]) and redis.call('HGET', KEYS[2], 'active') == ARGV[2] then
  redis.call('HSET', KEYS[2], 'active', '')
  promote(KEYS[2], string.sub(KEYS[3], 1, #KEYS[3] - #ARGV[2]), KEYS[4])
end
return {1, PROMOTED}

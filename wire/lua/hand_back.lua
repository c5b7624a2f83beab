-- KEYS[1] session lease, KEYS[2] session hash, KEYS[3] task hash, KEYS[4] starting set
-- ARGV[1] lease value, ARGV[2] task id
-- The worker is stopping and this run ended unsettled: the task goes back to the queue,
-- and that is no loss. Frees the lease, marks the record handed back (the next claim
-- resumes it without counting a lost delivery, whatever the worker-loss policy) and
-- returns the delivery it used. A task settled meanwhile is only released.
-- Returns 1 if handed back, 0 otherwise.
--! include prelude
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
local state = redis.call('HGET', KEYS[3], 'state')
if state == 'running' then
  redis.call('HSET', KEYS[3], 'handed_back', '1')
  redis.call('HINCRBY', KEYS[3], 'deliveries', -1)
  return 1
end
if (not state or TERMINAL[state]) and redis.call('HGET', KEYS[2], 'active') == ARGV[2] then
  redis.call('HSET', KEYS[2], 'active', '')
  promote(KEYS[2], string.sub(KEYS[3], 1, #KEYS[3] - #ARGV[2]), KEYS[4])
end
return 0

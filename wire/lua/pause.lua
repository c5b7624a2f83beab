-- KEYS[1] task hash, KEYS[2] session lease, KEYS[3] events, KEYS[4] running set,
-- KEYS[5] the task's interactions, KEYS[6] the task's responses
-- ARGV[1] lease value, ARGV[2] task id, ARGV[3] usage JSON the task's runs measured so far,
-- ARGV[4..] pairs (interaction id, InteractionPayload JSON)
-- The run's graph stopped at an interrupt (an approval or a question): the task waits
-- for the caller and holds no worker. In one step, under the run's lease: each new
-- interaction is stored (pending until it has a response) and announced on the stream
-- (InteractionRequested), the task goes 'awaiting_response', its lease is released and
-- it leaves the running set (nothing runs it now; the sweeper leaves it alone). The
-- session stays the task's ('active'): no other task starts until it settles.
-- A cancellation recorded by now wins: nothing is stored, and the run settles Cancelled.
-- Returns {'paused'} | {'stale'} (the lease is not this run's) | {'terminal'}
--         | {'cancelled'}
--! include prelude
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return {'stale'} end
local state = redis.call('HGET', KEYS[1], 'state')
if not state or TERMINAL[state] then return {'terminal'} end
if redis.call('HGET', KEYS[1], 'cancel') == '1' then return {'cancelled'} end
local first = ''
for i = 4, #ARGV, 2 do
  if first == '' then first = ARGV[i] end
  if redis.call('HSETNX', KEYS[5], ARGV[i], ARGV[i + 1]) == 1 then
    redis.call('XADD', KEYS[3], '*', 'k', 'e', 't', 'interaction', 'd', ARGV[i + 1])
  end
end
redis.call('HSET', KEYS[1], 'state', 'awaiting_response', 'awaiting', first,
           'paused_usage', ARGV[3])
redis.call('HDEL', KEYS[1], 'resume')
redis.call('DEL', KEYS[2])
redis.call('ZREM', KEYS[4], ARGV[2])
return {'paused'}

-- KEYS[1] maintenance consumer set, KEYS[2] this consumer's liveness key, KEYS[3] the
-- maintenance queue, KEYS[4] this consumer's processing list
-- ARGV[1] consumer id, ARGV[2] liveness milliseconds (0: this consumer is leaving),
-- ARGV[3] liveness key prefix, ARGV[4] processing list prefix
-- A live consumer registers itself and renews its liveness; then the requests in the
-- processing list of every consumer whose liveness lapsed (a dead worker), or of this one
-- when it leaves, go back to the front of the queue for any worker to carry out.
-- Returns the number of requests put back.
local function give_back(processing)
  local moved = 0
  while redis.call('LMOVE', processing, KEYS[3], 'RIGHT', 'LEFT') do moved = moved + 1 end
  return moved
end
local moved = 0
if tonumber(ARGV[2]) > 0 then
  redis.call('SADD', KEYS[1], ARGV[1])
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
else
  redis.call('DEL', KEYS[2])
  redis.call('SREM', KEYS[1], ARGV[1])
  moved = moved + give_back(KEYS[4])
end
for _, member in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if member ~= ARGV[1] and redis.call('EXISTS', ARGV[3] .. member) == 0 then
    moved = moved + give_back(ARGV[4] .. member)
    redis.call('SREM', KEYS[1], member)
  end
end
return moved

-- KEYS[1] session hash, KEYS[2] task hash, KEYS[3] starting set
-- ARGV[1] task id
-- Undo a start whose message surely never reached the broker: no trace is left.
-- Returns 1 if undone.
redis.call('ZREM', KEYS[3], ARGV[1])
if redis.call('HGET', KEYS[2], 'state') ~= 'starting' then return 0 end
if redis.call('HGET', KEYS[2], 'deliveries') ~= '0' then return 0 end
redis.call('DEL', KEYS[2])
if redis.call('HGET', KEYS[1], 'active') == ARGV[1] then
  redis.call('HSET', KEYS[1], 'active', '')
end
return 1

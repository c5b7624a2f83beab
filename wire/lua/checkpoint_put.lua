-- KEYS[1] session lease, KEYS[2] checkpoint document (langgraph-checkpoint-redis
-- ``checkpoint:*``), KEYS[3] the thread's latest-checkpoint pointer (``checkpoint_latest:*``)
-- ARGV[1] the writer's lease value, ARGV[2] checkpoint document JSON,
-- ARGV[3] TTL seconds of both keys (0: none)
-- The fenced checkpoint write: the lease check and the write it guards are one atomic
-- step, so a writer paused after any earlier check cannot land a stale turn. Writes the
-- same document and pointer as ``AsyncRedisSaver.aput``. Returns 1 written | 0 refused.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('JSON.SET', KEYS[2], '$', ARGV[2])
redis.call('SET', KEYS[3], KEYS[2])
local ttl = tonumber(ARGV[3])
if ttl > 0 then
  redis.call('EXPIRE', KEYS[2], ttl)
  redis.call('EXPIRE', KEYS[3], ttl)
end
return 1

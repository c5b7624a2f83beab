-- KEYS[1] session lease, KEYS[2] the checkpoint document the writes belong to,
-- KEYS[3] its write-keys registry (sorted set ``write_keys_zset:*``),
-- KEYS[4..] write documents (``checkpoint_write:*``), one per write
-- ARGV[1] the writer's lease value, ARGV[2] TTL seconds (0: none),
-- ARGV[3] '1' to register the write keys in KEYS[3], ARGV[4..] write document JSON
-- The fenced pending writes: stored only while the lease is the writer's, in one atomic
-- step with the check. Writes what ``AsyncRedisSaver.aput_writes`` writes: the documents,
-- ``has_writes`` merged into the checkpoint (skipped if it is missing, as upstream), the
-- registry entries scored by position. Returns 1 written | 0 refused.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local ttl = tonumber(ARGV[2])
for i = 4, #KEYS do
  redis.call('JSON.SET', KEYS[i], '$', ARGV[i])
end
redis.pcall('JSON.MERGE', KEYS[2], '$', '{"has_writes":true}')
if ARGV[3] == '1' then
  for i = 4, #KEYS do
    redis.call('ZADD', KEYS[3], i - 4, KEYS[i])
  end
end
if ttl > 0 then
  for i = 4, #KEYS do
    redis.call('EXPIRE', KEYS[i], ttl)
  end
  if ARGV[3] == '1' then redis.call('EXPIRE', KEYS[3], ttl) end
end
return 1

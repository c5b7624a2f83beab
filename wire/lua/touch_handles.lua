-- KEYS[1] session handles
-- ARGV[1] handle TTL ms, ARGV[2..] handle ids
-- Registers or refreshes open handles (the caller's heartbeat).
--! include clock
local expiry = now_ms() + tonumber(ARGV[1])
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], expiry, ARGV[i]) end
return #ARGV - 1

-- KEYS[1] session hash, KEYS[2] task hash, KEYS[3] starting set
-- ARGV[1] task id
-- Undo a start whose message surely never reached the broker: no trace is left (its
-- idempotency key goes too, so a retry of the request starts it afresh). A task queued
-- behind it is promoted (the sweeper publishes it after the hold-off).
-- Returns 1 if undone.
--! include prelude
redis.call('ZREM', KEYS[3], ARGV[1])
if redis.call('HGET', KEYS[2], 'state') ~= 'starting' then return 0 end
if redis.call('HGET', KEYS[2], 'deliveries') ~= '0' then return 0 end
local idempotency = redis.call('HGET', KEYS[2], 'idempotency')
if idempotency and idempotency ~= '' then redis.call('DEL', idempotency) end
if redis.call('HGET', KEYS[2], 'queued') == '1' then
  redis.call('LREM', KEYS[1] .. ':queue', 0, ARGV[1])
  redis.call('HINCRBY', statistics_key(KEYS[3]), 'queued', -1)
end
local tenant_of = redis.call('HMGET', KEYS[2], 'tenant', 'admitted')
redis.call('DEL', KEYS[2])
if tenant_of[2] == '1' then
  redis.call('SREM', tenant_key(KEYS[3], tenant_of[1] or '', ':admitted'), ARGV[1])
  dispatch_parked(KEYS[3], tenant_of[1] or '')
end
if redis.call('HGET', KEYS[1], 'active') == ARGV[1] then
  redis.call('HSET', KEYS[1], 'active', '')
  promote(KEYS[1], string.sub(KEYS[2], 1, #KEYS[2] - #ARGV[1]), KEYS[3])
end
return 1

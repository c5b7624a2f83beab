-- KEYS[1] running set
-- ARGV[1] task key prefix, ARGV[2] session key prefix, ARGV[3] lease key suffix
-- One read of the whole running set per sweep: returns {task id, session id, ...} of the
-- running tasks whose lease lapsed and whose republish hold-off has passed (RECOVER then
-- decides each atomically), and drops members that are no longer running.
--! include clock
local now = now_ms()
local out = {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local record = redis.call('HMGET', ARGV[1] .. id, 'state', 'session', 'recover_at')
  if record[1] ~= 'running' then
    redis.call('ZREM', KEYS[1], id)
  elseif redis.call('EXISTS', ARGV[2] .. record[2] .. ARGV[3]) == 0
      and tonumber(record[3] or '0') <= now then
    table.insert(out, id)
    table.insert(out, record[2])
  end
end
return out

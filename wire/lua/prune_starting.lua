-- KEYS[1] starting set
-- ARGV[1] task key prefix, ARGV[2] session key prefix, ARGV[3] milliseconds an entry must
-- be old before it is looked at, ARGV[4] most entries looked at
-- Keeps the starting set to unsettled starts of live sessions, whichever Redis is the
-- broker: drops entries whose task is settled or gone, and returns {task id, session id,
-- ...} of starts whose session was released and forgotten (the caller settles each, so it
-- never runs and its record expires).
--! include clock
local before = now_ms() - tonumber(ARGV[3])
local out = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', before, 'LIMIT', 0,
                                tonumber(ARGV[4]))) do
  local record = redis.call('HMGET', ARGV[1] .. id, 'state', 'session', 'resume')
  if record[1] ~= 'starting' and not (record[1] == 'awaiting_response' and record[3] == '1') then
    redis.call('ZREM', KEYS[1], id)
  elseif not record[2] or redis.call('EXISTS', ARGV[2] .. record[2]) == 0 then
    table.insert(out, id)
    table.insert(out, record[2] or '')
  end
end
return out

-- KEYS[1] starting set, KEYS[2..] the broker's lists of the run queue
-- ARGV[1] task key prefix, ARGV[2] milliseconds a start may stay unclaimed, ARGV[3]
-- milliseconds before another sweep may republish it, ARGV[4] most queued messages to search
-- A task still 'starting' long after its start, whose message is in no queue list, was
-- taken by a worker that died before claiming it (kombu keeps such a message unacked until
-- the visibility timeout). Each task is looked at once per unclaimed period, and the queue
-- is read only when some task is due. Returns {task id, session id, ...} to publish again;
-- nothing when the backlog is longer than ARGV[4] (its messages are most likely waiting).
--! include clock
local now = now_ms()
local stale = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]),
                         'LIMIT', 0, 100)
local out = {}
local due = {}
for _, id in ipairs(stale) do
  local record = redis.call('HMGET', ARGV[1] .. id, 'state', 'recover_at', 'session')
  if record[1] ~= 'starting' then
    redis.call('ZREM', KEYS[1], id)
  elseif tonumber(record[2] or '0') <= now then
    table.insert(due, {id, record[3]})
  end
end
if #due == 0 then return out end
local total = 0
for i = 2, #KEYS do total = total + redis.call('LLEN', KEYS[i]) end
if total > tonumber(ARGV[4]) then return out end
-- The ids each waiting message names (its task id among them), read once.
local waiting = {}
for i = 2, #KEYS do
  for _, item in ipairs(redis.call('LRANGE', KEYS[i], 0, -1)) do
    for named in string.gmatch(item, '"id": ?"([%w_%.%-]+)"') do waiting[named] = true end
  end
end
for _, task in ipairs(due) do
  if waiting[task[1]] then
    -- Still queued: look again one unclaimed period later, not at every sweep.
    redis.call('HSET', ARGV[1] .. task[1], 'recover_at', now + tonumber(ARGV[2]))
  else
    redis.call('HSET', ARGV[1] .. task[1], 'recover_at', now + tonumber(ARGV[3]))
    table.insert(out, task[1])
    table.insert(out, task[2])
  end
end
return out

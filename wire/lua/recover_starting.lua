-- KEYS[1] starting set, KEYS[2] the broker's hash of taken-but-unacknowledged messages,
-- KEYS[3..] the broker's lists of the run queue
-- ARGV[1] task key prefix, ARGV[2] milliseconds a start may stay unclaimed, ARGV[3]
-- milliseconds before another sweep may republish it, ARGV[4] most broker messages to
-- search, ARGV[5] the run queue KEYS[3..] belong to
-- Only starts of that queue are looked at: a start of another queue is left to the
-- workers serving it (its message is in none of these lists, which proves nothing), and
-- one of a queue no worker serves waits there.
-- A task still 'starting' long after its start was taken by a worker that died before
-- claiming it, or its message was dropped unclaimed: it is published again, but only when
-- its message provably reached the broker: its publish was confirmed ('published' = 1,
-- written by the caller once the publish returned), or the message is seen now (in a
-- queue list: still waiting; in kombu's unacked hash: taken by a worker and not claimed).
-- A start the caller reported unconfirmed ('published' = 'unconfirmed') whose message is
-- nowhere may never have been sent: it is never republished (and no longer looked at).
-- One whose mark is still pending ('0': the caller's confirmation, or its report of an
-- unconfirmed start, has not landed yet, e.g. refused at maxmemory) is looked at again
-- one unclaimed period later: it is never republished unconfirmed, nor dropped while
-- its caller may still confirm it. Each task is looked at once
-- per unclaimed period, and the broker is read only when some task is due. Returns
-- {task id, session id, ...} to publish again; nothing when the broker holds more than
-- ARGV[4] messages (they are most likely waiting).
--! include clock
local now = now_ms()
-- Up to 100 of this queue's starts are judged per pass, among the 1000 oldest stale ones
-- (other queues' starts are passed over, so a queue no worker serves cannot starve it).
local stale = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]),
                         'LIMIT', 0, 1000)
local out = {}
local due = {}
local judged = 0
for _, id in ipairs(stale) do
  if judged >= 100 then break end
  local record = redis.call('HMGET', ARGV[1] .. id, 'state', 'recover_at', 'session',
                            'published', 'resume', 'queue')
  -- A paused task answered by its caller is due for a resume run like a start.
  if record[1] ~= 'starting' and not (record[1] == 'awaiting_response' and record[5] == '1') then
    redis.call('ZREM', KEYS[1], id)
  elseif record[6] and record[6] ~= '' and record[6] ~= ARGV[5] then
    -- Another queue's start: not this sweeper's to judge.
  else
    judged = judged + 1
    if tonumber(record[2] or '0') <= now then
      table.insert(due, {id, record[3], record[4]})
    end
  end
end
if #due == 0 then return out end
local total = redis.call('HLEN', KEYS[2])
for i = 3, #KEYS do total = total + redis.call('LLEN', KEYS[i]) end
if total > tonumber(ARGV[4]) then return out end
-- The ids each message names (its task id among them), read once.
local pattern = '"id": ?"([%w_%.%-]+)"'
local waiting = {}
for i = 3, #KEYS do
  for _, item in ipairs(redis.call('LRANGE', KEYS[i], 0, -1)) do
    for named in string.gmatch(item, pattern) do waiting[named] = true end
  end
end
local taken = {}
for _, item in ipairs(redis.call('HVALS', KEYS[2])) do
  for named in string.gmatch(item, pattern) do taken[named] = true end
end
for _, task in ipairs(due) do
  local key = ARGV[1] .. task[1]
  if waiting[task[1]] then
    -- Still queued: look again one unclaimed period later, not at every sweep.
    redis.call('HSET', key, 'published', '1', 'recover_at', now + tonumber(ARGV[2]))
  elseif taken[task[1]] or task[3] == '1' then
    redis.call('HSET', key, 'published', '1', 'recover_at', now + tonumber(ARGV[3]))
    table.insert(out, task[1])
    table.insert(out, task[2])
  elseif task[3] == '0' then
    redis.call('HSET', key, 'recover_at', now + tonumber(ARGV[2]))
  else
    redis.call('ZREM', KEYS[1], task[1])
  end
end
return out

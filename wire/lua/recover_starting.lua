-- KEYS[1] starting set, KEYS[2] the broker's hash of taken-but-unacknowledged messages,
-- KEYS[3..] the broker's lists of the run queue
-- ARGV[1] task key prefix, ARGV[2] milliseconds a start may stay unclaimed, ARGV[3]
-- milliseconds before another sweep may republish it, ARGV[4] most broker messages to
-- search, ARGV[5] the run queue KEYS[3..] belong to, ARGV[6] milliseconds after which a
-- start never published is settled, ARGV[7] its Failed outcome (JSON; task id and usage
-- are filled in here), ARGV[8] session key prefix, ARGV[9] events key prefix, ARGV[10]
-- lease key prefix, ARGV[11] running set, ARGV[12] retention seconds
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
-- its caller may still confirm it; once older than ARGV[6] with its message still nowhere,
-- it never ran and never will (its caller stopped between recording and publishing it,
-- and no idempotent retry published it): it is settled Failed with measured-zero usage,
-- freeing its session (a message of it that turns up later finds it settled). Each task
-- is looked at once
-- per unclaimed period, and the broker is read only when some task is due. Returns
-- {what, task id, session id, ...}: what is 'republish' (publish it again), 'settled'
-- (settled here, never ran) or 'promoted' (the settle started the session's next queued
-- task: publish it); nothing when the broker holds more than ARGV[4] messages (they are
-- most likely waiting).
--! include prelude
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
                            'published', 'resume', 'queue', 'created_ms')
  -- A paused task answered by its caller is due for a resume run like a start.
  if record[1] ~= 'starting' and not (record[1] == 'awaiting_response' and record[5] == '1') then
    redis.call('ZREM', KEYS[1], id)
  elseif record[6] and record[6] ~= '' and record[6] ~= ARGV[5] then
    -- Another queue's start: not this sweeper's to judge.
  else
    judged = judged + 1
    if tonumber(record[2] or '0') <= now then
      table.insert(due, {id, record[3], record[4], tonumber(record[7] or '0'), record[1]})
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
    table.insert(out, 'republish')
    table.insert(out, task[1])
    table.insert(out, task[2])
  elseif task[3] == '0' and task[5] == 'starting' and task[4] + tonumber(ARGV[6]) <= now then
    local outcome = cjson.decode(ARGV[7])
    outcome.task_id = task[1]
    outcome.usage = usage_zero()
    PROMOTED = ''
    settle(key, ARGV[8] .. task[2], ARGV[9] .. task[1], ARGV[10] .. task[2], ARGV[11],
           KEYS[1], task[1], 'failed', outcome, '', false, tonumber(ARGV[12]))
    table.insert(out, 'settled')
    table.insert(out, task[1])
    table.insert(out, task[2])
    if PROMOTED ~= '' then
      table.insert(out, 'promoted')
      table.insert(out, PROMOTED)
      table.insert(out, task[2])
    end
  elseif task[3] == '0' then
    redis.call('HSET', key, 'recover_at', now + tonumber(ARGV[2]))
  else
    redis.call('ZREM', KEYS[1], task[1])
  end
end
return out

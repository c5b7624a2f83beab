-- KEYS[1] task hash, KEYS[2] session lease, KEYS[3] session hash, KEYS[4] events,
-- KEYS[5] running set, KEYS[6] starting set
-- ARGV[1] task id, ARGV[2] worker-loss policy, ARGV[3] outcome JSON if the lost run may not
-- resume, ARGV[4] milliseconds before another sweep may republish it, ARGV[5] retention
-- A claimed task whose lease lapsed lost its worker. Returns {'gone'} (settled or not
-- running) | {'alive'} (its lease is held) | {'pending'} (republished moments ago)
-- | {'lost'} (settled Unresolved here) | {'republish'} (the caller publishes it again).
--! include prelude
local state = redis.call('HGET', KEYS[1], 'state')
if state ~= 'running' then
  redis.call('ZREM', KEYS[5], ARGV[1])
  return {'gone'}
end
if redis.call('EXISTS', KEYS[2]) == 1 then return {'alive'} end
local now = now_ms()
local at = tonumber(redis.call('HGET', KEYS[1], 'recover_at') or '0')
if at > now then return {'pending'} end
-- A run handed back by a stopping worker was not lost: its claim decides (see CLAIM).
local handed_back = redis.call('HGET', KEYS[1], 'handed_back') == '1'
if not handed_back and (ARGV[2] ~= 'resume' or redis.call('HGET', KEYS[1], 'cancel') == '1') then
  settle(KEYS[1], KEYS[3], KEYS[4], KEYS[2], KEYS[5], KEYS[6], ARGV[1], 'unresolved',
         cjson.decode(ARGV[3]), '', false, tonumber(ARGV[5]))
  return {'lost'}
end
redis.call('HSET', KEYS[1], 'recover_at', now + tonumber(ARGV[4]))
redis.call('HINCRBY', KEYS[1], 'recoveries', 1)
return {'republish'}

-- KEYS[1] task hash, KEYS[2] session hash, KEYS[3] events, KEYS[4] session lease,
-- KEYS[5] running set, KEYS[6] starting set
-- ARGV[1] lease value ('' when the caller settles without holding the lease)
-- ARGV[2] terminal state, ARGV[3] outcome JSON, ARGV[4] '1' if the settling run ended,
-- ARGV[5] task id, ARGV[6] retention seconds of the task record and stream
-- Returns {'settled', outcome, released, promoted task id or ''} | {'terminal', outcome, released} | {'stale'}
--         | {'missing'}; released is '1' when the session is closed and not persistent, or
--         its record is gone (released and forgotten).
--! include prelude
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {'missing'} end
local flags = redis.call('HMGET', KEYS[2], 'closed', 'persistent')
local gone = redis.call('EXISTS', KEYS[2]) == 0
local released = (gone or (flags[1] == '1' and flags[2] ~= '1')) and '1' or '0'
if TERMINAL[state] then
  return {'terminal', redis.call('HGET', KEYS[1], 'outcome'), released}
end
if ARGV[1] ~= '' and redis.call('GET', KEYS[4]) ~= ARGV[1] then return {'stale'} end
local encoded = settle(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], ARGV[5], ARGV[2],
                       cjson.decode(ARGV[3]), ARGV[1], ARGV[4] == '1', tonumber(ARGV[6]))
return {'settled', encoded, released, PROMOTED}

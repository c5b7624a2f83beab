-- KEYS[1] task hash, KEYS[2] session hash, KEYS[3] events, KEYS[4] session lease,
-- KEYS[5] running set, KEYS[6] starting set
-- ARGV[1] task id, ARGV[2] cancel channel, ARGV[3] retention seconds
-- Pending interactions are cleared first (InteractionResolved, cancellation requested):
-- no response can be recorded for them any more. Then the request is recorded durably (once). A task no worker claimed yet is settled Cancelled
-- with measured-zero usage right here, so it can never start; a running one is told at
-- once over the channel (the durable flag covers a missed message). A task paused for
-- the caller (awaiting_response, also one answered and not yet resumed) has no run: it
-- is settled Cancelled here, with the usage its runs measured before it paused.
-- Returns {'settled', outcome, promoted task id or ''} | {'requested', first (1|0)} | {'terminal'} | {'missing'}
--! include prelude
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {'missing'} end
if TERMINAL[state] then return {'terminal'} end
clear_pending(KEYS[1], KEYS[3], 'cancellation_requested')
local first = redis.call('HSETNX', KEYS[1], 'cancel', '1')
if state == 'awaiting_response' then
  local outcome = {type='cancelled', task_id=ARGV[1], output=cjson.null,
                   usage=paused_usage(KEYS[1])}
  local encoded = settle(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], ARGV[1],
                         'cancelled', outcome, '', false, tonumber(ARGV[3]))
  return {'settled', encoded, PROMOTED}
end
if state == 'starting' then
  local outcome = {type='cancelled', task_id=ARGV[1], output=cjson.null, usage=usage_zero()}
  local encoded = settle(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], ARGV[1],
                         'cancelled', outcome, '', false, tonumber(ARGV[3]))
  return {'settled', encoded, PROMOTED}
end
redis.call('PUBLISH', ARGV[2], ARGV[1])
return {'requested', first}

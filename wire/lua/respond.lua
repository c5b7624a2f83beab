-- KEYS[1] task hash, KEYS[2] the task's interactions, KEYS[3] the task's responses,
-- KEYS[4] events, KEYS[5] starting set, KEYS[6] the session's approval grants,
-- KEYS[7] session hash, KEYS[8] session lease, KEYS[9] running set
-- ARGV[1] task id, ARGV[2] interaction id, ARGV[3] resolution JSON (responded),
-- ARGV[4] the InteractionResolved entry JSON, ARGV[5] '1' if the response approves the
-- interaction's tool for the rest of the session, ARGV[6] '1' if the response cancels the
-- task (an approval's CANCEL decision), ARGV[7] retention seconds
-- The caller answers a pending interaction. Checked and written in one step: the task is
-- not settled and its cancellation not requested, the interaction is the task's and has
-- no resolution yet. The response is recorded exactly once (the interaction is resolved,
-- InteractionResolved is appended), a session grant is added, and once every interaction
-- of the paused task is resolved the task is due for a resume run ('resume'): the caller
-- publishes it, and the sweeper publishes it again if no worker claims it (it is in the
-- starting set, its publish marked done: a resume can always be sent again, the claim
-- admits one run). A CANCEL decision is recorded, then cancels the task in the same step
-- as cancel.lua would: other pending interactions cleared, the request recorded, and a
-- paused task (nothing runs it) settled Cancelled here.
-- Returns {'ok', due ('1' when the task is now due for its resume, else '0')[, outcome
-- JSON when the CANCEL decision settled the task, promoted task id]} | {'missing'} (no such task) | {'terminal'} | {'cancelled'}
--         | {'unknown'} (no such interaction) | {'resolved', resolution JSON}
--! include prelude
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {'missing'} end
if TERMINAL[state] then return {'terminal'} end
if redis.call('HGET', KEYS[1], 'cancel') == '1' then return {'cancelled'} end
local payload = redis.call('HGET', KEYS[2], ARGV[2])
if not payload then return {'unknown'} end
local prior = redis.call('HGET', KEYS[3], ARGV[2])
if prior then return {'resolved', prior} end
redis.call('HSET', KEYS[3], ARGV[2], ARGV[3])
redis.call('XADD', KEYS[4], '*', 'k', 'e', 't', 'resolved', 'd', ARGV[4])
if ARGV[6] == '1' then
  clear_pending(KEYS[1], KEYS[4], 'cancellation_requested')
  redis.call('HSETNX', KEYS[1], 'cancel', '1')
  if state == 'awaiting_response' then
    local outcome = {type='cancelled', task_id=ARGV[1], output=cjson.null,
                     usage=paused_usage(KEYS[1])}
    local encoded = settle(KEYS[1], KEYS[7], KEYS[4], KEYS[8], KEYS[9], KEYS[5], ARGV[1],
                           'cancelled', outcome, '', false, tonumber(ARGV[7]))
    return {'ok', '0', encoded, PROMOTED}
  end
  return {'ok', '0'}
end
if ARGV[5] == '1' then
  local decoded = cjson.decode(payload)
  if type(decoded.session_grant) == 'string' and type(decoded.tool) == 'string' then
    redis.call('SADD', KEYS[6], 'tool:' .. decoded.tool)
  end
end
if state == 'awaiting_response' then
  for _, id in ipairs(redis.call('HKEYS', KEYS[2])) do
    if redis.call('HEXISTS', KEYS[3], id) == 0 then return {'ok', '0'} end
  end
  local now = now_ms()
  redis.call('HSET', KEYS[1], 'resume', '1', 'published', '1', 'recover_at', now + 3000)
  redis.call('ZADD', KEYS[5], now, ARGV[1])
  return {'ok', '1'}
end
return {'ok', '0'}

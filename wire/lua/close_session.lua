-- KEYS[1] session hash; with an unconfirmed start: KEYS[2] its task hash, KEYS[3] its
-- events, KEYS[4] session lease, KEYS[5] running set
-- ARGV[1] the unconfirmed start's task id ('' if none), ARGV[2] retention seconds
-- Releases a non-persistent session: no task of it may start any more. An unconfirmed
-- start no worker has claimed yet can therefore never run: it is settled Cancelled with
-- measured-zero usage here, so its record tells the caller what became of it. (A claim
-- that comes later finds it settled; one that came first runs it to its end.)
--! include prelude
redis.call('HSET', KEYS[1], 'closed', '1')
if #KEYS < 5 or ARGV[1] == '' then return 0 end
if redis.call('HGET', KEYS[2], 'state') ~= 'starting' then return 0 end
local outcome = {type='cancelled', task_id=ARGV[1], output=cjson.null, usage=usage_zero()}
settle(KEYS[2], KEYS[1], KEYS[3], KEYS[4], KEYS[5], ARGV[1], 'cancelled', outcome, '', false,
       tonumber(ARGV[2]))
return 1

-- KEYS[1] session lease, KEYS[2] the task's tool attempts hash
-- ARGV[1] the run's lease value, ARGV[2] the tool call id, ARGV[3] retention seconds
-- Counts one more attempt of the tool call, only for the run holding the session lease
-- (a run whose lease was taken over, or one paused between its check and this step,
-- cannot start a tool). Returns the attempt's number (1 for the call's first), or 0 when
-- the lease is not the run's. The hash lives as long as the task record: the settle
-- gives it the retention TTL; until then it expires after ARGV[3] at the latest.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local attempt = redis.call('HINCRBY', KEYS[2], ARGV[2], 1)
if redis.call('TTL', KEYS[2]) < 0 then redis.call('EXPIRE', KEYS[2], ARGV[3]) end
return attempt

-- KEYS[1] task hash
-- ARGV[1] the task's trace context (JSON, see wire/tracing_context.py)
-- Keeps the trace context of a task its caller just started (only while the caller
-- traces), for every later run message of the task. A record that is gone (rolled back,
-- expired) is not written again: nothing here may outlive its task without a TTL.
-- Returns 1 if written, else 0.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'trace', ARGV[1])
return 1

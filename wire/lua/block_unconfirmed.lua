-- KEYS[1] session hash
-- ARGV[1] reference of the start whose delivery is unknown
-- The session stays blocked: retrying could run the task twice.
redis.call('HSET', KEYS[1], 'blocked', ARGV[1])
return 1

-- KEYS[1] session hash, KEYS[2] the unconfirmed start's task hash
-- ARGV[1] reference of the start whose delivery is unknown (its task id)
-- The session stays blocked: retrying could run the task twice. The start is marked
-- unconfirmed ('published' = 'unconfirmed'): the sweeper never publishes it again unless
-- its message is seen in the broker (a start whose mark is still pending, '0', is only
-- looked at again later: its caller may yet confirm it).
redis.call('HSET', KEYS[1], 'blocked', ARGV[1])
if redis.call('HGET', KEYS[2], 'published') == '0' then
  redis.call('HSET', KEYS[2], 'published', 'unconfirmed')
end
return 1

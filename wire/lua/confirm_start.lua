-- KEYS[1] task hash
-- The publish of this task's run message returned OK: its message reached the broker, so
-- the sweeper may publish it again if it vanishes unclaimed. Only a recorded start is
-- marked (a deleted record is not created again).
if redis.call('HEXISTS', KEYS[1], 'published') == 1 then
  redis.call('HSET', KEYS[1], 'published', '1')
end
return 1

-- KEYS[1] session lease
-- ARGV[1] lease value
-- Whether the lease is still this run's (checked before every checkpoint write).
if redis.call('GET', KEYS[1]) == ARGV[1] then return 1 end
return 0

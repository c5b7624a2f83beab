-- KEYS[1] session lease, KEYS[2..] checkpoint keys to delete (documents of checkpoints
-- that are not the latest nor its kept parents, their pending writes and registry sets)
-- ARGV[1] lease value ('' when the caller checked the lease itself)
-- The full sweep of the pruner: deletes what it listed only while the run that listed it
-- holds the lease. Returns the number of keys deleted, -1 if the lease is not this run's.
if ARGV[1] ~= '' and redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local deleted = 0
for i = 2, #KEYS do deleted = deleted + redis.call('DEL', KEYS[i]) end
return deleted

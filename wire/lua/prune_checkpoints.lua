-- KEYS[1] session lease, KEYS[2..] checkpoint keys to delete (documents of old checkpoints,
-- their pending writes and write-registry sets)
-- ARGV[1] lease value
-- Deletes a thread's old checkpoints only while the run that chose them holds the lease:
-- no other run can be writing the thread. Returns the number of keys deleted, -1 if the
-- lease is not this run's (nothing deleted).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local deleted = 0
for i = 2, #KEYS do deleted = deleted + redis.call('DEL', KEYS[i]) end
return deleted

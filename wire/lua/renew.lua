-- KEYS[1] session lease, KEYS[2] task hash
-- ARGV[1] lease value, ARGV[2] lease milliseconds
-- Returns {held (1|0), cancel requested ('1'|'')}
local cancel = redis.call('HGET', KEYS[2], 'cancel') or ''
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {0, cancel} end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, cancel}

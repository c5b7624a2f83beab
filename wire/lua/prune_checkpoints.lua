-- KEYS[1] session lease, KEYS[2] the thread's latest-checkpoint pointer
-- ARGV[1] lease value ('' when the caller checked the lease itself: checkpoints live in
-- another Redis), ARGV[2] checkpoints kept, ARGV[3] checkpoint key prefix of the thread's
-- root namespace ('checkpoint:<thread>:__empty__:'), ARGV[4] write-registry key prefix
-- ('write_keys_zset:<thread>:__empty__:'), ARGV[5] most checkpoints deleted per call
-- Keeps the latest checkpoint and its parents up to ARGV[2], and deletes the older
-- ancestors (keys derived from the parent ids, which langgraph-checkpoint-redis names by
-- these prefixes) with their registered pending writes and registry sets. Only ancestors
-- of the latest are deleted, never anything newer, and only while the run that prunes
-- holds the lease, so no other run is writing the thread.
-- Returns the number of checkpoints deleted, -1 if the lease is not this run's.
if ARGV[1] ~= '' and redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local function parent_of(key)
  local raw = redis.call('JSON.GET', key, '$.parent_checkpoint_id')
  if not raw then return nil end
  local found = cjson.decode(raw)[1]
  if type(found) ~= 'string' or found == '' then return nil end
  return found
end
local key = redis.call('GET', KEYS[2])
if not key then return 0 end
for _ = 1, tonumber(ARGV[2]) do
  if redis.call('EXISTS', key) == 0 then return 0 end
  local parent = parent_of(key)
  if not parent then return 0 end
  key = ARGV[3] .. parent
end
local deleted = 0
while deleted < tonumber(ARGV[5]) and redis.call('EXISTS', key) == 1 do
  local parent = parent_of(key)
  local registry = ARGV[4] .. string.sub(key, #ARGV[3] + 1)
  for _, write in ipairs(redis.call('ZRANGE', registry, 0, -1)) do redis.call('DEL', write) end
  redis.call('DEL', registry, key)
  deleted = deleted + 1
  if not parent then break end
  key = ARGV[3] .. parent
end
return deleted

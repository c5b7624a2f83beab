-- KEYS[1] task hash, KEYS[2] session lease, KEYS[3] events
-- ARGV[1] lease value, ARGV[2] the run's batch number, ARGV[3..] triples (kind, tag, payload)
-- Returns the number of entries appended, 0 if the task is terminal, -1 if the lease is
-- not held by this run (stale fence). Idempotent per batch: a resend of the batch the
-- task last recorded for this lease (its reply was lost) appends nothing again.
-- The text of answer deltas is also appended to the task's 'partial' field: the output
-- an outcome other than Completed keeps (see settle()).
--! include prelude
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return -1 end
local state = redis.call('HGET', KEYS[1], 'state')
if not state or TERMINAL[state] then return 0 end
local count = (#ARGV - 2) / 3
local mark = ARGV[1] .. '#' .. ARGV[2]
if redis.call('HGET', KEYS[1], 'appended') == mark then return count end
local texts = {}
for i = 3, #ARGV, 3 do
  redis.call('XADD', KEYS[3], '*', 'k', ARGV[i], 't', ARGV[i + 1], 'd', ARGV[i + 2])
  if ARGV[i] == 'e' and ARGV[i + 1] == 'delta' then
    local ok, delta = pcall(cjson.decode, ARGV[i + 2])
    if ok and type(delta) == 'table' and delta.role == 'answer'
        and type(delta.text) == 'string' then
      table.insert(texts, delta.text)
    end
  end
end
if #texts > 0 then
  local partial = redis.call('HGET', KEYS[1], 'partial') or ''
  redis.call('HSET', KEYS[1], 'partial', partial .. table.concat(texts))
end
redis.call('HSET', KEYS[1], 'appended', mark)
return count

-- Renew many session leases at once (one worker process's renewer).
-- KEYS[2i-1] session lease i, KEYS[2i] its task hash (i = 1..n)
-- ARGV[1] lease milliseconds, ARGV[i+1] lease value i
-- Returns {held_1 (1|0), cancel_1 ('1'|''), ..., held_n, cancel_n}: as renew.lua, per lease
local reply = {}
for i = 1, #KEYS / 2 do
  local lease, task = KEYS[2 * i - 1], KEYS[2 * i]
  local cancel = redis.call('HGET', task, 'cancel') or ''
  if redis.call('GET', lease) == ARGV[i + 1] then
    redis.call('PEXPIRE', lease, ARGV[1])
    reply[2 * i - 1] = 1
  else
    reply[2 * i - 1] = 0
  end
  reply[2 * i] = cancel
end
return reply

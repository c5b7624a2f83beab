-- KEYS[1] starting set, KEYS[2] tenants that parked tasks (Keys.tenants_parked)
-- ARGV[1] task key prefix
-- The sweeper's pass over the tenants' lines (docs/tenants.md): an admitted task that
-- settled or expired without leaving its tenant's admitted set is dropped from it, and
-- the parked tasks the tenant now has room for are admitted (their runs owed, as every
-- settle does). A tenant whose line is empty leaves the set.
-- Returns how many tasks were admitted.
--! include prelude
local admitted = 0
for _, tenant in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  local members = tenant_key(KEYS[1], tenant, ':admitted')
  for _, id in ipairs(redis.call('SMEMBERS', members)) do
    local state = redis.call('HGET', ARGV[1] .. id, 'state')
    if not state or TERMINAL[state] then redis.call('SREM', members, id) end
  end
  admitted = admitted + dispatch_parked(KEYS[1], tenant)
  if redis.call('LLEN', tenant_key(KEYS[1], tenant, ':parked')) == 0 then
    redis.call('SREM', KEYS[2], tenant)
  end
end
return admitted

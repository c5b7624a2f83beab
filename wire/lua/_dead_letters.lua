-- Dead letters (wire.dead_letters): one entry of the deployment's dead-letter stream
-- (Keys.dead_letters; field names: DeadLetterField) and one count of its kind
-- (Keys.dead_letter_counts), written by the step that gives the work up. The stream keeps
-- the last retention_ms and at most 'kept' entries, and expires retention_ms after its
-- latest entry. Needs now_ms (the clock include).
local function dead_letter(stream, counts, retention_ms, kept, kind, task, session, tenant,
                           queue, message, cause)
  redis.call('XADD', stream, 'MAXLEN', kept, '*', 'kind', kind, 'task', task,
             'session', session, 'tenant', tenant, 'queue', queue, 'message', message,
             'cause', cause)
  redis.call('XTRIM', stream, 'MINID', now_ms() - retention_ms)
  redis.call('PEXPIRE', stream, retention_ms)
  redis.call('HINCRBY', counts, kind, 1)
end

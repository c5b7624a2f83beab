-- KEYS[1] dead-letter stream, KEYS[2] dead-letter counts, KEYS[3] malformed-message counter
-- ARGV[1] retention milliseconds, ARGV[2] most entries kept, ARGV[3] the message id ('' if
-- it carried none), ARGV[4] the queue it was taken from, ARGV[5] the cause
-- A worker dropped a malformed message: counted (KEYS[3]) and recorded as a dead letter
-- of kind 'malformed' in one step. No tenant, task or session: nothing in a malformed
-- message can be trusted to name them.
--! include clock
--! include dead_letters
redis.call('INCR', KEYS[3])
dead_letter(KEYS[1], KEYS[2], tonumber(ARGV[1]), tonumber(ARGV[2]), 'malformed', '', '', '',
            ARGV[4], ARGV[3], ARGV[5])
return 1

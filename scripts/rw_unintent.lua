-- Read-write lock: a writer that gives up removes its intent mark, so that
-- readers need not wait for the mark's ttl.
-- KEYS[1] intent mark; ARGV[1] intent id.
-- Returns 1 if the mark was the caller's and was removed, 0 otherwise.
if redis.call("GET", KEYS[1]) == ARGV[1] then
	return redis.call("DEL", KEYS[1])
end
return 0

-- Extend: while the key still holds the caller's token, make it live at least
-- ttl from now. PEXPIRE ... GT (Redis 7) never shortens it: an older Extend
-- with a shorter ttl that lands late cannot cut short a key that a newer one
-- counted on.
-- KEYS[1] lock key, ARGV[1] token, ARGV[2] ttl in milliseconds.
-- Returns 1 if the key holds the token (its ttl is now at least ARGV[2]),
-- 2 if the key does not exist (the node may have lost it: Extend may
-- re-seed it), 0 if it holds another token.
local v = redis.call("GET", KEYS[1])
if v == ARGV[1] then
	redis.call("PEXPIRE", KEYS[1], ARGV[2], "GT")
	return 1
end
if not v then
	return 2
end
return 0

-- Acquire with fencing, round 2: while the key still holds the caller's
-- token, raise the fencing counter to at least the new fencing token. The
-- counter is a max-register: it is never lowered.
-- KEYS[1] lock key, KEYS[2] fencing counter; ARGV[1] token, ARGV[2] fencing token.
-- Returns 1 if the counter now holds at least the fencing token, 0 if the key
-- is no longer the caller's.
if redis.call("GET", KEYS[1]) ~= ARGV[1] then
	return 0
end
if tonumber(redis.call("GET", KEYS[2]) or "0") < tonumber(ARGV[2]) then
	redis.call("SET", KEYS[2], ARGV[2])
end
return 1

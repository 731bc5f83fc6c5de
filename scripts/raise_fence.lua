-- Acquire with fencing, round 2: while the key still holds the caller's
-- token, raise the fencing counter to the new fencing token. The counter is a
-- max-register: it is never lowered. A node whose counter has already reached
-- the token was not among those the token was computed from (its round-1
-- reply came late), and a later holder may have raised it; it does not count.
-- KEYS[1] lock key, KEYS[2] fencing counter; ARGV[1] token, ARGV[2] fencing token.
-- Returns 1 if the counter was raised to the fencing token, 0 if the key is
-- not the caller's, 2 if the key is the caller's but the counter is not below
-- the fencing token.
if redis.call("GET", KEYS[1]) ~= ARGV[1] then
	return 0
end
if tonumber(redis.call("GET", KEYS[2]) or "0") >= tonumber(ARGV[2]) then
	return 2
end
redis.call("SET", KEYS[2], ARGV[2])
return 1

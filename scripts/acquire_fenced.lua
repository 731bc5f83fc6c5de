-- Acquire with fencing, round 1: SET key token NX PX ttl, and if the key was
-- set, return this node's fencing counter (0 if it has none).
-- KEYS[1] lock key, KEYS[2] fencing counter; ARGV[1] token, ARGV[2] ttl ms.
-- Returns the counter, or nil if the key is held.
if redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
	return tonumber(redis.call("GET", KEYS[2]) or "0")
end
return false

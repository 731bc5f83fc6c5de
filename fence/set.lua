-- The resource side of fencing, for data kept in Redis: store a value only if
-- its fencing token is at least the highest one this resource has accepted.
-- KEYS[1] data key, KEYS[2] highest accepted token; ARGV[1] token, ARGV[2] value.
-- Returns 1 if stored, 0 if the token is stale.
if tonumber(redis.call("GET", KEYS[2]) or "0") > tonumber(ARGV[1]) then
	return 0
end
redis.call("SET", KEYS[2], ARGV[1])
redis.call("SET", KEYS[1], ARGV[2])
return 1

-- Semaphore acquire: admit the caller's token to the key's sorted set of
-- holders if fewer than K live holders are in it. Each member's score is its
-- expiry in milliseconds on this node's clock (TIME), so that, as with PX for
-- the mutex, the node alone judges expiry. Expired members are removed first;
-- the set's own ttl is kept at its latest score, so that it cleans itself up.
-- KEYS[1] holders set; ARGV[1] token, ARGV[2] ttl in milliseconds, ARGV[3] K.
-- Returns 1 if admitted, 0 if K live holders are already in the set.
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", now)
if redis.call("ZCARD", KEYS[1]) >= tonumber(ARGV[3]) then
	return 0
end
redis.call("ZADD", KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
local last = redis.call("ZRANGE", KEYS[1], -1, -1, "WITHSCORES")
redis.call("PEXPIREAT", KEYS[1], last[2])
return 1

-- Semaphore release: remove the caller's token from the set, and no other.
-- Expired members are removed first, so that a token that outlived its ttl
-- is reported gone, as GET reports an expired mutex key.
-- KEYS[1] holders set; ARGV[1] token.
-- Returns 1 if the token was a live member and is now removed, 0 otherwise.
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", now)
return redis.call("ZREM", KEYS[1], ARGV[1])

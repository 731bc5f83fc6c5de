-- Read-write lock, reader release: prune expired readers, then remove the
-- caller's token. An expired token counts as gone, not as released.
-- KEYS[1] readers set; ARGV[1] token.
-- Returns 1 if the token was a live member and was removed, 0 otherwise.
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", "(" .. now)
return redis.call("ZREM", KEYS[1], ARGV[1])

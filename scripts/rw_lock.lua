-- Read-write lock, writer acquisition: set the writer key to the caller's
-- token if no writer holds it and no reader is live; otherwise leave (or
-- renew) a writer-intent mark that new readers respect, so that a waiting
-- writer is not starved by a stream of readers. Readers are tokens in a
-- sorted set scored by their expiry in milliseconds of this node's TIME;
-- a reader is live while its score is not below the time, as a key with PX
-- is, and expired ones are pruned first.
-- KEYS[1] writer key, KEYS[2] readers set, KEYS[3] intent mark;
-- ARGV[1] token, ARGV[2] ttl ms, ARGV[3] intent id, ARGV[4] intent ttl ms
-- (0: leave no mark).
-- Returns 1 if the writer key was set, 0 otherwise.
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call("ZREMRANGEBYSCORE", KEYS[2], "-inf", "(" .. now)
if redis.call("EXISTS", KEYS[1]) == 0 and redis.call("ZCARD", KEYS[2]) == 0 then
	redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
	if redis.call("GET", KEYS[3]) == ARGV[3] then
		redis.call("DEL", KEYS[3])
	end
	return 1
end
if tonumber(ARGV[4]) > 0 then
	local mark = redis.call("GET", KEYS[3])
	if not mark or mark == ARGV[3] then
		redis.call("SET", KEYS[3], ARGV[3], "PX", ARGV[4])
	end
end
return 0

-- Semaphore acquire: admit the caller's token to the key's sorted set of
-- holders if fewer than K live holders are in it. Each member's score is its
-- expiry in milliseconds on this node's clock (TIME), so that, as with PX for
-- the mutex, the node alone judges expiry; a member is live while its score
-- is above the time. The set's own ttl is kept at its latest score, so that
-- it cleans itself up.
--
-- A token that is already a member, live or not, is refused: ZADD would only
-- re-score it, and one slot would count for two holders.
--
-- The script reads before it writes, and its first write is ZADD, which
-- Redis refuses on a node past maxmemory. A script without a shebang is
-- checked for OOM only at its first write, and only if that write is one
-- that may grow memory (SET, ZADD, HSET, ...); a first write that frees
-- memory (ZREMRANGEBYSCORE, DEL, PEXPIRE) lets the rest of the script
-- through. So on a full node this script fails whole with OOM, as the
-- mutex's SET does, and writes nothing.
--
-- KEYS[1] holders set; ARGV[1] token, ARGV[2] ttl in milliseconds, ARGV[3] K.
-- Returns 1 if admitted, 0 if K live holders are already in the set, 2 if
-- the token is already a member.
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call("ZSCORE", KEYS[1], ARGV[1]) then
	return 2
end
if redis.call("ZCOUNT", KEYS[1], "(" .. now, "+inf") >= tonumber(ARGV[3]) then
	return 0
end
redis.call("ZADD", KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", now)
local last = redis.call("ZRANGE", KEYS[1], -1, -1, "WITHSCORES")
redis.call("PEXPIREAT", KEYS[1], last[2])
return 1

-- Semaphore extend: while the caller's token is a live member of the set,
-- make it live at least ttl from now. It never shortens a member: an older
-- Extend with a shorter ttl that lands late cannot cut short a member that a
-- newer one counted on. An expired member is removed, never revived. The
-- set's own ttl follows its latest score, as in semaphore_acquire.lua.
-- KEYS[1] holders set; ARGV[1] token, ARGV[2] ttl in milliseconds.
-- Returns 1 if the token is a live member (now live at least ttl), 0 if not.
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", now)
local score = redis.call("ZSCORE", KEYS[1], ARGV[1])
if not score then
	return 0
end
local expiry = now + tonumber(ARGV[2])
if expiry > tonumber(score) then
	redis.call("ZADD", KEYS[1], expiry, ARGV[1])
	local last = redis.call("ZRANGE", KEYS[1], -1, -1, "WITHSCORES")
	redis.call("PEXPIREAT", KEYS[1], last[2])
end
return 1

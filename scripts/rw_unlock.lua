-- Read-write lock, writer release: delete the writer key only if it still
-- holds the caller's token, as release.lua does for the mutex, and let the
-- readers waiting at this moment in before the next writer (phase
-- fairness): every live member of the waiting set moves to the entitled
-- set, keeping its lapse time. Then tell waiting clients that the key is
-- free (wake.go), under pcall as release.lua does.
--
-- The first write is a DEL, which Redis lets through on a node past
-- maxmemory, and with it the rest: a release always goes through.
--
-- KEYS[1] writer key, KEYS[2] waiting readers, KEYS[3] entitled readers;
-- ARGV[1] token, ARGV[2] the release channels' prefix ("" sends no notice;
-- see release.lua).
-- Returns 1 if deleted, 0 otherwise.
if redis.call("GET", KEYS[1]) ~= ARGV[1] then
	return 0
end
redis.call("DEL", KEYS[1])
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local waiting = redis.call("ZRANGEBYSCORE", KEYS[2], "(" .. now, "+inf", "WITHSCORES")
local latest = 0
for i = 1, #waiting, 2 do
	local s = tonumber(waiting[i + 1])
	redis.call("ZADD", KEYS[3], "GT", s, waiting[i])
	if s > latest then
		latest = s
	end
end
redis.call("DEL", KEYS[2])
if latest > 0 and redis.call("PTTL", KEYS[3]) < latest - now + 1 then
	redis.call("PEXPIRE", KEYS[3], latest - now + 1)
end
if ARGV[2] ~= "" then
	redis.pcall("PUBLISH", ARGV[2] .. KEYS[1], KEYS[1])
end
return 1

-- Semaphore release: remove the caller's token from the set, and no other,
-- and then tell waiting clients that a slot is free on this node (wake.go;
-- a hint, under pcall as in release.lua).
-- Expired members are removed first, so that a token that outlived its ttl
-- is reported gone, as GET reports an expired mutex key.
-- KEYS[1] holders set; ARGV[1] token; ARGV[2] the release
-- channels' prefix ("" sends no notice; see release.lua).
-- Returns 1 if the token was a live member and is now removed, 0 otherwise.
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", now)
local removed = redis.call("ZREM", KEYS[1], ARGV[1])
if removed == 1 and ARGV[2] ~= nil and ARGV[2] ~= "" then
	redis.pcall("PUBLISH", ARGV[2] .. KEYS[1], KEYS[1])
end
return removed

-- Release: delete the key only if it still holds the caller's token, and
-- then tell waiting clients that the key is free on this node, on the key's
-- own channel (wake.go).
-- The notice is a hint: PUBLISH runs under pcall, so that a user whose ACL
-- grants no channel still releases; waiters then find out by their timers.
-- KEYS[1] lock key, ARGV[1] token, ARGV[2] the channels' prefix: the notice
-- goes to ARGV[2]..KEYS[1] ("" sends none).
-- Returns 1 if deleted, 0 otherwise.
if redis.call("GET", KEYS[1]) == ARGV[1] then
	redis.call("DEL", KEYS[1])
	if ARGV[2] ~= "" then
		redis.pcall("PUBLISH", ARGV[2] .. KEYS[1], KEYS[1])
	end
	return 1
end
return 0

-- Release, for several locks in one call: what release.lua does for one key,
-- done for each KEYS[i] with token ARGV[i], in order. The pipe sends it in
-- place of the release scripts of one batch (pipe.go, "Combined releases"):
-- a server runs one script of n keys for much less than n scripts.
-- ARGV[#KEYS+1] is the prefix of the channel on which each deleted key is
-- announced, its own (ARGV[#KEYS+1]..KEYS[i]; "" for none), as ARGV[2] is for
-- release.lua.
-- Returns an array with, for each key in order: 1 if deleted, 0 if not, or
-- the error of its GET or DEL (a key of another type, a read-only replica),
-- so that one key's failure is that key's alone.
local prefix = ARGV[#KEYS + 1]
local out = {}
for i = 1, #KEYS do
	local v = redis.pcall("GET", KEYS[i])
	if v == ARGV[i] then
		local d = redis.pcall("DEL", KEYS[i])
		if type(d) == "table" then
			out[i] = d
		else
			if prefix ~= "" then
				redis.pcall("PUBLISH", prefix .. KEYS[i], KEYS[i])
			end
			out[i] = 1
		end
	elseif type(v) == "table" and v.err then
		out[i] = v
	else
		out[i] = 0
	end
end
return out

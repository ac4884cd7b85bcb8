-- Token bucket for Redis, the comparison script for Leasehold's TOKENLEASE.
--
-- The usual atomic token bucket in Lua: each identity is a hash with fields
-- `tokens` (a float balance) and `last_updated` (Unix ms); one atomic script
-- fetches and reconciles (a new key starts full), refills by elapsed time,
-- debits when enough tokens are there, refreshes the TTL and otherwise
-- leaves the balance as it was and answers the time until the tokens exist.
-- Time comes from redis.call('TIME'), not from the caller, so a client's
-- clock cannot skew the bucket (TOKENLEASE reads the server's clock too).
-- Rather than the common fixed TTL of twice the window, the key expires when
-- the bucket would be full again, which is the best a script can do and what
-- TOKENLEASE does, so both sides keep the same number of keys.
--
-- KEYS[1] = bucket; ARGV = capacity, rate, period_ms, requested
-- Reply (like TOKENLEASE): {granted, remaining, retry_after_ms, reset_after_ms}
local key = KEYS[1]
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local period = tonumber(ARGV[3])
local requested = tonumber(ARGV[4])

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local per_ms = rate / period

local state = redis.call('HMGET', key, 'tokens', 'last_updated')
local tokens = tonumber(state[1])
local last = tonumber(state[2])
if tokens == nil or last == nil then
  tokens = capacity
  last = now
end
tokens = math.min(capacity, tokens + math.max(0, now - last) * per_ms)

local granted = 0
local retry = 0
if tokens >= requested then
  tokens = tokens - requested
  granted = requested
else
  retry = math.ceil((requested - tokens) / per_ms)
end
local reset = math.ceil((capacity - tokens) / per_ms)
if granted > 0 then
  redis.call('HSET', key, 'tokens', tokens, 'last_updated', now)
  redis.call('PEXPIRE', key, math.max(1, reset))
end
return {granted, math.floor(tokens), retry, reset}

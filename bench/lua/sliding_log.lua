-- Sliding-log rate limiter for Redis (a sorted set of hit times), the
-- comparison script for Leasehold's SLIDINGWINDOW.
--
-- The common "atomic sliding window" script: drop timestamps older than the
-- window (ZREMRANGEBYSCORE), count the rest (ZCARD), and if under the limit
-- add this hit (ZADD) and refresh the TTL. Two changes from its usual form,
-- both needed for a fair run:
-- time comes from redis.call('TIME') instead of an argument (the benchmark
-- sends fixed arguments), and the member is the microsecond time rather than
-- the millisecond score, so two hits in one millisecond are both counted;
-- the TTL is set in milliseconds (PEXPIRE) because the window is in ms.
--
-- KEYS[1] = log; ARGV = limit, window_ms
-- Reply: {admitted (0/1), hits in the window after this call}
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local member = t[1] .. string.format('%06d', t[2])

redis.call('ZREMRANGEBYSCORE', key, 0, now - window)
local count = redis.call('ZCARD', key)
if count < limit then
  redis.call('ZADD', key, now, member)
  redis.call('PEXPIRE', key, window)
  return {1, count + 1}
end
return {0, count}

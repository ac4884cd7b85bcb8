-- GCRA (generic cell rate algorithm) for Redis, written for this comparison
-- to stand in for the redis-cell module's CL.THROTTLE, which Leasehold
-- implements natively. It follows redis-cell's published algorithm: one
-- string per key holding the theoretical arrival time (TAT, Unix ms); a
-- request of `quantity` is allowed when the new TAT minus the delay
-- variation tolerance is not in the future. Time comes from
-- redis.call('TIME'); the key expires when the TAT passes.
--
-- KEYS[1] = key; ARGV = max_burst, count_per_period, period_s, [quantity=1]
-- Reply (like CL.THROTTLE):
--   {limited, limit, remaining, retry_after_s (-1 if allowed), reset_after_s}
local key = KEYS[1]
local burst = tonumber(ARGV[1])
local count = tonumber(ARGV[2])
local period_ms = tonumber(ARGV[3]) * 1000
local quantity = tonumber(ARGV[4] or '1')

local t = redis.call('TIME')
local now = t[1] * 1000 + t[2] / 1000
local emission = period_ms / count
local dvt = emission * (burst + 1)
local increment = emission * quantity

local tat = tonumber(redis.call('GET', key)) or now
local new_tat = math.max(tat, now) + increment
local diff = now - (new_tat - dvt)

local limited = 0
local retry = -1
local ttl
if diff < 0 then
  limited = 1
  if increment <= dvt then
    retry = math.ceil(-diff / 1000)
  end
  ttl = math.max(tat - now, 0)
else
  ttl = new_tat - now
  redis.call('SET', key, string.format('%.3f', new_tat), 'PX', math.max(1, math.ceil(ttl)))
end

local next_ = dvt - ttl
local remaining = 0
if next_ > -emission then
  remaining = math.floor(next_ / emission)
end
return {limited, burst + 1, remaining, retry, math.ceil(ttl / 1000)}

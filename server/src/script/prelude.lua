-- Leasehold's scripting environment, run once when a thread's Lua VM is
-- made (script/vm.rs). It receives the real globals table, the `redis`
-- table, a table of Rust helpers, the Rust error handler and the
-- killed() test, and returns the read-only globals (script/vm.rs runs a
-- script under the handler itself).
--
-- Every global and library table is read-only, as in Redis 7.0: scripts
-- see a proxy whose writes fail ("Attempt to modify a readonly table"),
-- and reading a global that does not exist fails too.
local G, redis, prim, handler, killed = ...
local error, type, rawget, rawset, setmetatable, getmetatable =
  error, type, rawget, rawset, setmetatable, getmetatable
local raw_pcall, raw_xpcall, raw_loadstring, concat = pcall, xpcall, loadstring, table.concat
local tostring = tostring

local protected = setmetatable({}, { __mode = 'k' })
local function refuse() error('Attempt to modify a readonly table', 2) end
local function protect(t)
  local p = setmetatable({}, { __index = t, __newindex = refuse, __metatable = false })
  protected[p] = true
  return p
end

-- pcall returns a command error's text (Redis 7.0 does so), and nothing
-- catches a script killed by SCRIPT KILL.
local function caught(ok, ...)
  if ok then return true, ... end
  local e = ...
  if killed() then error(e, 0) end
  if type(e) == 'userdata' then
    e = prim.error_text(e)
  elseif type(e) == 'table' and type(rawget(e, 'err')) == 'string' then
    e = rawget(e, 'err')
  end
  return false, e
end
G.pcall = function(...) return caught(raw_pcall(...)) end
local function rethrow(ok, ...)
  if not ok and killed() then error((...), 0) end
  return ok, ...
end
G.xpcall = function(f, h) return rethrow(raw_xpcall(f, h)) end

-- No binary chunks: bytecode can break out of the VM.
local function loadstring(s, name)
  if type(s) == 'string' and s:byte(1) == 27 then
    return nil, 'binary chunks are not allowed'
  end
  return raw_loadstring(s, name)
end
G.loadstring = loadstring
G.load = function(f, name)
  if type(f) ~= 'function' then return loadstring(f, name) end
  local parts = {}
  while true do
    local p = f()
    if p == nil or p == '' then break end
    parts[#parts + 1] = p
  end
  return loadstring(concat(parts), name)
end
G.rawset = function(t, k, v)
  if protected[t] then error('Attempt to modify a readonly table', 0) end
  return rawset(t, k, v)
end
G.setmetatable = function(t, m)
  if protected[t] then error('Attempt to modify a readonly table', 0) end
  return setmetatable(t, m)
end

for _, name in ipairs({ 'redis', 'string', 'math', 'table', 'coroutine', 'cjson', 'bit', 'struct', 'cmsgpack' }) do
  G[name] = protect(G[name])
end
-- String methods go through the read-only `string` too.
getmetatable('').__index = G.string
local string_mt = protect(getmetatable(''))
G.getmetatable = function(t)
  if type(t) == 'string' then return string_mt end
  return getmetatable(t)
end
G.__redis__err__handler = handler

local env = protect(G)
G._G = env
setmetatable(G, {
  __index = function(_, k)
    error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
  end,
  __metatable = false,
})
return env

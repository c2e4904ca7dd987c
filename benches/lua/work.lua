-- Real work for the Lua interpreter in benches/real_programs.rs: recursion,
-- closures, table sort with a comparator, string.format, gsub and
-- concatenation. Deterministic: no clock, no math.random (seeded from the
-- time at startup); its own generator instead. Prints a checksum, so that
-- the plain and traced runs can be seen to do the same work.
--
-- Usage: work.lua [SCALE] (default 1).

local scale = tonumber(arg and arg[1]) or 1

-- A linear congruential generator: the same numbers on every run.
local seed = 12345
local function rand(n)
  seed = (seed * 1103515245 + 12345) % 2147483648
  return seed % n
end

-- Recursion.
local function fib(n)
  if n < 2 then return n end
  return fib(n - 1) + fib(n - 2)
end

-- Closures: counters made and called.
local function counter(step)
  local count = 0
  return function()
    count = count + step
    return count
  end
end

local checksum = 0

for round = 1, scale do
  checksum = checksum + fib(24)

  local counters = {}
  for i = 1, 200 do counters[i] = counter(i) end
  for _ = 1, 50 do
    for i = 1, #counters do checksum = checksum + counters[i]() end
  end

  -- Records sorted by a comparator over two keys.
  local records = {}
  for i = 1, 20000 do
    records[i] = { name = string.format("item-%05d", rand(100000)), weight = rand(1000) }
  end
  table.sort(records, function(a, b)
    if a.weight ~= b.weight then return a.weight < b.weight end
    return a.name < b.name
  end)
  checksum = checksum + records[1].weight + records[#records].weight

  -- Formatting, pattern substitution and concatenation of a text.
  local lines = {}
  for i = 1, 4000 do
    lines[i] = string.format("%d: %s weighs %.2f kg (%x)", i, records[i].name, records[i].weight / 7, i * 31)
  end
  local text = table.concat(lines, "\n")
  local upper = text:gsub("item%-(%d+)", function(digits) return "ITEM#" .. digits:reverse() end)
  local words = 0
  for word in upper:gmatch("%a+") do words = words + #word end
  local kg = select(2, upper:gsub("kg", "kilograms"))
  checksum = checksum + words + kg + #upper
end

print(string.format("checksum %d", checksum))

"""Lua scripts of the Redis budget store (000 Alg. 1, filter eq. (7), componentwise; DESIGN.md §3).

Each script runs atomically inside Redis: one call checks and charges (or settles) a whole batch of users.

Exact integer arithmetic. Redis' Lua numbers are IEEE doubles, exact only below 2^53, while fixed-point amounts
go up to INT64_MAX (2^63 − 1; the "infinite" budget sentinel, and e.g. a δ budget above 0.009 at the 10⁻¹⁸
scale is already > 2^53). Amounts therefore travel as decimal strings and are never converted to one double:

* a string of at most 15 digits (< 10^15 < 2^53) is converted with ``tonumber``; sums of two of them stay
  below 2^53, so the fast path is exact;
* longer strings are split into two limbs, ``hi = digits[1 .. n-9]`` and ``lo = last 9 digits`` (both < 2^34,
  exact), and added / subtracted / compared limb by limb with an explicit carry (base 10^9).

Results are written back as decimal strings (``%.0f`` of an exact integer-valued double, or ``hi`` followed
by ``lo`` zero-padded to 9 digits). No amount ever exceeds INT64_MAX: a charge is written only when
``spent + cost ≤ budget ≤ INT64_MAX``, and a settle only lowers spent.

Per-user hash (key ``<ns>:{u:<user>}``; absent field = 0 / false):

=================  =======================================================================================
``s0`` … ``s5``    spent, one fixed-point component each (order of ``COMPONENTS``)
``b0`` … ``b5``    per-user budget override (all six present iff overridden); else the default hash
``h``              ``"1"`` once the user is halted (sticky)
``x:<scope>``      ``"<seq> <ok> <open> r0 r1 r2 r3 r4 r5"``: last applied seq in the scope, its outcome,
                   whether its reservation is still open (unsettled), and the reservation (omitted when 0)
=================  =======================================================================================

Default budget: hash ``<ns>:default`` with fields ``0`` … ``5``.
"""

from __future__ import annotations

_HELPERS = r"""
local BASE = 1000000000

local function limbs(s)
  local n = #s
  if n <= 9 then return 0, tonumber(s) end
  return tonumber(string.sub(s, 1, n - 9)), tonumber(string.sub(s, n - 8))
end

local function fmt(hi, lo)
  if hi == 0 then return string.format('%.0f', lo) end
  return string.format('%.0f%09.0f', hi, lo)
end

-- a + b <= c, exactly (a, b, c non-negative decimal strings)
local function fits(a, b, c)
  if #a < 16 and #b < 16 and #c < 16 then
    return tonumber(a) + tonumber(b) <= tonumber(c)
  end
  local ah, al = limbs(a)
  local bh, bl = limbs(b)
  local ch, cl = limbs(c)
  local sl = al + bl
  local sh = ah + bh
  if sl >= BASE then sl = sl - BASE; sh = sh + 1 end
  return sh < ch or (sh == ch and sl <= cl)
end

-- a + b - c, exactly, given c <= a + b
local function addsub(a, b, c)
  if #a < 16 and #b < 16 and #c < 16 then
    return string.format('%.0f', tonumber(a) + tonumber(b) - tonumber(c))
  end
  local ah, al = limbs(a)
  local bh, bl = limbs(b)
  local ch, cl = limbs(c)
  local l = al + bl - cl
  local h = ah + bh - ch
  while l < 0 do l = l + BASE; h = h - 1 end
  while l >= BASE do l = l - BASE; h = h + 1 end
  return fmt(h, l)
end
"""

#: KEYS = [default key, user keys...]
#: ARGV = [scope field, seq, m, m cost vectors (6 decimal strings each), (if m > 1) one 1-based cost index per user]
#: Returns a string with one '1' (admitted) or '0' per user.
#: Hot path (a user without override): one HMGET of 9 fields, at most 6 tonumber, one HSET. The filter test
#: spent_i + c_i <= b_i is done as spent_i <= b_i - c_i against thresholds precomputed once per call.
ADMIT = _HELPERS + r"""
local xf = ARGV[1]
local seqs = ARGV[2]
local seq = tonumber(seqs)
local m = tonumber(ARGV[3])
local d = redis.call('HMGET', KEYS[1], '0', '1', '2', '3', '4', '5')
for i = 1, 6 do if not d[i] then d[i] = '0' end end
local SF = {'s0', 's1', 's2', 's3', 's4', 's5'}

-- per distinct cost vector j: components c (strings) and cn (numbers when < 1e14, else false), the non-zero
-- ones nz, the scope state written on admission cstr, and against the default budget: thr[i] = d_i - c_i when exact in
-- doubles (else false: exact limb test), okz[i] = (c_i <= d_i) (the test for a user with nothing spent)
local costs, cnums, nzs, cstr, thrs, okzs = {}, {}, {}, {}, {}, {}
for j = 1, m do
  local c, cn, nz, thr, okz = {}, {}, {}, {}, {}
  for i = 1, 6 do
    local v = ARGV[3 + 6 * (j - 1) + i]
    c[i] = v
    if #v < 15 then cn[i] = tonumber(v) else cn[i] = false end
    if v ~= '0' then nz[#nz + 1] = i end
    if #v < 16 and #d[i] < 16 then thr[i] = tonumber(d[i]) - tonumber(v) else thr[i] = false end
    okz[i] = fits('0', v, d[i])
  end
  costs[j], cnums[j], nzs[j], thrs[j], okzs[j] = c, cn, nz, thr, okz
  if #nz == 0 then cstr[j] = seqs .. ' 1 1' else cstr[j] = seqs .. ' 1 1 ' .. table.concat(c, ' ') end
end
local REFUSED = seqs .. ' 0 0'
local idx0 = 3 + 6 * m
local sn = {0, 0, 0, 0, 0, 0}  -- spent as numbers (false: too long, use the exact string path), reused

-- spent + cost as a decimal string: from the numbers when both are short (sum < 1.1e15 < 2^53: exact),
-- else exactly from the strings
local function newval(x, y, s, c)
  if x and y then
    x = x + y
    if x < 1e14 then return tostring(x) end          -- %.14g prints every integer below 1e14 exactly
    return string.format('%.0f', x)
  end
  return addsub(s or '0', c, '0')
end

local out = {}
local n = #KEYS - 1
for u = 1, n do
  local k = KEYS[u + 1]
  local j = 1
  if m > 1 then j = tonumber(ARGV[idx0 + u]) end
  local v = redis.call('HMGET', k, xf, 'h', 's0', 's1', 's2', 's3', 's4', 's5', 'b0')
  local st = v[1]
  local halted = (v[2] == '1')
  local last = nil
  local p = nil
  if st then
    p = string.find(st, ' ', 1, true)
    last = tonumber(string.sub(st, 1, p - 1))
  end
  if last ~= nil and last >= seq then
    if last == seq then
      out[u] = string.sub(st, p + 1, p + 1)          -- replay of the same batch: first outcome, no charge
    elseif halted then
      out[u] = '0'                                   -- stale replay: admitted iff not halted, no charge
    else
      out[u] = '1'
    end
  else
    local ok = not halted
    local c = costs[j]
    local nz = nzs[j]
    if ok and #nz > 0 then                           -- 000 eq. (7): spent + cost <= budget, every component
      local b = nil
      local thr, okz = thrs[j], okzs[j]
      if v[9] then                                   -- per-user override: exact test against it
        b = redis.call('HMGET', k, 'b0', 'b1', 'b2', 'b3', 'b4', 'b5')
      end
      for i = 1, 6 do
        local s = v[2 + i]
        if s then
          if #s < 16 then sn[i] = tonumber(s) else sn[i] = false end
          if b then
            if not fits(s, c[i], b[i]) then ok = false; break end
          elseif thr[i] and sn[i] then
            if sn[i] > thr[i] then ok = false; break end
          elseif not fits(s, c[i], d[i]) then ok = false; break end
        else
          sn[i] = 0
          if b then
            if not fits('0', c[i], b[i]) then ok = false; break end
          elseif not okz[i] then ok = false; break end
        end
      end
    end
    if ok then
      local sv = cstr[j]
      local nn = #nz
      if nn == 0 then
        redis.call('HSET', k, xf, sv)
      elseif nn == 1 then
        local a = nz[1]
        redis.call('HSET', k, xf, sv, SF[a], newval(sn[a], cnums[j][a], v[2 + a], c[a]))
      elseif nn == 2 then
        local a, b = nz[1], nz[2]
        local cn = cnums[j]
        redis.call('HSET', k, xf, sv, SF[a], newval(sn[a], cn[a], v[2 + a], c[a]),
                   SF[b], newval(sn[b], cn[b], v[2 + b], c[b]))
      else
        local cn = cnums[j]
        local args = {xf, sv}
        for t = 1, nn do
          local a = nz[t]
          args[2 * t + 1] = SF[a]
          args[2 * t + 2] = newval(sn[a], cn[a], v[2 + a], c[a])
        end
        redis.call('HSET', k, unpack(args))
      end
      out[u] = '1'
    else
      if halted then
        redis.call('HSET', k, xf, REFUSED)
      else
        redis.call('HSET', k, xf, REFUSED, 'h', '1')  -- sticky HALT (000 Alg. 1 line 13)
      end
      out[u] = '0'
    end
  end
end
return table.concat(out)
"""

#: KEYS = [user keys...]
#: ARGV = [scope field, seq, m, m actual-cost vectors (6 decimal strings each), (if m > 1) one index per user]
#: Returns 0 on success, or the 1-based position of the first user whose actual cost exceeds the reservation
#: (then nothing was written).
SETTLE = _HELPERS + r"""
local xf = ARGV[1]
local seqs = ARGV[2]
local seq = tonumber(seqs)
local m = tonumber(ARGV[3])
local costs, cstr = {}, {}
for j = 1, m do
  local c = {}
  local zero = true
  for i = 1, 6 do
    local v = ARGV[3 + 6 * (j - 1) + i]
    c[i] = v
    if v ~= '0' then zero = false end
  end
  costs[j] = c
  if zero then cstr[j] = '' else cstr[j] = ' ' .. table.concat(c, ' ') end
end
local idx0 = 3 + 6 * m
local n = #KEYS
local ZERO6 = {'0', '0', '0', '0', '0', '0'}
-- pass 1: find the open reservations of batch (scope, seq) and check 0 <= actual <= reserved (flat arrays:
-- no table per user)
local lu, lj, lr = {}, {}, {}
local nl = 0
for u = 1, n do
  local st = redis.call('HGET', KEYS[u], xf)
  if st then
    local a, open, r1, r2, r3, r4, r5, r6 = string.match(st, '^(%S+) %d (%d) ?(%d*) ?(%d*) ?(%d*) ?(%d*) ?(%d*) ?(%d*)$')
    if open == '1' and tonumber(a) == seq then
      local j = 1
      if m > 1 then j = tonumber(ARGV[idx0 + u]) end
      local c = costs[j]
      local r = ZERO6
      if r1 ~= '' then r = {r1, r2, r3, r4, r5, r6} end
      for i = 1, 6 do
        if c[i] ~= r[i] and not fits('0', c[i], r[i]) then return u end
      end
      nl = nl + 1
      lu[nl], lj[nl], lr[nl] = u, j, r
    end
  end
end
-- pass 2: lower spent by (reserved - actual) and close the reservations
local SF = {'s0', 's1', 's2', 's3', 's4', 's5'}
for t = 1, nl do
  local u, j, r = lu[t], lj[t], lr[t]
  local k = KEYS[u]
  local c = costs[j]
  local sv = seqs .. ' 1 0' .. cstr[j]
  local args, sp = nil, nil
  for i = 1, 6 do
    if c[i] ~= r[i] then
      if not args then
        args = {xf, sv}
        sp = redis.call('HMGET', k, 's0', 's1', 's2', 's3', 's4', 's5')
      end
      args[#args + 1] = SF[i]
      args[#args + 1] = addsub(sp[i] or '0', c[i], r[i])
    end
  end
  if args then redis.call('HSET', k, unpack(args)) else redis.call('HSET', k, xf, sv) end
end
return 0
"""

#: KEYS = [default key]; ARGV = six decimal strings. Sets the default budget iff none is stored; returns 1 if set.
INIT_DEFAULT = r"""
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], '0', ARGV[1], '1', ARGV[2], '2', ARGV[3], '3', ARGV[4], '4', ARGV[5], '5', ARGV[6])
return 1
"""

"""Lua scripts of the Redis budget store (Liang–Yi (adaptive budgeting) Alg. 1, filter eq. (7), componentwise; docs/contract.md §3).

Each script runs atomically inside Redis: one call checks and charges (or settles) a whole batch of users.

Exact integer arithmetic. Redis' Lua numbers are IEEE doubles, exact only below 2^53, while fixed-point amounts
go up to INT64_MAX (2^63 − 1; the "infinite" budget sentinel, and e.g. a δ budget above 0.009 at the 10⁻¹⁸
scale is already > 2^53). Amounts therefore travel as decimal strings and are never converted to one double:

* fast path: ``tonumber`` of a decimal integer string is below ``P53 = 2^53`` iff the integer is (``strtod``
  rounds correctly, rounding is monotone and 2^53 is a double), and then it is exact. Two such operands whose
  double sum is below 2^53 have an exact sum; and ``c ≥ 2^53`` converts to a double ``≥ 2^53``, so comparing
  that sum with ``tonumber(c)`` is exact either way: ``a + b ≤ c`` is decided from doubles whenever
  ``a + b < 2^53``;
* otherwise the strings are split into two limbs, ``hi = digits[1 .. n-9]`` and ``lo = last 9 digits`` (both
  < 2^34, exact), and added / subtracted / compared limb by limb with an explicit carry (base 10^9).

Results are written back as decimal strings (``%d`` of an exact integer-valued double below 2^53 — Lua 5.1
formats ``%d`` from a C ``long``, 64 bits here —, or ``hi`` followed by ``lo`` zero-padded to 9 digits). No
amount ever exceeds INT64_MAX: a charge is written only when ``spent + cost ≤ budget ≤ INT64_MAX``, and a settle
only lowers spent (by ``HINCRBY``, Redis' own exact int64 arithmetic).

Per-user hash (key ``<ns>:{u:<user>}``; absent field = 0 / false):

=================  =======================================================================================
``s0`` … ``s5``    spent, one fixed-point component each (order of ``COMPONENTS``)
``b0`` … ``b5``    per-user budget override (all six present iff overridden); else the default hash
``h``              ``"1"`` once the user is halted (sticky)
``x:<scope>``      ``"<seq> <ok> <open> r0 r1 r2 r3 r4 r5"``: last applied seq in the scope, its outcome,
                   whether its reservation is still open (unsettled), and the reservation (omitted when 0)
=================  =======================================================================================

(Format unchanged from the first version of these scripts. Since the second, the ``x:<scope>`` field of a
user who is halted and whose field is absent or a refusal is no longer rewritten by later admits: every admit of
that user in that scope answers "refused" whatever the seq, and no reservation can be open, so the write could
change no answer.)

Default budget: hash ``<ns>:default`` with fields ``0`` … ``5``. Replay digests of a scope: sorted set
``<ns>:digests:<scope>`` (see :data:`ADMIT`).
"""

from __future__ import annotations

from streamdp.filter.store import DIGEST_KEEP

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

local P53 = 9007199254740992  -- 2^53

-- a + b <= c, exactly (a, b, c non-negative decimal strings)
local function fits(a, b, c)
  local an, bn = tonumber(a), tonumber(b)
  if an < P53 and bn < P53 then
    local x = an + bn
    if x < P53 then return x <= tonumber(c) end
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
  local an, bn, cn = tonumber(a), tonumber(b), tonumber(c)
  if an < P53 and bn < P53 and cn < P53 then
    local x = an + bn
    if x < P53 then return string.format('%d', x - cn) end
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

#: The index of each user's cost vector travels as ONE string of ``w`` bytes per user (big-endian, 0-based;
#: ``w = 1`` while m ≤ 256): unpacked with one ``string.byte`` per user instead of one ARGV string (and one
#: ``tonumber``) per user.
_INDEX = r"""
local function index_of(ix, w, u)
  if w == 1 then return string.byte(ix, u) + 1 end
  if w == 2 then
    local a, b = string.byte(ix, 2 * u - 1, 2 * u)
    return a * 256 + b + 1
  end
  local j = 0
  for q = w * (u - 1) + 1, w * u do j = j * 256 + string.byte(ix, q) end
  return j + 1
end
"""

#: KEYS = [default key, replay-digest key of the scope, user keys...]
#: ARGV = [scope field, seq, m, w, m cost vectors (6 decimal strings each), index string (w bytes per user when
#: m > 1, else empty), replay digest ('' = none: the replay answers below apply unconditionally), call nonce]
#: Returns a string with one character per user: '1' admitted; 'h' refused, and the user is halted with a refusal
#: (or no) state in this scope, which is permanent: every later admit of the user in this scope, of this seq or a
#: later one, is refused without a write (the store may answer it without asking Redis); '0' refused, nothing
#: more to say (a charge-as-new admit of a user halted whose state is a refusal of a later seq: a trusted replay of
#: a seq below that one would be admitted).
#:
#: Replay digests (``streamdp.filter.store``): the digest key is a sorted set scored by seq holding, per seq, the
#: member ``"<seq>:<digest>:<call>:<flag>"`` of the first admit call that carried a digest for it (``<call>``: that
#: call's nonce, ARGV after the digest; the client draws one per attempt of a batch and sends it with every chunk,
#: so that its retry after a lost reply is another call, not a later chunk of the recording one). Recording
#: one forgets the seqs below ``seq - DIGEST_KEEP``. ``<flag>`` is ``T`` (tainted) when, at recording, a later seq
#: was already recorded, or when a chunk of the recording call meets a user whose state is of a later seq (either
#: outcome) or an admission at this seq — a reach-back replay whose first run left no digest (forgotten, or from
#: before digests) — else ``C``.
#: The replay answers (same seq: first outcome; stale: admitted) are given only to another call under the recorded
#: digest with flag ``C``; the recording call's own chunks, any other digest and a tainted record are judged as a
#: new batch (the usual path below). The memory store applies the same rule to its single-call batches.
#:
#: A stale replay (the user's state in the scope is of a later seq) is answered '1' and charges nothing: a refusal
#: halts for good and its state is never rewritten, so the state's seq is the user's first refusal in the scope and
#: the user was admitted at every earlier seq they took part in (answering "refused" to a halted user, as the
#: first version did, made a deterministic replay drop data that the first run had released).
#:
#: Cost per user (Redis' cost of a call inside a script grows with its arguments and reply elements, and is most
#: of the total): one read (HGETALL, or HMGET of the 9 fields read) and one HSET — none for a halted user whose
#: state is a refusal. The per-component outcome (does spent + cost fit the default budget, and the new spent)
#: is a pure function of (cost vector, component, spent string), so when cost vectors are shared by several
#: users (m ≤ n/8) it is computed once per distinct spent string and then looked up (Lua strings are interned:
#: the lookup hashes a pointer), as is the last seq of a scope state string. Measured on Redis 7.0 (2 cores):
#: ~2.5 µs of script time per user-window, against ~4.5–5 µs for the first version
#: (benchmarks/bench_filter_redis.py).
ADMIT = _HELPERS + _INDEX + f"local DIGEST_KEEP = {DIGEST_KEEP}\n" + r"""
local xf = ARGV[1]
local seqs = ARGV[2]
local seq = tonumber(seqs)
local m = tonumber(ARGV[3])
local w = tonumber(ARGV[4])
local ix = ARGV[5 + 6 * m]
local dg = ARGV[6 + 6 * m] or ''
local nonce = ARGV[7 + 6 * m] or ''
local call = redis.call
-- may this admit get the replay answers? (see the replay digests above)
local trusted = true
local recording, member, taint = false, nil, false
if dg ~= '' then
  local head = seqs .. ':' .. dg .. ':'
  local first = call('ZRANGEBYSCORE', KEYS[2], seqs, seqs, 'LIMIT', 0, 1)[1]
  if not first then                                  -- the first admit of (scope, seq): record its digest
    trusted, recording = false, true
    local later = call('ZRANGEBYSCORE', KEYS[2], '(' .. seqs, '+inf', 'LIMIT', 0, 1)[1]
    if later then member = head .. nonce .. ':T' else member = head .. nonce .. ':C' end
    call('ZADD', KEYS[2], seqs, member)
    call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. string.format('%d', seq - DIGEST_KEEP))
  elseif string.sub(first, 1, #head) ~= head then    -- another digest
    trusted = false
  elseif string.sub(first, #head + 1, #head + #nonce + 1) == nonce .. ':' then
    trusted, recording, member = false, true, first  -- a later chunk of the call that recorded it
  else
    trusted = (string.sub(first, -1) == 'C')         -- another call under the recorded digest
  end
end
local d = call('HMGET', KEYS[1], '0', '1', '2', '3', '4', '5')
for i = 1, 6 do if not d[i] then d[i] = '0' end end
local SF = {'s0', 's1', 's2', 's3', 's4', 's5'}
local n = #KEYS - 2
-- memo: remember per-value outcomes (see ADMIT's doc) while cost vectors are shared by several users; checked
-- after 512 users: if the lookups missed more often than they hit, off for the rest of the call
local memo = m * 8 <= n
local hits, misses = 0, 0
-- the default budget as doubles (exact below P53, see the module doc)
local dn = {}
for i = 1, 6 do dn[i] = tonumber(d[i]) end

-- the outcome of one component for a user who has spent s (a decimal string) when charged c against budget b
-- (cn, bn: tonumber of c and b): false if s + c > b (Liang–Yi (adaptive budgeting) eq. (7)), else the new spent s + c as a decimal string
-- (true when c = 0: nothing to write). Exact: the fast path of fits (see the module doc), else fits/addsub.
local function judge(s, c, b, cn, bn)
  local sn = tonumber(s)
  if sn < P53 and cn < P53 then
    local x = sn + cn
    if x < P53 then
      if x > bn then return false end
      if cn == 0 then return true end
      return string.format('%d', x)
    end
  end
  if not fits(s, c, b) then return false end
  if c == '0' then return true end
  return addsub(s, c, '0')
end

-- per distinct cost vector j, prepared at its first use: components c (strings), the non-zero ones nz, the
-- scope state written on admission cstr, okz[i] = (c_i <= d_i) (the test of a component with nothing spent yet,
-- filled when first needed) and (memo) per component a table spent string -> judge(spent, c_i, d_i)
local costs, cnums, nzs, cstr, okzs, memos = {}, {}, {}, {}, {}, {}
local function prepare(j)
  local o = 4 + 6 * (j - 1)
  local c1, c2, c3, c4, c5, c6 = ARGV[o + 1], ARGV[o + 2], ARGV[o + 3], ARGV[o + 4], ARGV[o + 5], ARGV[o + 6]
  local c = {c1, c2, c3, c4, c5, c6}
  local cn = {0, 0, 0, 0, 0, 0}
  local nz = {}
  for i = 1, 6 do
    local ci = c[i]
    if ci ~= '0' then
      nz[#nz + 1] = i
      cn[i] = tonumber(ci)
    end
  end
  costs[j], cnums[j], nzs[j], okzs[j] = c, cn, nz, {}
  if #nz == 0 then
    cstr[j] = seqs .. ' 1 1'
  else
    cstr[j] = seqs .. ' 1 1 ' .. c1 .. ' ' .. c2 .. ' ' .. c3 .. ' ' .. c4 .. ' ' .. c5 .. ' ' .. c6
  end
  if memo then memos[j] = {{}, {}, {}, {}, {}, {}} end
end
local REFUSED = seqs .. ' 0 0'
local LAST, OKC = {}, {}  -- (memo) scope state string -> its last applied seq, and that batch's outcome
local nv = {}    -- the new spent strings of the current user
-- Reading a user: HGETALL (2 arguments, 2 reply elements per stored field: 0 for a new user) while the users'
-- hashes are small, else HMGET of the 9 fields this script reads (11 arguments, 9 elements): Redis' cost of a call
-- inside a script grows with its arguments and reply elements. Switch for the rest of the call when the hashes
-- read so far average more than 5 fields (e.g. a user with state in several scopes). Either way v[1..9] =
-- state, halted flag, spent s0..s5, b0 (false when absent); HGETALL also gives b1..b5 in v[10..14].
local FI = {[xf] = 1, h = 2, s0 = 3, s1 = 4, s2 = 5, s3 = 6, s4 = 7, s5 = 8, b0 = 9, b1 = 10, b2 = 11, b3 = 12,
            b4 = 13, b5 = 14}
local whole = true
local nread = 0
local hv = {}

local out = {}
for u = 1, n do
  local k = KEYS[u + 2]
  local j = 1
  if m > 1 then j = index_of(ix, w, u) end
  if u == 512 and memo and misses > hits then memo = false end
  local v
  if whole then
    local a = call('HGETALL', k)
    local na = #a
    v = hv
    v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9] = false, false, false, false, false, false, false, false, false
    for t = 1, na, 2 do
      local fi = FI[a[t]]
      if fi then v[fi] = a[t + 1] end
    end
    nread = nread + na
    if nread > 10 * u + 40 then whole = false end
  else
    v = call('HMGET', k, xf, 'h', 's0', 's1', 's2', 's3', 's4', 's5', 'b0')
  end
  local st = v[1]
  local halted = (v[2] == '1')
  local last, okc = nil, nil
  if st then
    last = LAST[st]
    if last then
      okc = OKC[st]
    else
      local p = string.find(st, ' ', 1, true)
      last = tonumber(string.sub(st, 1, p - 1))
      okc = string.sub(st, p + 1, p + 1)
      if memo then LAST[st], OKC[st] = last, okc end
    end
  end
  if recording and last and (last > seq or (last == seq and okc == '1')) then taint = true end
  if trusted and last and last >= seq then
    if last == seq then                              -- replay of the same batch: first outcome, no charge
      if okc == '0' then out[u] = 'h' else out[u] = okc end
    else                                             -- stale replay: admitted, no charge (see the doc)
      out[u] = '1'
    end
  elseif halted and okc ~= '1' then
    -- halted (for good), and the scope state is absent or a refusal: every admit of this user in this scope,
    -- of any seq, answers refused and charges nothing (but a trusted stale replay), and writing this refusal would
    -- change no answer (a replay of the state's seq answers its refusal, any other seq the halt) nor any settle
    -- (no reservation is open): nothing to write
    if last and last > seq then out[u] = '0' else out[u] = 'h' end
  else
    local ok = not halted
    if not costs[j] then prepare(j) end
    local nz = nzs[j]
    if ok and #nz > 0 then                           -- Liang–Yi (adaptive budgeting) eq. (7): spent + cost <= budget, every component
      local c, cn = costs[j], cnums[j]
      local b, bn, mj = d, dn, memo and memos[j]
      if v[9] then                                   -- per-user override: exact test against it, no memo
        if whole then b = {v[9], v[10], v[11], v[12], v[13], v[14]}
        else b = call('HMGET', k, 'b0', 'b1', 'b2', 'b3', 'b4', 'b5') end
        bn = {tonumber(b[1]), tonumber(b[2]), tonumber(b[3]), tonumber(b[4]), tonumber(b[5]), tonumber(b[6])}
        mj = nil
      end
      for i = 1, 6 do
        local s = v[2 + i]
        local ci = c[i]
        if s then
          local r
          if mj then
            local t = mj[i]
            r = t[s]
            if r == nil then
              r = judge(s, ci, b[i], cn[i], bn[i])
              t[s] = r
              misses = misses + 1
            else
              hits = hits + 1
            end
          else
            r = judge(s, ci, b[i], cn[i], bn[i])
          end
          if not r then ok = false; break end
          nv[i] = r
        elseif ci ~= '0' then                        -- nothing spent: c_i <= b_i, and the new spent is c_i
          if b == d then
            local okz = okzs[j]
            local z = okz[i]
            if z == nil then z = fits('0', ci, d[i]); okz[i] = z end
            if not z then ok = false; break end
          elseif not fits('0', ci, b[i]) then ok = false; break end
          nv[i] = ci
        end
      end
    end
    if ok then
      local sv = cstr[j]
      local nn = #nz
      if nn == 0 then
        call('HSET', k, xf, sv)
      elseif nn == 1 then
        local a = nz[1]
        call('HSET', k, xf, sv, SF[a], nv[a])
      elseif nn == 2 then
        local a, b = nz[1], nz[2]
        call('HSET', k, xf, sv, SF[a], nv[a], SF[b], nv[b])
      else
        local args = {xf, sv}
        for t = 1, nn do
          local a = nz[t]
          args[2 * t + 1] = SF[a]
          args[2 * t + 2] = nv[a]
        end
        call('HSET', k, unpack(args))
      end
      out[u] = '1'
    else
      if halted then
        call('HSET', k, xf, REFUSED)                 -- closes an admitted state (replays of it are now stale)
      else
        call('HSET', k, xf, REFUSED, 'h', '1')       -- sticky HALT (Liang–Yi (adaptive budgeting) Alg. 1 line 13)
      end
      out[u] = 'h'
    end
  end
end
if taint and string.sub(member, -1) == 'C' then     -- the recording call met a reach-back state (see the doc)
  call('ZREM', KEYS[2], member)
  call('ZADD', KEYS[2], seqs, string.sub(member, 1, -2) .. 'T')
end
return table.concat(out)
"""

#: KEYS = [user keys...]
#: ARGV = [scope field, seq, m, w, m actual-cost vectors (6 decimal strings each), index string (as for ADMIT),
#: mode ('1': only validate, write nothing)]
#: Returns 0 on success, or the 1-based position of the first user whose actual cost exceeds the reservation
#: (then nothing was written).
#:
#: Per user: one HGET of the scope state (pass 1: find the open reservations of batch (scope, seq) and validate
#: 0 <= actual <= reserved), then (pass 2) one HINCRBY by -(reserved - actual) per component that changes (exact
#: int64 arithmetic inside Redis: spent >= reserved >= reserved - actual, so the result is >= 0) and one HSET
#: closing the reservation. Parsing a state string and validating/subtracting a (reservation, actual) pair are
#: done once per distinct state string and cost vector (Lua tables keyed by the interned strings).
SETTLE = _HELPERS + _INDEX + r"""
local xf = ARGV[1]
local seqs = ARGV[2]
local seq = tonumber(seqs)
local m = tonumber(ARGV[3])
local w = tonumber(ARGV[4])
local ix = ARGV[5 + 6 * m]
local check_only = ARGV[6 + 6 * m] == '1'
local call = redis.call
local costs, closed = {}, {}
for j = 1, m do
  local c = {}
  local zero = true
  local o = 4 + 6 * (j - 1)
  for i = 1, 6 do
    local v = ARGV[o + i]
    c[i] = v
    if v ~= '0' then zero = false end
  end
  costs[j] = c
  if zero then closed[j] = seqs .. ' 1 0' else closed[j] = seqs .. ' 1 0 ' .. table.concat(c, ' ') end
end
local n = #KEYS
local ZERO6 = {'0', '0', '0', '0', '0', '0'}
local STATE = '^(%S+) %d (%d) ?(%d*) ?(%d*) ?(%d*) ?(%d*) ?(%d*) ?(%d*)$'
-- RES: state string -> its reservation (6 strings) if it is an open reservation of batch (scope, seq), else false.
-- DEL[j]: reservation -> {component, '-' .. (reserved - actual), ...} for the components that change, or false
-- when the actual cost vector j exceeds the reservation.
local RES, DEL = {}, {}
-- pass 1: find the open reservations of batch (scope, seq) and check 0 <= actual <= reserved (flat arrays: no
-- table per user)
local lu, lj, ld = {}, {}, {}
local nl = 0
for u = 1, n do
  local st = call('HGET', KEYS[u], xf)
  if st then
    local r = RES[st]
    if r == nil then
      r = false
      local a, open, r1, r2, r3, r4, r5, r6 = string.match(st, STATE)
      if open == '1' and tonumber(a) == seq then
        if r1 ~= '' then r = {r1, r2, r3, r4, r5, r6} else r = ZERO6 end
      end
      RES[st] = r
    end
    if r then
      local j = 1
      if m > 1 then j = index_of(ix, w, u) end
      local dj = DEL[j]
      if not dj then dj = {}; DEL[j] = dj end
      local dl = dj[r]
      if dl == nil then
        local c = costs[j]
        dl = {}
        for i = 1, 6 do
          if c[i] ~= r[i] then
            if not fits('0', c[i], r[i]) then dl = false; break end
            local delta = addsub(r[i], '0', c[i])
            if delta ~= '0' then
              dl[#dl + 1] = 's' .. (i - 1)
              dl[#dl + 1] = '-' .. delta
            end
          end
        end
        dj[r] = dl
      end
      if not dl then return u end
      nl = nl + 1
      lu[nl], lj[nl], ld[nl] = u, j, dl
    end
  end
end
if check_only then return 0 end
-- pass 2: lower spent by (reserved - actual) and close the reservations
for t = 1, nl do
  local k = KEYS[lu[t]]
  local dl = ld[t]
  for q = 1, #dl, 2 do call('HINCRBY', k, dl[q], dl[q + 1]) end
  call('HSET', k, xf, closed[lj[t]])
end
return 0
"""

#: KEYS = [default key]; ARGV = six decimal strings. Sets the default budget iff none is stored; returns 1 if set.
INIT_DEFAULT = r"""
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], '0', ARGV[1], '1', ARGV[2], '2', ARGV[3], '3', ARGV[4], '4', ARGV[5], '5', ARGV[6])
return 1
"""

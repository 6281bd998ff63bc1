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
``x:<scope>``      ``"<seq>[:<tag>] <ok> <open> r0 r1 r2 r3 r4 r5"``: the last batch applied to the user in the
                   scope — its seq and tag (the first 16 hex digits of its replay digest; none for an admit
                   without a digest) —, its outcome, whether its reservation is still open (unsettled), and the
                   reservation (omitted when 0)
=================  =======================================================================================

(States written before batch tags have no ``:<tag>``: they read as written by an admit without a digest. The
``x:<scope>`` field of a user who is halted and whose field is absent or a refusal is never rewritten by later
admits: every admit of that user in that scope answers "refused" whatever the seq, and no reservation can be open,
so the write could change no answer.)

Default budget: hash ``<meta>default`` with fields ``0`` … ``5``; ``<meta>meta`` field ``default`` marks a store
whose default was once set (a default missing there was lost, not never set). Replay digests of a scope: sorted
set ``<meta>digests:<scope>`` (see :data:`ADMIT`). ``<meta>`` is ``<ns>:`` on a single Redis and ``{<ns>}:`` on a
Redis Cluster (one hash slot for all of them). Fences: field ``fence`` of the hash ``<meta><name>`` (the
checkpoint hash for the Kafka worker's fence), and on a cluster a copy per hash slot, ``<ns>:{<slot tag>}:fence:
<name>`` (a string: the highest epoch seen in that slot).

Every script reads and validates everything it will use — key types (a read that raises — a key of another type —
ends the read pass, and the error names the key), stored amounts (decimal integers in [0, INT64_MAX]; a spent field
where it is used, memoised per distinct string), state strings, the halted flag, overrides, the default budget —
in a first pass, and writes in a second one, so an error leaves nothing half-written. (Redis runs a script
atomically but does not roll back the writes made before an error.) The two passes cost about 0.5–1 µs per user of
script time over the single pass before (BENCHMARKS.md, "Redis filter").
"""

from __future__ import annotations

from streamdp.filter.store import DIGEST_KEEP

#: the scripts' error replies (their first word), mapped to exceptions by the store
ERROR_CODES = ("FENCED", "LOST", "NODEFAULT", "CORRUPT", "WRONGTYPE")

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
local IMAX = '9223372036854775807'

-- a stored amount: a decimal integer in [0, INT64_MAX] (what every script writes)
local function amount_ok(s)
  local n = #s
  return n >= 1 and n <= 19 and not string.find(s, '%D') and (n < 19 or s <= IMAX)
end

local function err(code, text) return redis.error_reply(code .. ' ' .. text) end

-- the error of a failed read (redis.pcall's error table): a key of another type is WRONGTYPE naming it; anything
-- else (a cluster node that does not serve the key's slot any more, …) is passed on as it is, for the client
local function read_error(r, what)
  local m = r.err or tostring(r)
  if string.find(m, 'WRONGTYPE', 1, true) then return err('WRONGTYPE', what) end
  return redis.error_reply(m)
end

-- the fence record on a single Redis: field 'fence' of a hash, which must hold exactly this epoch
local function fence_hash(key, epoch)
  local f = redis.pcall('HGET', key, 'fence')
  if type(f) == 'table' then return read_error(f, 'fence record ' .. key .. ' is not a hash') end
  if not f then
    if redis.call('EXISTS', key) == 0 then
      return err('LOST', 'fence record ' .. key .. ' is gone: the store lost its state')
    end
    return err('FENCED', key .. ' holds no fence epoch (claimed by a version without fences)')
  end
  if f ~= epoch then return err('FENCED', key .. ' is claimed by epoch ' .. f .. ', not ' .. epoch) end
  return nil
end

-- a slot's copy of a fence on a Redis Cluster: refused if it holds a later epoch; returns (error, raise?)
local function fence_slot(key, epoch)
  local f = redis.pcall('GET', key)
  if type(f) == 'table' then return read_error(f, 'fence copy ' .. key .. ' is not a string'), false end
  if f then
    local fn = tonumber(f)
    if not fn or not string.find(f, '^%d+$') then return err('CORRUPT', 'fence copy ' .. key .. ': ' .. f), false end
    if fn > tonumber(epoch) then
      return err('FENCED', key .. ' is claimed by epoch ' .. f .. ', not ' .. epoch), false
    end
    if fn == tonumber(epoch) then return nil, false end
  end
  return nil, true
end

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


#: Mode 'S' (single Redis): KEYS = [default hash, replay-digest set of the scope, the fence hash (iff a fence),
#: then the user keys]; ``nmeta`` = 2 or 3.
#: Mode 'C' (a Redis Cluster): KEYS = [] and the user keys travel in ARGV — one call per primary for the users of
#: the hash slots it serves (a script without flags may use keys it did not declare, of any slot the node serves;
#: declared keys of several slots would be refused, CROSSSLOT). A key whose slot is not served here (a slot that
#: moved or is migrating) is an error at its first read, before any write: the client refreshes the slot map and
#: sends the batch again (safe by construction).
#: ARGV = [scope field, seq, m, w, m cost vectors (6 decimal strings each), index string (w bytes per user when
#: m > 1, else empty), replay digest ('' = none), nmeta, fence epoch ('' = none), mode; mode 'C' adds the default
#: budget (6 decimal strings, read by the client from the default hash in this admit), 'R' or 'N' (what to do with a
#: stale candidate, below), the number F of fence copies, the F fence copies of the slots of these users (iff a
#: fence), then the user keys].
#: Returns a string with one character per user: '1' admitted; 'h' refused, and the user is halted with a refusal
#: (or no) state in this scope, which is permanent: every later admit of the user in this scope, of this seq or a
#: later one, is refused without a write (the store may answer it without asking Redis); '0' refused, nothing
#: more to say (a user halted whose state is a refusal of a later seq: a trusted replay of a seq below that one
#: would be admitted).
#: Errors (nothing written): FENCED, LOST (the fence record is gone), NODEFAULT (no default budget), CORRUPT (a
#: stored value that is not what the scripts write), WRONGTYPE (a key of another type), each naming the key.
#:
#: Exactly once per batch (``streamdp.filter.store``): per user, in this order —
#:
#: 1. *copy*: the user's state is (seq, this admit's tag) — or any state at seq, for an admit without a digest: the
#:    batch was applied to this user already (by this chunk's earlier copy, another cut of the batch, another
#:    owner's replay); its outcome is answered, nothing written;
#: 2. *stale*: a trusted admit, and the user's state is of a later seq and tagged (or any later state, without a
#:    digest): answered '1', nothing written (a refusal halts for good and is never rewritten, so the user was not
#:    refused at seq);
#: 3. a halted user whose state is absent or a refusal: refused, nothing written;
#: 4. else judged as new: Liang–Yi (adaptive budgeting) eq. (7) componentwise against the user's override or the default; admitted users are
#:    charged and their state becomes (seq:tag, admitted, open, reservation); a refused user is halted for good.
#:
#: Trust (the stale rule): the replay-digest set holds, per seq, the member ``"<seq>:<digest>::<flag>"`` of the
#: first admit that carried a digest for it (the empty field was a call nonce in earlier versions); ``<flag>`` is
#: ``T`` when a later seq was already recorded as it was made (a reach-back: its first run left no digest), else
#: ``C``. An admit is trusted iff the record exists, is its digest and is ``C``. On a single Redis the first chunk
#: that finds no record writes it (after its own checks) and is not trusted itself; later chunks and calls read it.
#: On a cluster the record lives in the meta keys' hash slot, on some primary, so a call on another cannot read it
#: when it runs: with 'R' it answers ``'s'`` for a user rule 2 would apply to (a digest, a tagged state of a later
#: seq) and writes nothing for them; the client, after every call (and ADMIT_RECORD), reads the record once and
#: answers them '1' if the admit is trusted, else sends them again with 'N' (judged as new). The record is immutable once written, so
#: reading it later decides as reading it when the group ran would (standalone chunks read it as they run): a
#: tagged state of a later seq was written by a copy that had recorded this seq before going on.
#: Recording forgets the seqs below ``seq - DIGEST_KEEP``. (Why the first call's other chunks may be trusted: a
#: tagged state of a later seq is written only by an admit that found or made that later seq's record, which would
#: have tainted this one; an untagged one never passes rule 2 under a digest.)
#:
#: Cost per user (Redis' cost of a call inside a script grows with its arguments and reply elements, and is most
#: of the total): one read (HGETALL, or HMGET of the 9 fields read) and one HSET — none for a copy, a stale replay
#: or a halted user whose state is a refusal. The per-component outcome (does spent + cost fit the default budget,
#: and the new spent) is a pure function of (cost vector, component, spent string), so when cost vectors are shared
#: by several users (m ≤ n/8) it is computed once per distinct spent string and then looked up (Lua strings are
#: interned: the lookup hashes a pointer), as are the parse of a state string and the check of a stored amount.
ADMIT = _HELPERS + _INDEX + f"local DIGEST_KEEP = {DIGEST_KEEP}\n" + r"""
local xf = ARGV[1]
local seqs = ARGV[2]
local seq = tonumber(seqs)
local m = tonumber(ARGV[3])
local w = tonumber(ARGV[4])
local t0 = 4 + 6 * m
local ix = ARGV[t0 + 1]
local dg = ARGV[t0 + 2]
local nmeta = tonumber(ARGV[t0 + 3])
local fence = ARGV[t0 + 4]
local mode = ARGV[t0 + 5]
local call, pcall_ = redis.call, redis.pcall
local tag = string.sub(dg, 1, 16)
local head = seqs                                    -- the seq[:tag] of the states this admit writes
if dg ~= '' then head = seqs .. ':' .. tag end

-- 1. the meta keys, read and checked
local d, trusted, member, raise = nil, true, nil, false
local ub = nil                                       -- mode 'C': the user keys are ARGV[ub + 1 …]
local dname = 'passed by the client'
if mode == 'S' then
  if fence ~= '' then
    local e = fence_hash(KEYS[3], fence)
    if e then return e end
  end
  d = pcall_('HMGET', KEYS[1], '0', '1', '2', '3', '4', '5')
  if d.err then return read_error(d, 'default budget ' .. KEYS[1] .. ' is not a hash') end
  dname = KEYS[1]
  if dg ~= '' then
    local first = pcall_('ZRANGEBYSCORE', KEYS[2], seqs, seqs, 'LIMIT', 0, 1)
    if first.err then return read_error(first, 'replay digests ' .. KEYS[2] .. ' is not a sorted set') end
    first = first[1]
    if not first then                                -- the first admit of (scope, seq): record it (below)
      trusted = false
      local later = call('ZRANGEBYSCORE', KEYS[2], '(' .. seqs, '+inf', 'LIMIT', 0, 1)[1]
      if later then member = seqs .. ':' .. dg .. '::T' else member = seqs .. ':' .. dg .. '::C' end
    else
      local h = seqs .. ':' .. dg .. ':'
      trusted = (string.sub(first, 1, #h) == h) and (string.sub(first, -1) == 'C')
    end
  end
else
  local nf = tonumber(ARGV[t0 + 13])
  raise = {}
  for f = 1, nf do                                   -- the fence's copy in each slot of these users
    local fk = ARGV[t0 + 13 + f]
    local e, up = fence_slot(fk, fence)
    if e then return e end
    if up then raise[#raise + 1] = fk end
  end
  ub = t0 + 13 + nf
  d = {ARGV[t0 + 6], ARGV[t0 + 7], ARGV[t0 + 8], ARGV[t0 + 9], ARGV[t0 + 10], ARGV[t0 + 11]}
  trusted = false
end
local resolve = (mode == 'C' and dg ~= '' and ARGV[t0 + 12] == 'R')  -- answer stale candidates 's' (see above)
if not (d[1] or d[2] or d[3] or d[4] or d[5] or d[6]) then
  return err('NODEFAULT', 'the default budget ' .. dname .. ' is missing')
end
for i = 1, 6 do
  if not d[i] or not amount_ok(d[i]) then
    return err('CORRUPT', 'default budget ' .. dname .. ' field ' .. (i - 1) .. ': ' .. tostring(d[i]))
  end
end

local SF = {'s0', 's1', 's2', 's3', 's4', 's5'}
local UK, uo = KEYS, nmeta                           -- user u's key: UK[uo + u]
if ub then UK, uo = ARGV, ub end
local n = #UK - uo
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
    cstr[j] = head .. ' 1 1'
  else
    cstr[j] = head .. ' 1 1 ' .. c1 .. ' ' .. c2 .. ' ' .. c3 .. ' ' .. c4 .. ' ' .. c5 .. ' ' .. c6
  end
  if memo then memos[j] = {{}, {}, {}, {}, {}, {}} end
end
-- (memo) state string -> its seq, outcome and tag
local SQ, SO, ST = {}, {}, {}
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
-- the writes, planned in pass 1 and made in pass 2: per write the user, the cost vector and the kind ('A'
-- admitted: wv[6(t-1) + q] holds the new spent of its q-th non-zero component; 'R' refused, now halted; 'C'
-- refused, halted already: closes an admitted state)
local wu, wj, wk, wv = {}, {}, {}, {}
local nw = 0

-- 2. pass 1: read, validate and decide every user (no write). One protected call around the whole pass (cheaper
-- than redis.pcall per read): a read that fails — a key of another type, a cluster node that no longer serves a
-- key — ends the pass with nothing written; the key being read is named.
local out = {}
local ck = nil                                       -- the key being read
local function pass1()
-- locals, not upvalues, on the hot path (Lua 5.1 reads a local from a register, an upvalue through a table)
local UK, uo, n, m, ix, w, seq, dg, tag, trusted, resolve = UK, uo, n, m, ix, w, seq, dg, tag, trusted, resolve
local call, FI, hv, SQ, SO, ST, SF = call, FI, hv, SQ, SO, ST, SF
local costs, cnums, nzs, okzs, memos, d, dn, nv = costs, cnums, nzs, okzs, memos, d, dn, nv
local wu, wj, wk, wv, out, judge, fits, prepare, index_of = wu, wj, wk, wv, out, judge, fits, prepare, index_of
local memo, hits, misses, whole, nread, nw = memo, 0, 0, whole, 0, 0
local bset = false                                   -- v[10..14] hold the previous user's b1..b5
for u = 1, n do
  local k = UK[uo + u]
  ck = k
  local j = 1
  if m > 1 then j = index_of(ix, w, u) end
  if u == 512 and memo and misses > hits then memo = false end
  local v
  if whole then
    local a = call('HGETALL', k)
    local na = #a
    v = hv
    v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9] = false, false, false, false, false, false, false, false, false
    if bset then v[10], v[11], v[12], v[13], v[14] = false, false, false, false, false; bset = false end
    for t = 1, na, 2 do
      local fi = FI[a[t]]
      if fi then
        v[fi] = a[t + 1]
        if fi > 9 then bset = true end
      end
    end
    nread = nread + na
    if nread > 10 * u + 40 then whole = false end
  else
    v = call('HMGET', k, xf, 'h', 's0', 's1', 's2', 's3', 's4', 's5', 'b0')
    if v[9] then
      local b = call('HMGET', k, 'b1', 'b2', 'b3', 'b4', 'b5')
      v[10], v[11], v[12], v[13], v[14] = b[1], b[2], b[3], b[4], b[5]
    end
  end
  -- validate what was read
  local st = v[1]
  local last, okc, stag = nil, nil, nil
  if st then
    last = SQ[st]
    if last then
      okc, stag = SO[st], ST[st]
    else
      -- "<seq>[:<tag>] <ok> <open> …": the seq must be an integer and ok a 0/1 (a damaged tag only fails to match)
      local p = string.find(st, ' ', 1, true)
      local c = p and string.find(st, ':', 1, true)
      if c and c > p then c = nil end
      last = p and tonumber(string.sub(st, 1, (c or p) - 1))
      okc = p and string.sub(st, p + 1, p + 1)
      if not last or last % 1 ~= 0 or (okc ~= '0' and okc ~= '1') then
        return err('CORRUPT', k .. ' field ' .. xf .. ': ' .. st)
      end
      if c then stag = string.sub(st, c + 1, p - 1) else stag = '' end
      if memo then SQ[st], SO[st], ST[st] = last, okc, stag end
    end
  end
  local hf = v[2]
  if hf and hf ~= '1' then return err('CORRUPT', k .. ' field h: ' .. hf) end
  local halted = (hf == '1')
  -- the spent fields are checked where they are used (judged below: a memo miss, or every time without the memo)
  if v[9] then
    for i = 9, 14 do
      local s = v[i]
      if not s or not amount_ok(s) then return err('CORRUPT', k .. ' field b' .. (i - 9) .. ': ' .. tostring(s)) end
    end
  end
  -- decide
  if last == seq and (dg == '' or stag == tag) then  -- 1. a copy of a batch applied to this user: its outcome
    if okc == '1' then out[u] = '1' else out[u] = 'h' end
  elseif (trusted or dg == '') and last and last > seq and (dg == '' or stag ~= '') then
    out[u] = '1'                                     -- 2. stale replay: admitted, no charge (see the doc)
  elseif resolve and last and last > seq and stag ~= '' then
    out[u] = 's'                                     -- 2, on a cluster: the client decides (see the doc)
  elseif halted and okc ~= '1' then
    -- 3. halted (for good), and the scope state is absent or a refusal: every admit of this user in this scope,
    -- of any seq, answers refused and charges nothing (but a copy or a trusted stale replay), and writing this
    -- refusal would change no answer nor any settle (no reservation is open): nothing to write
    if last and last > seq then out[u] = '0' else out[u] = 'h' end
  else                                               -- 4. judged as new
    local ok = not halted
    if not costs[j] then prepare(j) end
    local nz = nzs[j]
    if ok and #nz > 0 then                           -- Liang–Yi (adaptive budgeting) eq. (7): spent + cost <= budget, every component
      local c, cn = costs[j], cnums[j]
      local b, bn, mj = d, dn, memo and memos[j]
      if v[9] then                                   -- per-user override: exact test against it, no memo
        b = {v[9], v[10], v[11], v[12], v[13], v[14]}
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
              if not amount_ok(s) then return err('CORRUPT', k .. ' field ' .. SF[i] .. ': ' .. s) end
              r = judge(s, ci, b[i], cn[i], bn[i])
              t[s] = r
              misses = misses + 1
            else
              hits = hits + 1
            end
          else
            if not amount_ok(s) then return err('CORRUPT', k .. ' field ' .. SF[i] .. ': ' .. s) end
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
    nw = nw + 1
    wu[nw] = u
    if ok then
      wj[nw], wk[nw] = j, 'A'
      local base = 6 * (nw - 1)
      for q = 1, #nz do wv[base + q] = nv[nz[q]] end
      out[u] = '1'
    else
      if halted then wk[nw] = 'C' else wk[nw] = 'R' end
      out[u] = 'h'
    end
  end
end
return nil, nw
end
local done, failed, nwrites = pcall(pass1)
if not done then                                     -- a read raised: nothing was written
  local msg = type(failed) == 'table' and failed.err or tostring(failed)
  if string.find(msg, 'WRONGTYPE', 1, true) then return err('WRONGTYPE', 'user record ' .. tostring(ck) .. ' is not a hash') end
  return redis.error_reply(msg)
end
if failed then return failed end                     -- a validation error reply (CORRUPT …)
nw = nwrites

-- 3. pass 2: the writes
if raise then                                        -- claims these slots had not heard of yet
  for f = 1, #raise do call('SET', raise[f], fence) end
end
if member then
  call('ZADD', KEYS[2], seqs, member)
  call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. string.format('%d', seq - DIGEST_KEEP))
end
local REFUSED = head .. ' 0 0'
for t = 1, nw do
  local k = UK[uo + wu[t]]
  local kind = wk[t]
  if kind == 'A' then
    local j = wj[t]
    local nz = nzs[j]
    local nn = #nz
    local sv = cstr[j]
    local base = 6 * (t - 1)
    if nn == 0 then
      call('HSET', k, xf, sv)
    elseif nn == 1 then
      call('HSET', k, xf, sv, SF[nz[1]], wv[base + 1])
    elseif nn == 2 then
      call('HSET', k, xf, sv, SF[nz[1]], wv[base + 1], SF[nz[2]], wv[base + 2])
    else
      local args = {xf, sv}
      for q = 1, nn do
        args[2 * q + 1] = SF[nz[q]]
        args[2 * q + 2] = wv[base + q]
      end
      call('HSET', k, unpack(args))
    end
  elseif kind == 'C' then
    call('HSET', k, xf, REFUSED)                     -- closes an admitted state (replays of it are now stale)
  else
    call('HSET', k, xf, REFUSED, 'h', '1')           -- sticky HALT (Liang–Yi (adaptive budgeting) Alg. 1 line 13)
  end
end
return table.concat(out)
"""

#: A cluster admit's first step, on the hash slot of the meta keys (read-only).
#: KEYS = [default hash, replay-digest set of the scope, the fence hash (iff a fence)]; ARGV = [seq, digest ('' =
#: none), fence epoch ('' = none)]. Returns [d0 … d5, trusted '1'/'0', '1' if no record exists for seq yet (the
#: client records it with ADMIT_RECORD after the slot groups), else '0'].
ADMIT_BEGIN = _HELPERS + r"""
local seqs, dg, fence = ARGV[1], ARGV[2], ARGV[3]
if fence ~= '' then
  local e = fence_hash(KEYS[3], fence)
  if e then return e end
end
local d = redis.pcall('HMGET', KEYS[1], '0', '1', '2', '3', '4', '5')
if d.err then return read_error(d, 'default budget ' .. KEYS[1] .. ' is not a hash') end
if not (d[1] or d[2] or d[3] or d[4] or d[5] or d[6]) then
  return err('NODEFAULT', 'the default budget ' .. KEYS[1] .. ' is missing')
end
for i = 1, 6 do
  if not d[i] or not amount_ok(d[i]) then
    return err('CORRUPT', 'default budget ' .. KEYS[1] .. ' field ' .. (i - 1) .. ': ' .. tostring(d[i]))
  end
end
local trusted, fresh = '1', '0'
if dg ~= '' then
  local first = redis.pcall('ZRANGEBYSCORE', KEYS[2], seqs, seqs, 'LIMIT', 0, 1)
  if first.err then return read_error(first, 'replay digests ' .. KEYS[2] .. ' is not a sorted set') end
  first = first[1]
  if not first then
    trusted, fresh = '0', '1'
  else
    local h = seqs .. ':' .. dg .. ':'
    if not ((string.sub(first, 1, #h) == h) and (string.sub(first, -1) == 'C')) then trusted = '0' end
  end
end
return {d[1], d[2], d[3], d[4], d[5], d[6], trusted, fresh}
"""

#: A cluster admit's last step: KEYS = [replay-digest set of the scope, the fence hash (iff a fence)]; ARGV = [seq,
#: digest, fence epoch ('' = none)]. Records the digest of seq unless one is recorded (tainted if a later seq is),
#: forgets seqs below ``seq - DIGEST_KEEP``.
ADMIT_RECORD = _HELPERS + f"local DIGEST_KEEP = {DIGEST_KEEP}\n" + r"""
local seqs, dg = ARGV[1], ARGV[2]
local seq = tonumber(seqs)
if ARGV[3] ~= '' then
  local e = fence_hash(KEYS[2], ARGV[3])
  if e then return e end
end
if redis.call('ZRANGEBYSCORE', KEYS[1], seqs, seqs, 'LIMIT', 0, 1)[1] then return 0 end
local later = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. seqs, '+inf', 'LIMIT', 0, 1)[1]
local flag = 'C'
if later then flag = 'T' end
redis.call('ZADD', KEYS[1], seqs, seqs .. ':' .. dg .. '::' .. flag)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%d', seq - DIGEST_KEEP))
return 1
"""

#: Single Redis ('S'): KEYS = [the fence hash (iff a fence: nmeta = 1), then the user keys]. Cluster ('C'): KEYS =
#: [], the fence copies and the user keys in ARGV (as for ADMIT).
#: ARGV = [scope field, seq, m, w, m actual-cost vectors (6 decimal strings each), index string (as for ADMIT),
#: mode ('1': only validate, write nothing), tag ('' = settle the open reservation of seq whatever its tag), nmeta,
#: fence epoch ('' = none), 'S' / 'C'; 'C' adds F, the F fence copies (iff a fence), then the user keys]
#: Returns 0 on success, or the 1-based position of the first user whose actual cost exceeds the reservation
#: (then nothing was written). Errors as ADMIT's (FENCED, LOST, CORRUPT, WRONGTYPE), nothing written.
#:
#: Per user: one HGET of the scope state (pass 1: find the open reservations of batch (scope, seq[, tag]),
#: validate 0 <= actual <= reserved and the spent fields that change), then (pass 2) one HINCRBY by
#: -(reserved - actual) per component that changes (exact int64 arithmetic inside Redis: spent >= reserved >=
#: reserved - actual, checked in pass 1, so the result is >= 0) and one HSET closing the reservation (its seq and
#: tag kept). Parsing a state string and validating/subtracting a (reservation, actual) pair are done once per
#: distinct state string and cost vector (Lua tables keyed by the interned strings).
SETTLE = _HELPERS + _INDEX + r"""
local xf = ARGV[1]
local seqs = ARGV[2]
local seq = tonumber(seqs)
local m = tonumber(ARGV[3])
local w = tonumber(ARGV[4])
local t0 = 4 + 6 * m
local ix = ARGV[t0 + 1]
local check_only = ARGV[t0 + 2] == '1'
local tag = ARGV[t0 + 3]
local nmeta = tonumber(ARGV[t0 + 4])
local fence = ARGV[t0 + 5]
local mode = ARGV[t0 + 6]
local call, pcall_ = redis.call, redis.pcall
local raise = {}
local UK, uo = KEYS, nmeta                           -- user u's key: UK[uo + u]
if mode == 'S' then
  if fence ~= '' then
    local e = fence_hash(KEYS[1], fence)
    if e then return e end
  end
else
  local nf = tonumber(ARGV[t0 + 7])
  for f = 1, nf do
    local fk = ARGV[t0 + 7 + f]
    local e, up = fence_slot(fk, fence)
    if e then return e end
    if up then raise[#raise + 1] = fk end
  end
  UK, uo = ARGV, t0 + 7 + nf
end
local costs, suffix = {}, {}
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
  if zero then suffix[j] = ' 1 0' else suffix[j] = ' 1 0 ' .. table.concat(c, ' ') end
end
local n = #UK - uo
local ZERO6 = {'0', '0', '0', '0', '0', '0'}
local STATE = '^((%-?%d+):?(%x*)) [01] ([01]) ?(%d*) ?(%d*) ?(%d*) ?(%d*) ?(%d*) ?(%d*)$'
-- RES: state string -> {its reservation (6 strings), its seq[:tag]} if it is an open reservation of the batch being
-- settled, else false. DEL[j]: reservation -> {component, '-' .. (reserved - actual), ...} for the components that
-- change, or false when the actual cost vector j exceeds the reservation.
local RES, DEL = {}, {}
local SI = {s0 = 0, s1 = 1, s2 = 2, s3 = 3, s4 = 4, s5 = 5}
local VS = {}
-- pass 1: find the open reservations of the batch, check 0 <= actual <= reserved and the spent fields that change
-- (flat arrays: no table per user)
local lu, lj, ld, lh = {}, {}, {}, {}
local nl = 0
local ck = nil                                       -- the key being read (one protected call: see ADMIT)
local function pass1()
local UK, uo, n, m, ix, w, seq, tag, xf, call = UK, uo, n, m, ix, w, seq, tag, xf, call  -- locals (see ADMIT)
local RES, DEL, VS, SI, costs, lu, lj, ld, lh, STATE = RES, DEL, VS, SI, costs, lu, lj, ld, lh, STATE
local nl = 0
for u = 1, n do
  local k = UK[uo + u]
  ck = k
  local hv = call('HMGET', k, xf, 's0', 's1', 's2', 's3', 's4', 's5')  -- the state and the spent fields
  local st = hv[1]
  if st then
    local r = RES[st]
    if r == nil then
      r = false
      local hd, a, t, open, r1, r2, r3, r4, r5, r6 = string.match(st, STATE)
      if not hd then return err('CORRUPT', k .. ' field ' .. xf .. ': ' .. st) end
      if r1 ~= '' then
        for _, x in ipairs({r1, r2, r3, r4, r5, r6}) do
          if not amount_ok(x) then return err('CORRUPT', k .. ' field ' .. xf .. ': ' .. st) end
        end
      end
      if open == '1' and tonumber(a) == seq and (tag == '' or t == tag) then
        if r1 ~= '' then r = {r1, r2, r3, r4, r5, r6, hd} else r = {'0', '0', '0', '0', '0', '0', hd} end
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
      local okd = VS[dl]                             -- spent strings known to pass the check below for dl
      if not okd then okd = {}; VS[dl] = okd end
      for q = 1, #dl, 2 do                           -- the spent fields that change: valid, and >= the decrease
        local s = hv[2 + SI[dl[q]]]
        if not (s and okd[s] == q) then
          if not s or not amount_ok(s) or not fits(string.sub(dl[q + 1], 2), '0', s) then
            return err('CORRUPT', k .. ' field ' .. dl[q] .. ': ' .. tostring(s) .. ' (below its open reservation)')
          end
          okd[s] = q
        end
      end
      nl = nl + 1
      lu[nl], lj[nl], ld[nl], lh[nl] = u, j, dl, r[7]
    end
  end
end
return nil, nl
end
local done, failed, nsettled = pcall(pass1)
if not done then
  local msg = type(failed) == 'table' and failed.err or tostring(failed)
  if string.find(msg, 'WRONGTYPE', 1, true) then return err('WRONGTYPE', 'user record ' .. tostring(ck) .. ' is not a hash') end
  return redis.error_reply(msg)
end
if failed then return failed end                     -- a validation error, or the position of a user over its reservation
nl = nsettled
if check_only then return 0 end
-- pass 2: lower spent by (reserved - actual) and close the reservations
for f = 1, #raise do call('SET', raise[f], fence) end
for t = 1, nl do
  local k = UK[uo + lu[t]]
  local dl = ld[t]
  for q = 1, #dl, 2 do call('HINCRBY', k, dl[q], dl[q + 1]) end
  call('HSET', k, xf, lh[t] .. suffix[lj[t]])
end
return 0
"""

#: KEYS = [default hash, meta hash]; ARGV = six decimal strings. Sets the default budget iff none is stored and
#: the store never had one (no mark in the meta hash); marks the store. Returns 1 if set, 0 if one is stored, -1
#: if the default is missing from a store that had one (lost: the caller refuses, DefaultBudgetMissing).
INIT_DEFAULT = r"""
local t = redis.call('TYPE', KEYS[1])['ok']
if t ~= 'none' and t ~= 'hash' then return redis.error_reply('WRONGTYPE default budget ' .. KEYS[1] .. ' is not a hash') end
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HSETNX', KEYS[2], 'default', 'set')
  return 0
end
if redis.call('HEXISTS', KEYS[2], 'default') == 1 then return -1 end
redis.call('HSET', KEYS[1], '0', ARGV[1], '1', ARGV[2], '2', ARGV[3], '3', ARGV[4], '4', ARGV[5], '5', ARGV[6])
redis.call('HSET', KEYS[2], 'default', 'set')
return 1
"""

#: KEYS = [the fence hash]: a new epoch of the fence (Redis' own exact int64 increment). Returns it.
CLAIM_FENCE = r"""
local t = redis.call('TYPE', KEYS[1])['ok']
if t ~= 'none' and t ~= 'hash' then return redis.error_reply('WRONGTYPE fence record ' .. KEYS[1] .. ' is not a hash') end
return redis.call('HINCRBY', KEYS[1], 'fence', 1)
"""

#: KEYS = [a slot's fence copy]; ARGV = [epoch]: raise it to the epoch unless it holds a later one.
RAISE_FENCE = r"""
local f = redis.call('GET', KEYS[1])
if f and tonumber(f) and tonumber(f) >= tonumber(ARGV[1]) then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
return 1
"""

#: KEYS = [the fence hash]; ARGV = [epoch]: a cluster settle's first step (read-only): FENCED / LOST / ok.
CHECK_FENCE = _HELPERS + r"""
local e = fence_hash(KEYS[1], ARGV[1])
if e then return e end
return 1
"""

#: The release log's retention (store.py, "release log"), shared by PUT_RELEASE and the Kafka worker's checkpoint
#: script: per release a record key, and — for keys of the engine's form — the string of its (query, epoch)'s
#: digests (16 bytes per window at offset 16·(window − 1)) and the sorted set of its query's kept records (member
#: ``<epoch>/<window>``, scored in (epoch, window) order), whose oldest beyond ``keep`` are deleted. Those keys share
#: the record key's hash slot on a cluster (``{<ns>}:…``).
RELEASE_HELPERS = r"""
local Z16 = string.rep('\0', 16)
-- the stored record (or false) and, if it was dropped, its digest (or false); errors before any write
local function rel_read(bkey, dkey, zkey, off)
  local body = redis.pcall('GET', bkey)
  if type(body) == 'table' then
    if string.find(body.err or '', 'WRONGTYPE', 1, true) then
      return nil, nil, 'WRONGTYPE release record ' .. bkey .. ' is not a string'
    end
    return nil, nil, body.err
  end
  if body then return body, false end
  if dkey == '' then return false, false end
  local d = redis.pcall('GETRANGE', dkey, off, off + 15)
  if type(d) == 'table' then
    if string.find(d.err or '', 'WRONGTYPE', 1, true) then
      return nil, nil, 'WRONGTYPE release digests ' .. dkey .. ' is not a string'
    end
    return nil, nil, d.err
  end
  local zt = redis.call('TYPE', zkey)['ok']
  if zt ~= 'none' and zt ~= 'zset' then return nil, nil, 'WRONGTYPE release order ' .. zkey .. ' is not a sorted set' end
  if #d == 16 and d ~= Z16 then return false, d end
  return false, false
end
local function rel_write(bkey, dkey, zkey, record, digest, off, score, member, keep, prefix)
  redis.call('SET', bkey, record)
  if dkey ~= '' then
    redis.call('SETRANGE', dkey, off, digest)
    redis.call('ZADD', zkey, score, member)
    local n = redis.call('ZCARD', zkey)
    if n > keep then
      local gone = redis.call('ZPOPMIN', zkey, n - keep)
      for q = 1, #gone, 2 do redis.call('DEL', prefix .. gone[q]) end
    end
  end
end
"""

#: KEYS = [record key]; ARGV = [record, digest (16 bytes), digest key ('' = none: the key is not of the engine's
#: form), order key, offset, score, member, keep, record-key prefix of the query]. First write wins: returns
#: {0, stored record} when a record is stored, {1} when this one was stored or equals (by digest) a record dropped
#: by retention, {2, digest} when a different record was dropped (the caller answers trimmed_marker(digest)).
PUT_RELEASE = RELEASE_HELPERS + r"""
local body, d, e = rel_read(KEYS[1], ARGV[3], ARGV[4], tonumber(ARGV[5]))
if e then return redis.error_reply(e) end
if body then return {0, body} end
if d then
  if d == ARGV[2] then return {1} end
  return {2, d}
end
rel_write(KEYS[1], ARGV[3], ARGV[4], ARGV[1], ARGV[2], tonumber(ARGV[5]), ARGV[6], ARGV[7], tonumber(ARGV[8]), ARGV[9])
return {1}
"""

#: KEYS = [record key]; ARGV = [digest key ('' = none), order key, offset]: {0, record}, {2, digest}, or {} (absent).
GET_RELEASE = RELEASE_HELPERS + r"""
local body, d, e = rel_read(KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3]))
if e then return redis.error_reply(e) end
if body then return {0, body} end
if d then return {2, d} end
return {}
"""

"""Columnar decoding of event payloads in C++: Apache Arrow's newline-delimited JSON reader with an explicit schema
(the fast path of :func:`streamdp.input.events.parse_batch`; docs/contract.md §6–7).

This decoder never decides that an event is bad. It accepts a payload only where it is certain that the exact
msgspec path would accept it with identical values; every other payload comes back as a *slow row*, and the msgspec
path alone decides (and names the dead-letter reason). Where the two decoders could differ, the payload is screened
out before or after Arrow sees it:

* layout — a payload must start with ``{``, end with ``}`` and contain no CR/LF. Then no JSON value can span two
  lines (a ``}`` followed by ``{`` is a syntax error unless the ``}`` closed the top-level value), so Arrow's
  values map one-to-one to lines exactly when it returns as many rows as there were payloads (checked; a payload
  smuggling two values breaks the count);
* tokens msgspec refuses but Arrow (RapidJSON) accepts: ``NaN``/``Inf…`` literals in value position (after
  ``:``, ``,`` or ``[``; the same bytes inside a string also send the payload to the slow path — only speed is lost);
  ``-0`` as an integer (msgspec gives 0.0, Arrow −0.0): any −0.0 in a decoded number sends the row slow;
* nesting: msgspec's decoder is recursive (a deep payload raises there), Arrow's is not — payloads with 256 or more
  brackets go to the slow path;
* UTF-8: Arrow does not validate strings — a chunk that is not ASCII is validated here, invalid payloads go slow;
* Arrow parse errors (duplicate keys, wrong types, …): the reported row goes slow and the rest is parsed again.
  An error without a row number (``{…}}`` gives "The document is empty") or a row count that does not match (a
  payload ``{…} {…}`` holding two values) first runs a bracket-depth scan over that range (:func:`_extra_values`:
  payloads whose top-level value closes before their last byte, or whose quotes do not pair, go slow; one read,
  no bisection, for the usual culprit) and bisects only what the scan does not explain. A ``user`` given as an
  integer switches that stretch of payloads to an int64 ``user`` column (rendered as decimal text, as
  ``str(int)`` does);
* values: ``user``/``ts`` null, out of range, ``loc`` not of length 2 or not finite, ``items`` with nulls, empty or
  too long names, too many items — the row goes slow.

Interning help: users and items come back dictionary-encoded (``pyarrow.compute.dictionary_encode``), so callers
look up each DISTINCT name of a batch once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

try:  # pyarrow is a dependency; without it parse_batch keeps to the exact msgspec path
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    AVAILABLE = True
    VERSION = pa.__version__
    ArrowError = pa.ArrowException
except ImportError:  # pragma: no cover - exercised only where pyarrow is missing
    AVAILABLE = False
    VERSION = None

    class ArrowError(Exception):  # type: ignore[no-redef]
        pass

MAX_BRACKETS = 256  # payloads with more '[' + '{' go to the exact path (msgspec decodes recursively)
CHUNK_ROWS = 1 << 16  # rows per Arrow call at most
# Arrow stops at a payload it cannot take and names its row: that payload goes to the exact path, the rows before
# it are read again, and reading resumes after it — about twice the clean work, plus ~0.1 ms per read (measured).
# Past these budgets per chunk (reads; rows read), the rest of the chunk goes to the exact path.
MIN_READS_PER_CHUNK = 16
ROWS_PER_READ = 256  # a chunk of n rows may use max(MIN_READS_PER_CHUNK, n // ROWS_PER_READ) reads
WORK_PER_ROW = 3  # … and read at most 3·n rows in all
_BISECT_FLOOR = 4  # a range this small whose error has no row number goes to the exact path whole

_NONFINITE_TOKENS = (b"NaN", b"Inf")  # RapidJSON also takes -NaN, Infinity, -Inf, -Infinity; JSON (and msgspec) none
_VALUE_START = frozenset(b":,[")
_BLANK = frozenset(b" \t-")
_ROW = re.compile(r" in row (\d+)")
_USER_FLIP = ("Column(/user) changed from string to number", "Column(/user) changed from number to string")
_LBRACE, _RBRACE = ord("{"), ord("}")


def _schema(user_type) -> "pa.Schema":
    return pa.schema([("user", user_type), ("ts", pa.float64()), ("items", pa.list_(pa.string())),
                      ("value", pa.float64()), ("loc", pa.list_(pa.float64()))])


if AVAILABLE:
    _PARSE = [pj.ParseOptions(explicit_schema=_schema(t), unexpected_field_behavior="ignore")
              for t in (pa.string(), pa.int64())]


@dataclass
class ArrowColumns:
    """The accepted payloads of a batch, column by column (rows refer to the payload list passed in)."""

    rows: np.ndarray  # int64 sorted indices of the accepted payloads
    slow: np.ndarray  # int64 sorted indices of payloads left to the exact path
    user_dict: list  # distinct users (str), first-appearance order
    user_codes: np.ndarray  # int64 per accepted row: index into user_dict
    ts: np.ndarray
    value: np.ndarray  # NaN where absent
    loc: np.ndarray  # (m, 2), NaN where absent
    item_offsets: np.ndarray  # int64 CSR offsets (m + 1)
    item_dict: list  # distinct items (str), first-appearance order
    item_codes: np.ndarray  # int64 per item occurrence: index into item_dict

    def users(self) -> list:
        return _materialize(self.user_dict, self.user_codes)

    def items(self) -> list:
        return _materialize(self.item_dict, self.item_codes)


def _materialize(dictionary: list, codes: np.ndarray) -> list:
    if codes.size == 0:
        return []
    arr = np.empty(len(dictionary), dtype=object)
    arr[:] = dictionary
    return arr[codes].tolist()


def _rows_of(positions: np.ndarray, starts: np.ndarray) -> np.ndarray:
    return np.searchsorted(starts, positions, side="right") - 1


def _screen(payloads: list, joined: bytes, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Payloads the Arrow path must not see (boolean mask): see the module docstring."""
    m = len(payloads)
    buf = np.frombuffer(joined, dtype=np.uint8)
    slow = lens < 2
    nz = ~slow
    slow[nz] |= (buf[starts[nz]] != _LBRACE) | (buf[starts[nz] + lens[nz] - 1] != _RBRACE)
    nl = buf == 10
    if np.count_nonzero(nl) != m - 1 or b"\r" in joined:
        pos = np.flatnonzero(nl | (buf == 13))
        r = _rows_of(pos, starts)
        inside = pos < starts[r] + lens[r]  # not the separator after payload r
        slow[r[inside]] = True
    for tok in _NONFINITE_TOKENS:
        if tok[:1] not in joined:  # one memchr before the (slower) substring search
            continue
        pos = joined.find(tok)
        while pos >= 0:
            j = pos - 1
            while j >= 0 and joined[j] in _BLANK:
                j -= 1
            if j >= 0 and joined[j] in _VALUE_START:
                slow[_rows_of(np.array([pos]), starts)[0]] = True
            pos = joined.find(tok, pos + 1)
    long_rows = np.flatnonzero(lens >= MAX_BRACKETS)
    for i in long_rows.tolist():
        p = payloads[i]
        if p.count(b"[") + p.count(b"{") >= MAX_BRACKETS:
            slow[i] = True
    if not joined.isascii():
        try:
            joined.decode("utf-8")
        except UnicodeDecodeError:
            non_ascii = np.unique(_rows_of(np.flatnonzero(buf >= 0x80), starts))
            for i in non_ascii.tolist():
                try:
                    bytes(payloads[i]).decode("utf-8")
                except UnicodeDecodeError:
                    slow[i] = True
    return slow


def _read(pbuf, lo_byte: int, hi_byte: int, schema_idx: int):
    size = hi_byte - lo_byte
    opts = pj.ReadOptions(use_threads=False, block_size=max(size + 1, 1 << 12))  # one block: row numbers global
    return pj.read_json(pa.BufferReader(pbuf.slice(lo_byte, size)), read_options=opts,
                        parse_options=_PARSE[schema_idx])


def _parse_ranges(pbuf, starts: np.ndarray, lens: np.ndarray, slow: np.ndarray, lo0: int, hi0: int) -> list:
    """Arrow-parse rows [lo0, hi0) of the joined buffer. Returns the accepted pieces (lo, table, schema index)
    in row order; rows given up on are marked in ``slow``."""
    pieces = []
    # (lo, hi, schema: 0 = user as string / 1 = as int64, row where it flipped, depth scan done on this range)
    stack = [(lo0, hi0, 0, -1, False)]
    reads_left = max(MIN_READS_PER_CHUNK, (hi0 - lo0) // ROWS_PER_READ)
    work_left = WORK_PER_ROW * (hi0 - lo0)
    buf = np.frombuffer(pbuf, dtype=np.uint8)  # a view (no copy), for the depth scan
    while stack:
        lo, hi, s, flipped_at, scanned = stack.pop()
        if lo >= hi:
            continue
        if reads_left <= 0 or work_left <= 0:
            slow[lo:hi] = True
            continue
        reads_left -= 1
        try:
            t = _read(pbuf, int(starts[lo]), int(starts[hi - 1] + lens[hi - 1]), s)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            msg = str(exc)
            m = _ROW.search(msg)
            k = int(m.group(1)) if m else -1
            if not 0 <= k < hi - lo:
                work_left -= hi - lo
                _unexplained(stack, slow, buf, starts, lens, lo, hi, s, scanned)
                continue
            work_left -= k + 1  # Arrow stops at the row it names
            stack.append((lo, lo + k, s, -1, scanned))  # the prefix parsed (re-checked by its row count)
            if _USER_FLIP[s] in msg and flipped_at != lo + k:
                stack.append((lo + k, hi, 1 - s, lo + k, scanned))  # `user` changes type here: the other schema
            else:
                slow[lo + k] = True
                stack.append((lo + k + 1, hi, s, -1, scanned))
            continue
        work_left -= hi - lo
        if t.num_rows != hi - lo:  # some payload smuggled a second value: find it
            _unexplained(stack, slow, buf, starts, lens, lo, hi, s, scanned)
            continue
        pieces.append((lo, t, s))
    pieces.sort(key=lambda x: x[0])
    return pieces


def _bisect(stack: list, slow: np.ndarray, lo: int, hi: int, s: int) -> None:
    if hi - lo <= _BISECT_FLOOR:
        slow[lo:hi] = True
    else:
        mid = (lo + hi) // 2
        stack += [(mid, hi, s, -1, True), (lo, mid, s, -1, True)]


def _unexplained(stack: list, slow: np.ndarray, buf: np.ndarray, starts: np.ndarray, lens: np.ndarray,
                 lo: int, hi: int, s: int, scanned: bool) -> None:
    """Rows [lo, hi) failed without a row number (or gave one row too many). Not yet scanned: mark the rows
    :func:`_extra_values` flags slow and read the stretches between them again (scanned). Scanned already, or
    nothing flagged: bisect."""
    bad = np.zeros(0, dtype=np.int64) if scanned else _extra_values(buf, starts[lo:hi], lens[lo:hi])
    if not bad.size:
        _bisect(stack, slow, lo, hi, s)
        return
    rows = bad + lo
    slow[rows] = True
    edges = np.concatenate([[lo], rows + 1]).tolist(), np.concatenate([rows, [hi]]).tolist()
    for a, b in reversed(list(zip(*edges))):
        stack.append((a, b, s, -1, True))


_OPEN = np.zeros(256, dtype=np.int8)
_OPEN[[ord("{"), ord("[")]] = 1
_OPEN[[ord("}"), ord("]")]] = -1


def _extra_values(buf: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Indices (into ``starts``) of the payloads whose first top-level JSON value may not be the whole payload:
    outside strings, the bracket depth returns to 0 before the last bracket or does not end at 0, or the unescaped
    quotes do not pair. A flagged payload only goes to the exact path; a payload not flagged is still checked by
    Arrow's row count. Vectorised over the bytes of the range (payloads start with ``{`` and end with ``}``: the
    layout screen)."""
    base = int(starts[0])
    seg = buf[base:int(starts[-1] + lens[-1])]
    row_lo = starts - base
    q = np.flatnonzero(seg == 34)  # '"'
    bs = seg == 92  # '\\'
    if q.size and bs.any():  # a quote preceded by an odd run of backslashes is escaped
        nb = np.flatnonzero(~bs)
        prev = nb[np.searchsorted(nb, q) - 1]  # the last non-backslash before the quote (a '{' at least)
        q = q[((q - 1 - prev) & 1) == 0]
    kind = _OPEN[seg]
    br = np.flatnonzero(kind)
    if not br.size:  # cannot happen after the layout screen; flag all rather than index an empty array
        return np.arange(starts.size)
    q_first = np.searchsorted(q, row_lo)  # index of each row's first quote
    q_end = np.searchsorted(q, row_lo + lens)
    flagged = ((q_end - q_first) & 1) == 1  # a string that does not close
    br_row = np.searchsorted(row_lo, br, side="right") - 1
    in_str = ((np.searchsorted(q, br) - q_first[br_row]) & 1) == 1
    br, br_row = br[~in_str], br_row[~in_str]
    depth = np.cumsum(kind[br], dtype=np.int64)
    first = np.searchsorted(br_row, np.arange(starts.size))  # each row's first bracket (one at least: its '{')
    last = np.searchsorted(br_row, np.arange(starts.size), side="right") - 1
    has = last >= first
    before = np.where(first > 0, depth[np.maximum(first - 1, 0)], 0)
    rel = depth - before[br_row]  # depth after each bracket, relative to its row's start
    flagged |= ~has
    flagged[has] |= rel[last[has]] != 0
    inner = np.ones(br.size, dtype=bool)
    inner[last[has]] = False  # the last bracket of a row may (must) bring the depth to 0
    flagged[np.unique(br_row[inner & (rel <= 0)])] = True
    return np.flatnonzero(flagged)


def _column(pieces: list, name: str):
    arrs = []
    for _, t, s in pieces:
        col = t.column(name)
        col = col.chunk(0) if col.num_chunks == 1 else pa.concat_arrays(col.chunks)
        if name == "user" and s == 1:
            col = pc.cast(col, pa.string())
        arrs.append(col)
    return arrs[0] if len(arrs) == 1 else pa.concat_arrays(arrs)


def _layout(payloads: list, lens: np.ndarray | None = None) -> tuple[bytes, np.ndarray, np.ndarray]:
    n = len(payloads)
    if lens is None:
        lens = np.fromiter(map(len, payloads), dtype=np.int64, count=n)
    starts = np.zeros(n, dtype=np.int64)
    if n > 1:
        np.cumsum(lens[:-1] + 1, out=starts[1:])
    return b"\n".join(payloads), starts, lens


def _np(arr, fill) -> np.ndarray:
    if arr.null_count:
        arr = pc.fill_null(arr, fill)
    return arr.to_numpy(zero_copy_only=False)


def _neg_zero(x: np.ndarray) -> np.ndarray:
    return (x == 0) & np.signbit(x)


def decode(payloads: list, *, max_user_len: int, max_items: int, max_item_len: int, min_ts: float,
           max_ts: float, lens: np.ndarray | None = None) -> ArrowColumns:
    """Decode ``payloads`` (bytes, each within the size limit; ``lens`` their lengths if known) column-wise; see
    the module docstring."""
    joined, starts, lens = _layout(payloads, lens)
    slow0 = _screen(payloads, joined, starts, lens)
    if slow0.all():
        return _empty(np.arange(len(payloads), dtype=np.int64))
    ok = None
    if slow0.any():  # compact: Arrow sees only the payloads that passed the screen
        ok = np.flatnonzero(~slow0)
        joined, starts, lens = _layout([payloads[i] for i in ok.tolist()])
    n = lens.size
    slow = np.zeros(n, dtype=bool)
    pbuf = pa.py_buffer(joined)
    pieces = []
    for lo in range(0, n, CHUNK_ROWS):
        pieces += _parse_ranges(pbuf, starts, lens, slow, lo, min(n, lo + CHUNK_ROWS))
    if not pieces:
        return _empty(_merge_slow(slow0, ok, slow))
    rows = np.concatenate([np.arange(lo, lo + t.num_rows, dtype=np.int64) for lo, t, _ in pieces])
    user, ts_a, items, value_a, loc = (_column(pieces, k) for k in ("user", "ts", "items", "value", "loc"))
    m = rows.size
    # ---- vectorised value checks (a failing row goes to the exact path, which names the reason)
    ts = _np(ts_a, np.nan)
    bad = ~(np.isfinite(ts) & (ts >= min_ts) & (ts < max_ts)) | _neg_zero(ts)  # null ts → NaN
    bad |= _bad_length(user, max_user_len)  # null, empty or too long
    value = _np(value_a, np.nan)
    value_bad = _neg_zero(value)
    if value_a.null_count:
        value_bad |= np.isnan(value) & ~value_a.is_null().to_numpy(zero_copy_only=False)
    else:
        value_bad |= np.isnan(value)
    bad |= value_bad | np.isinf(value)
    loc_n = _list_lengths(loc)
    has_loc = ~loc.is_null().to_numpy(zero_copy_only=False) if loc.null_count else np.ones(m, dtype=bool)
    bad |= has_loc & (loc_n != 2)
    lv = _np(loc.flatten(), np.nan)
    if lv.size:
        bad_v = ~np.isfinite(lv) | _neg_zero(lv)
        if bad_v.any():
            bad[pc.list_parent_indices(loc).to_numpy(zero_copy_only=False)[bad_v]] = True
    n_items = _list_lengths(items)
    bad |= n_items > max_items
    flat = items.flatten()
    if len(flat):
        bad_i = _bad_length(flat, max_item_len)
        if bad_i.any():
            bad[np.repeat(np.arange(m), n_items)[bad_i]] = True
    # ---- columns of the accepted rows
    loc_out = np.full((m, 2), np.nan)
    two = has_loc & (loc_n == 2)
    if two.any():
        loc_out[two] = lv[np.repeat(two, np.where(has_loc, loc_n, 0))].reshape(-1, 2)
    if bad.any():
        slow[rows[bad]] = True
        keep = ~bad
        rows = rows[keep]
        user = user.filter(pa.array(keep))
        flat = flat.filter(pa.array(np.repeat(keep, n_items)))
        n_items, ts, value, loc_out = n_items[keep], ts[keep], value[keep], loc_out[keep]
    item_offsets = np.zeros(rows.size + 1, dtype=np.int64)
    np.cumsum(n_items, out=item_offsets[1:])
    ud = pc.dictionary_encode(user)
    idc = pc.dictionary_encode(flat) if len(flat) else None
    return ArrowColumns(
        rows=rows if ok is None else ok[rows], slow=_merge_slow(slow0, ok, slow),
        user_dict=ud.dictionary.to_pylist(), user_codes=ud.indices.to_numpy(zero_copy_only=False).astype(np.int64),
        ts=ts, value=value, loc=loc_out, item_offsets=item_offsets,
        item_dict=idc.dictionary.to_pylist() if idc is not None else [],
        item_codes=(idc.indices.to_numpy(zero_copy_only=False).astype(np.int64) if idc is not None
                    else np.zeros(0, dtype=np.int64)))


def _spans(arr) -> np.ndarray:
    """Per slot of a string or list array: the span of its offsets (bytes, or list entries)."""
    off = np.frombuffer(arr.buffers()[1], dtype=np.int32, count=len(arr) + 1, offset=4 * arr.offset)
    return np.diff(off).astype(np.int64)


def _list_lengths(arr) -> np.ndarray:
    """Per row: list length (0 for null)."""
    n = _spans(arr)
    if arr.null_count and n[arr.is_null().to_numpy(zero_copy_only=False)].any():  # null slots with a span
        n = _np(pc.list_value_length(arr), 0).astype(np.int64)
    return n


def _bad_length(arr, max_chars: int) -> np.ndarray:
    """Strings that are null or empty or longer than ``max_chars`` characters (counted in UTF-8 code points, as
    Python's ``len``; the byte length bounds it from above, so code points are counted only past it)."""
    nbytes = _spans(arr)
    bad = (nbytes < 1) | (nbytes > max_chars)
    if arr.null_count:
        bad |= arr.is_null().to_numpy(zero_copy_only=False)
    long = nbytes > max_chars
    if long.any():
        nchars = _np(pc.utf8_length(arr), 0)
        bad[long] = nchars[long] > max_chars
        if arr.null_count:
            bad |= arr.is_null().to_numpy(zero_copy_only=False)
    return bad


def _merge_slow(slow0: np.ndarray, ok: np.ndarray | None, slow: np.ndarray) -> np.ndarray:
    if ok is None:
        return np.flatnonzero(slow)
    out = slow0.copy()
    out[ok[slow]] = True
    return np.flatnonzero(out)


def _empty(slow: np.ndarray) -> ArrowColumns:
    z = np.zeros(0, dtype=np.int64)
    return ArrowColumns(rows=z, slow=slow, user_dict=[], user_codes=z, ts=np.zeros(0), value=np.zeros(0),
                        loc=np.zeros((0, 2)), item_offsets=np.zeros(1, dtype=np.int64), item_dict=[], item_codes=z)

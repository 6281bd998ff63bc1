"""Small numpy helpers for the hot path.

``np.unique`` without return flags dispatches (numpy ≥ 2.3) to a hash-based kernel that was measured here 20–50×
slower than sorting for int64 keys (40k keys: 10 ms vs 0.2 ms); :func:`unique_sorted` is the sort-based version,
with identical output (sorted distinct values).
"""

from __future__ import annotations

import numpy as np


def unique_sorted(a) -> np.ndarray:
    """Sorted distinct values of a 1-D array (same result as ``np.unique(a)``)."""
    b = np.sort(np.asarray(a).ravel())
    if b.size < 2:
        return b
    keep = np.empty(b.size, dtype=bool)
    keep[0] = True
    np.not_equal(b[1:], b[:-1], out=keep[1:])
    return b[keep]


def rows_all(m: np.ndarray) -> np.ndarray:
    """``m.all(axis=1)`` for a 2-D bool array with few columns: a reduction along a short axis costs ~20 ns per
    row in numpy; one ``&`` per column is measured ~6× faster at (17k, 5)."""
    out = m[:, 0].copy()
    for j in range(1, m.shape[1]):
        out &= m[:, j]
    return out


def rows_any_nonzero(a: np.ndarray) -> np.ndarray:
    """``a.any(axis=1)`` for a 2-D numeric array with few columns (see :func:`rows_all`)."""
    out = a[:, 0] != 0
    for j in range(1, a.shape[1]):
        out |= a[:, j] != 0
    return out


def take_rows(a: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``a[idx]`` for a 2-D array and integer indices: ``np.take`` along axis 0 (measured ~4× faster than fancy
    indexing for (17k of 131k, 5) int64 rows)."""
    return np.take(a, idx, axis=0)


def put_rows(a: np.ndarray, idx: np.ndarray, rows: np.ndarray) -> None:
    """``a[idx] = rows`` for a C-contiguous 2-D array and integer indices, as one scatter of whole rows (each row
    viewed as one opaque element; measured ~2.4× faster than fancy indexing at (17k, 5) int64)."""
    if not (a.ndim == 2 and a.flags.c_contiguous and a.shape[1]):
        a[idx] = rows
        return
    row = np.dtype((np.void, a.shape[1] * a.itemsize))
    src = np.ascontiguousarray(np.broadcast_to(np.asarray(rows, dtype=a.dtype), (len(idx), a.shape[1])))
    a.view(row).reshape(-1)[idx] = src.view(row).reshape(-1)

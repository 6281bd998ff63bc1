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

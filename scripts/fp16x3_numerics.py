#!/usr/bin/env python3
"""A NumPy model of the FP16X3 register-state scan's numerics (src/cuda/chunk_scan_mma.cuh with
ScanMode::kFp16x3, docs/perf-notes.md v101-v102), against an FP64 recurrence, on the input
regime of tests/cuda/test_cuda_features.cpp's "head-major, every flag, K 128 V 64" shape: q and
k L2-normalised (scale 0.3, k drawn at 3x), gates from raw inputs (every 17th a > 20, which wipes
the state), β from logits, the output norm (gated RMSNorm), f32 inputs.

What the model rounds, chunk by chunk (C = 32, the WY form the kernels use):
  - every tensor-core operand to FP16 terms with FP16's subnormals (numpy float16): a value and
    two remainders for T diag(β), P, D and v, a value and one remainder for q, k, W, the state
    S and U (as BF16X3 splits them, docs/cuda.md), or none (`--terms 0`);
  - P without q's factor, each output times qf last (the second form, 80fdc32);
  - `--fp32`: every product summed in FP32 (numpy float32 matmul) and the state kept in FP32;
    without it, sums in FP64 (the operands' rounding alone);
  - `--sigma S`: the value side (v, S_0) times S and the results divided by it (perf-notes v102).
It prints, per seed and value head, the output's max|diff| / max|ref| against FP64 after the
output norm and, in brackets, before it.

Run 283's GPU result on that shape was 1.08e-5 after the norm; this model gives <= 2e-6 with
FP32 sums and <= 1e-6 without (perf-notes v102): the model lacks what makes the difference.
Runs 284-285 found it on the GPU (perf-notes v103): the FP16 floor after all, on the test's own
inputs (its generator, tests/support.hpp, is not this model's, whose operands sit higher); the
scan's power-of-two scales (0.6.2) removed it. This model does not have those scales.
Needs python3-numpy (Debian).
"""
import argparse

import numpy as np


def split16(x, terms):
    """x as the sum of an FP16 value and `terms - 1` FP16 remainders (terms 0: x itself)."""
    x = np.asarray(x, dtype=np.float64)
    if terms == 0:
        return x
    out = np.zeros_like(x)
    r = x
    with np.errstate(over="ignore"):
        for _ in range(terms):
            t = r.astype(np.float32).astype(np.float16).astype(np.float64)
            out += t
            r = r - t
    return out


def softplus(x):
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))


def inputs(T, K, V, seed, h):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((T, K))
    k = rng.standard_normal((T, K)) * 3
    v = rng.standard_normal((T, V))
    z = rng.standard_normal((T, V))
    a = np.array([20.5 + rng.uniform() if (t + h) % 17 == 5 else 2 * rng.standard_normal() for t in range(T)])
    g = -np.exp(rng.uniform(-2, 1)) * softplus(a + rng.uniform(-1, 1))
    beta = 1 / (1 + np.exp(-2 * rng.standard_normal(T)))
    w = rng.uniform(0.5, 1.5, V)
    S0 = 0.5 * rng.standard_normal((K, V))
    return q, k, v, z, g, beta, w, S0


def recurrence(q, k, v, g, beta, S0, scale):
    qf = scale / np.linalg.norm(q, axis=1)
    kf = 1 / np.linalg.norm(k, axis=1)
    S = S0.copy()
    O = np.zeros((len(q), v.shape[1]))
    for t in range(len(q)):
        kh = k[t] * kf[t]
        S *= np.exp(g[t])
        S += np.outer(kh, beta[t] * (v[t] - S.T @ kh))
        O[t] = S.T @ (q[t] * qf[t])
    return O, S


def chunked(q, k, v, g, beta, S0, scale, terms, fp32, sigma, C=32):
    three = lambda x: split16(x, 3 if terms else 0)
    two = lambda x: split16(x, 2 if terms else 0)
    acc = np.float32 if fp32 else np.float64
    mm = lambda a, b: (np.asarray(a, acc) @ np.asarray(b, acc)).astype(np.float64)
    rnd = lambda x: np.asarray(x, acc).astype(np.float64)
    qf = scale / np.linalg.norm(q, axis=1)
    kf = 1 / np.linalg.norm(k, axis=1)
    S = S0 * sigma
    O = np.zeros((len(q), v.shape[1]))
    for c0 in range(0, len(q), C):
        sl = slice(c0, min(c0 + C, len(q)))
        L = sl.stop - sl.start
        qq, kk = two(q[sl]), two(k[sl])
        gam = np.cumsum(g[sl])
        dec = np.exp(gam[:, None] - gam[None, :])
        KK = mm(kk, kk.T) * kf[sl][:, None] * kf[sl][None, :]
        QK = mm(qq, kk.T) * kf[sl][None, :]
        A = np.tril(beta[sl][:, None] * dec * KK, -1)
        Tb = three(rnd(np.linalg.inv(np.eye(L) + A)) * beta[sl][None, :])
        P = three(np.tril(dec * QK))
        W = two(mm(Tb, np.exp(gam)[:, None] * k[sl] * kf[sl][:, None]))
        Sq = two(S)
        U = two(rnd(mm(Tb, three(v[sl] * sigma)) - mm(W, Sq)))
        o = rnd(np.exp(gam)[:, None] * mm(qq, Sq)) + mm(P, U)
        O[sl] = rnd(o * qf[sl][:, None]) / sigma
        D = three(np.exp(gam[-1] - gam)[:, None] * kf[sl][:, None] * kk)
        S = rnd(np.exp(gam[-1]) * S + mm(D.T, U))
    return O, S / sigma


def norm(O, z, w, eps=1e-5):
    r = np.sqrt((O**2).mean(axis=1) + eps)
    return O / r[:, None] * w[None, :] * (z / (1 + np.exp(-z)))


def rel(a, b):
    return np.abs(a - b).max() / np.abs(b).max()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--T", type=int, default=161)
    ap.add_argument("--K", type=int, default=128)
    ap.add_argument("--V", type=int, default=64)
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--heads", type=int, default=3)
    ap.add_argument("--scale", type=float, default=0.3)
    ap.add_argument("--terms", type=int, default=1, help="1: FP16 terms as the kernel splits them; 0: none")
    ap.add_argument("--fp32", type=int, default=1, help="1: products summed in FP32")
    ap.add_argument("--sigma", type=float, default=1.0)
    a = ap.parse_args()
    worst = 0.0
    for seed in range(a.seeds):
        row = []
        for h in range(a.heads):
            q, k, v, z, g, beta, w, S0 = inputs(a.T, a.K, a.V, 100 * seed + h, h)
            Oe, _ = recurrence(q, k, v, g, beta, S0, a.scale)
            O, _ = chunked(q, k, v, g, beta, S0, a.scale, a.terms, a.fp32, a.sigma)
            e = rel(norm(O, z, w), norm(Oe, z, w))
            worst = max(worst, e)
            row.append(f"{e:.2e} ({rel(O, Oe):.1e})")
        print(f"seed {seed}: " + "  ".join(row), flush=True)
    print(f"worst after the output norm: {worst:.2e}")


if __name__ == "__main__":
    main()

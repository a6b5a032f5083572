#!/usr/bin/env python3
"""A NumPy model of one idea for the fused kernel's prep (docs/perf-notes.md v115, not built): T's
16 x 16 diagonal blocks (I + A)^-1, A strictly lower triangular (so A^16 = 0), formed as the product
(I - A)(I + A^2)(I + A^4)(I + A^8) -- three squarings and three products on tensor cores -- instead
of the forward substitution in FP32 (15 dependent row steps) the kernel runs now.

A_ti = beta_t (k_t . k_i) e^{g_t - g_i} for t > i, with keys L2-normalised (the norm call),
L2-normalised and correlated (a shared direction plus noise: cosines ~0.6-0.9, as a model's keys
often are), or of spread lengths. Each product's operands are rounded to 10 explicit mantissa bits
(TF32, and FP16 within its range), to 7 (BF16), or split into a value and a remainder of 10 bits
each with three products (3xTF32); sums in FP32 (modelled as one rounding per product). Prints, per
regime, the median and max over 300 blocks of max|T - T_exact| / max|T_exact|, beside what rounding
the exact T to BF16 and to FP16 costs (the kernel stores T diag(beta) as one 16-bit term).
Needs NumPy; not part of the tests.

    scripts/tdiag_numerics.py
"""
import numpy as np
rng = np.random.default_rng(1)
def rnd(x, bits):  # round to a float with `bits` explicit mantissa bits (nearest even), FP32 range
    x = np.asarray(x, dtype=np.float64)
    m, e = np.frexp(x)
    s = 2.0 ** (bits + 1)
    return np.ldexp(np.round(m * s) / s, e)
def f32(x): return np.asarray(x, dtype=np.float32).astype(np.float64)
def mm(a, b, bits):  # operands rounded, products exact, FP32 accumulation (modelled as one rounding at the end)
    return f32(rnd(a, bits) @ rnd(b, bits))
def mm3(a, b, bits):  # split operands (value + remainder), three products, FP32 accumulation
    ah = rnd(a, bits); al = rnd(f32(a) - ah, bits); bh = rnd(b, bits); bl = rnd(f32(b) - bh, bits)
    return f32(ah @ bh + ah @ bl + al @ bh)
def fwd32(A):
    n = A.shape[0]; T = np.zeros_like(A); A = f32(A)
    for t in range(n):
        row = np.zeros(n); row[t] = 1.0
        for i in range(t):
            row = f32(row - A[t, i] * T[i])
        T[t] = row
    return T
def prod(A, bits, dot=mm):
    """(I - A)(I + A^2)(I + A^4)(I + A^8), each product by dot (mm: single operands; mm3: split)."""
    I = np.eye(A.shape[0])
    A2 = dot(A, A, bits); A4 = dot(A2, A2, bits); A8 = dot(A4, A4, bits)
    P = f32(I - A)
    P = f32(P + dot(P, A2, bits)); P = f32(P + dot(P, A4, bits)); P = f32(P + dot(P, A8, bits))
    return P
def block(norm, gscale, spread):
    K = 128; n = 16
    k = rng.standard_normal((n, K))
    if norm == 2:  # correlated keys: a shared direction plus noise, cosines ~0.6-0.9
        c = rng.standard_normal(K); k = c[None, :] * rng.uniform(1.0, 2.5) + k
    if norm: k /= np.linalg.norm(k, axis=1, keepdims=True)
    else: k *= (10.0 ** rng.uniform(-spread, spread, size=(n, 1))) / np.sqrt(K)
    beta = rng.uniform(0, 1, n)
    g = np.cumsum(-gscale * rng.uniform(0.03, 1.0, n))
    A = np.tril(beta[:, None] * (k @ k.T) * np.exp(g[:, None] - g[None, :]), -1)
    return A
for name, norm, gs, sp in [("norm, g~-0.3", True, 0.3, 0), ("norm, g~-0.01", True, 0.01, 0),
                           ("keys 10^+-0.5, g~-0.3", False, 0.3, 0.5), ("norm, correlated, g~-0.01", 2, 0.01, 0),
                           ("norm, correlated, g~-0.3", 2, 0.3, 0)]:
    res = {"fwd32": [], "tf32/fp16 (10 bits)": [], "bf16 (7 bits)": [], "3xTF32 split": [], "round T to bf16": [], "round T to fp16": []}
    for _ in range(300):
        A = block(norm, gs, sp)
        if not np.all(np.isfinite(A)): continue
        ex = np.linalg.inv(np.eye(16) + A)
        sc = np.abs(ex).max()
        res["fwd32"].append(np.abs(fwd32(A) - ex).max() / sc)
        res["tf32/fp16 (10 bits)"].append(np.abs(prod(A, 10) - ex).max() / sc)
        res["bf16 (7 bits)"].append(np.abs(prod(A, 7) - ex).max() / sc)
        res["3xTF32 split"].append(np.abs(prod(A, 10, mm3) - ex).max() / sc)
        res["round T to bf16"].append(np.abs(rnd(ex, 7) - ex).max() / sc)
        res["round T to fp16"].append(np.abs(rnd(ex, 10) - ex).max() / sc)
    print(name)
    for k2, v in res.items():
        v = np.array(v); print("   %-22s median %.2e  max %.2e" % (k2, np.median(v), v.max()))

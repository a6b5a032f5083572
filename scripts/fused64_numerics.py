#!/usr/bin/env python3
"""A NumPy model of the fused C = 64 probe's numerics (bench/fused64_probe.cu, `--two` and
later forms, BF16 operands), against an FP64 recurrence, for input regimes the probe does not
run: keys that are alike (T = (I + A)^-1 far from I), no decay, strong decay, long sequences.

The model rounds what the kernel rounds, to BF16 (round to nearest even), and keeps the rest
in FP32 (products summed in FP64 and rounded once: the wgmma's FP32 sums add ~1e-7, far below
BF16's 2^-9):
  - q, k, v: BF16 inputs (exact); g, β, the state S: FP32;
  - A, T = (I + A)^-1 and the factors in FP32; T diag(β) and P one BF16 term each
    (`--tb 2 --p 2` gives them a remainder, as the library's two-kernel BF16 path has);
  - Sᵀ as one BF16 term in [Sᵀk | Sᵀq];
  - W = v − e^γ ⊙ Sᵀk as value and remainder, D = T diag(β) W, then D as value and
    remainder in O = e^γ scale Sᵀq + P D, and D2 = e^{γ_last − γ} ⊙ D as one term in the
    state update S = e^{γ_last} S + Σ k D2ᵀ.
Prints max|diff| / max|ref| of the outputs and the final state per regime (the probe's
metric). Needs NumPy; not part of the tests (docs/perf-notes.md v45 has the results).

    scripts/fused64_numerics.py [--T 1000] [--heads 4] [--regime NAME|all] [--spread 0.35]
                                [--seed N] [--tb N] [--p N] [--s N] [--w N] [--d N] [--d2 N]
(the last six: BF16 terms of T diag(β), P, Sᵀ, W = v − e^γ ⊙ Sᵀk, D in P D, D2; the probe's
forms by default: 1, 1, 1, 2, 2, 1)
"""
import argparse

import numpy as np

K = V = 128
C = 64


def bf16(x):
    """Round to the nearest BF16 (ties to even), returned as float32."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(np.float32)


def split(x, terms):
    """x as `terms` BF16 terms, each rounding what the ones before left (their sum, in FP32)."""
    r = np.asarray(x, dtype=np.float32)
    acc = np.zeros_like(r)
    for _ in range(terms):
        h = bf16(r)
        acc, r = acc + h, (r - h).astype(np.float32)
    return acc


def f32(x):
    return np.asarray(x, dtype=np.float64).astype(np.float32)


def reference(q, k, v, g, b, s0, scale):
    """The FP64 recurrence, token by token: S [K][V]."""
    S = s0.astype(np.float64).copy()
    out = np.empty((len(q), V))
    for t in range(len(q)):
        e = np.exp(float(g[t]))
        kt, qt, vt = k[t].astype(np.float64), q[t].astype(np.float64), v[t].astype(np.float64)
        d = float(b[t]) * (vt - e * (S.T @ kt))
        S = e * S + np.outer(kt, d)
        out[t] = S.T @ (scale * qt)
    return out, S


# BF16 terms of each operand that the kernel rounds: the probe's forms.
PROBE_TERMS = dict(tb=1, p=1, s=1, w=2, d=2, d2=1)
OPERANDS = dict(tb="T diag(β)", p="P", s="Sᵀ in [Sᵀk | Sᵀq]", w="W = v − e^γ ⊙ Sᵀk", d="D in P D",
                d2="D2 in the state update")


def fused(q, k, v, g, b, s0, scale, terms):
    """terms: BF16 terms of T diag(β), P, Sᵀ, W, D (in P D) and D2 (PROBE_TERMS' keys)."""
    """The fused C = 64 chunk step as the probe computes it."""
    S = s0.astype(np.float32).copy()
    n = len(q)
    out = np.empty((n, V), dtype=np.float32)
    for c0 in range(0, n, C):
        L = min(C, n - c0)
        qc, kc, vc = q[c0:c0 + L], k[c0:c0 + L], v[c0:c0 + L]
        gam = np.cumsum(g[c0:c0 + L].astype(np.float32), dtype=np.float32)
        bc = b[c0:c0 + L].astype(np.float32)
        # The prep (FP32): A, T, then T diag(β) and P in BF16.
        kk = f32(kc.astype(np.float64) @ kc.T.astype(np.float64))
        qk = f32(qc.astype(np.float64) @ kc.T.astype(np.float64))
        dg = gam[:, None] - gam[None, :]
        low = np.tril(np.ones((L, L), dtype=bool), -1)
        ed = np.exp(np.where(low | np.eye(L, dtype=bool), dg, -np.inf)).astype(np.float32)
        A = np.where(low, bc[:, None] * ed * kk, 0.0).astype(np.float32)
        T = f32(np.linalg.inv(np.eye(L) + A.astype(np.float64)))
        TB = split(T * bc[None, :], terms["tb"])
        P = split(np.where(low | np.eye(L, dtype=bool), scale * ed * qk, 0.0), terms["p"])
        eg = np.exp(gam).astype(np.float32)
        gl = gam[L - 1]
        # The chain: [Sᵀk | Sᵀq] from Sᵀ in BF16.
        Sb = split(S, terms["s"]).astype(np.float64)
        SK = f32(kc.astype(np.float64) @ Sb)  # [L][V]: (Sᵀ k_t)ᵀ
        SQ = f32(qc.astype(np.float64) @ Sb)
        W = split(vc - eg[:, None] * SK, terms["w"])
        D = f32(TB.astype(np.float64) @ W.astype(np.float64))
        Dv = split(D, terms["d"])
        out[c0:c0 + L] = f32((eg * scale)[:, None].astype(np.float64) * SQ + P.astype(np.float64) @ Dv)
        D2 = split(np.exp(gl - gam)[:, None].astype(np.float32) * D, terms["d2"])
        S = f32(np.exp(gl) * S.astype(np.float64) + kc.T.astype(np.float64) @ D2.astype(np.float64))
    return out, S


def inputs(rng, T, regime, spread=0.35):
    """Per-regime inputs for one (key head, value head): q, k, v BF16; g, β FP32; S0."""
    q = bf16(rng.standard_normal((T, K)))
    k = rng.standard_normal((T, K))
    if regime == "alike-keys":
        # Keys a step `spread` from one direction (0.35: k_t·k_i ~ 0.9, 1: ~0.5), so that
        # T = (I + A)^-1 is far from I.
        base = rng.standard_normal(K)
        k = base[None, :] + spread * rng.standard_normal((T, K))
    k = bf16(k / np.linalg.norm(k, axis=1, keepdims=True))
    v = bf16(rng.standard_normal((T, V)))
    g = (-0.3 + 0.29 * rng.random(T)).astype(np.float32)  # the probe's gates
    b = rng.random(T).astype(np.float32)
    if regime == "no-decay":
        g = np.zeros(T, dtype=np.float32)
    elif regime == "weak-decay-beta1":
        g = (-1e-3 * rng.random(T)).astype(np.float32)
        b = np.ones(T, dtype=np.float32)
    elif regime == "strong-decay":
        g = (-5.0 + 4.0 * rng.random(T)).astype(np.float32)
    elif regime == "alike-keys":
        g = (-1e-2 * rng.random(T)).astype(np.float32)
        b = (0.8 + 0.2 * rng.random(T)).astype(np.float32)
    s0 = (0.5 * rng.standard_normal((K, V))).astype(np.float32)
    return q, k, v, g, b, s0


REGIMES = ["probe", "no-decay", "weak-decay-beta1", "strong-decay", "alike-keys"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--T", type=int, default=1000)
    ap.add_argument("--heads", type=int, default=4, help="independent heads (the max over them)")
    for name, n in PROBE_TERMS.items():
        ap.add_argument(f"--{name}", type=int, default=n, choices=[1, 2, 3],
                        help=f"BF16 terms of {OPERANDS[name]} (the probe: {n})")
    ap.add_argument("--regime", default="all", choices=REGIMES + ["all"])
    ap.add_argument("--spread", type=float, default=0.35, help="alike-keys: the keys' step from one direction")
    ap.add_argument("--seed", type=int, default=12345)
    a = ap.parse_args()
    scale = 1.0 / np.sqrt(K)
    for regime in REGIMES if a.regime == "all" else [a.regime]:
        rng = np.random.default_rng(a.seed)
        eo = es = 0.0
        for _ in range(a.heads):
            q, k, v, g, b, s0 = inputs(rng, a.T, regime, a.spread)
            ro, rs = reference(q, k, v, g, b, s0, scale)
            fo, fs = fused(q, k, v, g, b, s0, scale, {name: getattr(a, name) for name in PROBE_TERMS})
            if not (np.isfinite(fo).all() and np.isfinite(fs).all()):
                eo = es = float("inf")
                break
            eo = max(eo, np.abs(fo - ro).max() / np.abs(ro).max())
            es = max(es, np.abs(fs - rs).max() / np.abs(rs).max())
        terms = " ".join(f"{name} {getattr(a, name)}" for name in PROBE_TERMS)
        print(f"{regime:18s} T {a.T:6d} heads {a.heads} ({terms}):  out {eo:.3e}  state {es:.3e}")


if __name__ == "__main__":
    main()

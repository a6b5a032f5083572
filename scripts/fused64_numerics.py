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
`--scheme fla` models flash-linear-attention 0.5.2's bf16 chunk_gated_delta_rule forward instead
(its Triton path, chunk 64: chunk_gated_delta_rule_fwd_kkt_solve_kernel, recompute_w_u_fwd,
chunk_gated_delta_rule_fwd_h, chunk_fwd_o; on SM90 it dispatches to FlashQLA instead when the
flash_qla package is installed), at the same inputs:
  - gates as fla keeps them: γ = (Σ g in the chunk) · 1/ln 2 in FP32, exponentials as exp2;
  - A = β_i (k_i·k_j) e^{γ_i − γ_j} (j < i) and T = (I + A)^-1 in FP32, T stored in BF16
    (`--tf32 1`: the block merge of T's 16 x 16 blocks with TF32 operands, as on SM80+);
  - w = T bf16(β e^γ ⊙ k) and u = T bf16(β ⊙ v), each stored in BF16;
  - per chunk the FP32 state h is stored in BF16 and used so in v_new = u − w h16 (stored in
    BF16 for the output) and in O = scale (e^γ ⊙ q h16 + bf16(causal(q kᵀ ⊙ e^{γ_i − γ_j})) v_new);
  - h = e^{γ_last} h + kᵀ bf16(e^{γ_last − γ} ⊙ v_new), v_new there the FP32 value.
It prints the output error before fla's final BF16 rounding of O and, in brackets, after it.
`--exact 1` turns the model's BF16 (and TF32) rounding off, either scheme: a check that the chunk
algebra matches the recurrence (~1e-6 in FP32; 3e-6 under strong decay, whose FP32 gate sums
reach ~−300).
Prints max|diff| / max|ref| of the outputs and the final state per regime (the probe's
metric). Needs NumPy; not part of the tests (docs/perf-notes.md v45 has the results).

    scripts/fused64_numerics.py [--scheme fused|fla|scan32] [--T 1000] [--heads 4] [--regime NAME|all]
                                [--spread 0.35] [--seed N] [--exact 0|1] [--tf32 0|1]
                                [--tb N] [--p N] [--s N] [--w N] [--d N] [--d2 N]
                                [--solve exact|tf32|f16merge|bf16merge|fp16dbl|bf16dbl|tf32prod|tf32prod3]
                                [--fmt bf16|fp16|fp16u] [--pairs all|tri] [--inputs bf16|f32]
                                [--scan-terms tb,v,w,s,p,d,d2,kq]
(--tb to --d2, fused only: BF16 terms of T diag(β), P, Sᵀ, W = v − e^γ ⊙ Sᵀk, D in P D, D2; the
probe's forms by default: 1, 1, 1, 2, 2, 1). `--solve tf32` forms T as the kernel does (perf-notes
v54: the FP32 diagonal blocks merged by TF32 products; every instance since v96); `exact` (the
default) as an FP32 inverse;
`fp16dbl` as FlashInfer's sm90 prep does (8 x 8 diagonal blocks in FP32, then doubling on FP16
operands with FP16 rounding at each level; perf-notes v113), `bf16dbl` the same on BF16;
`f16merge` / `bf16merge` as `tf32` with the merges' operands in FP16 / BF16 (T's blocks in FP32);
`tf32prod` / `tf32prod3` as `tf32` with the 16 x 16 diagonal inverses by the product form
(I − A)(I + A²)(I + A⁴)(I + A⁸) on single / split TF32 operands (an idea, perf-notes v115).
`--scheme scan32` models the two-kernel register-state scan (C = 32) instead, its operands' terms
from `--scan-terms` (the BF16X3 mode's by default; see SCAN_TERMS). `--fmt fp16u` takes every split
operand's terms in FP16 (a value and unscaled FP16 remainders), `fp16` with each remainder scaled
by 2^11 (separate accumulators); `--pairs tri` keeps the term pairs i + j <= max(terms) - 1 as
the kernels do (docs/perf-notes.md v100).
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


# --exact 1 clears it: the model's roundings (not the inputs') go, FP32 stays.
ROUND = True


def rnd(x):
    """A BF16 rounding of the model (of an operand or a store)."""
    return bf16(x) if ROUND else np.asarray(x, dtype=np.float32)


def tf32(x):
    """A TF32 operand of an FP32 tl.dot (mma ignores the low 13 bits: truncation)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    return (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32) if ROUND else x


def tf32_rna(x):
    """x rounded to TF32 as cvt.rna.tf32.f32 does (nearest, ties away from zero)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if not ROUND:
        return x
    return ((x.view(np.uint32) + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def fp16(x):
    """Round to the nearest FP16 (ties to even; subnormals below 2^-14, inf above 65504),
    returned as float32."""
    with np.errstate(over="ignore"):
        return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float32)


# --fmt fp16: the split operands' terms in FP16 instead of BF16. Term i is stored scaled by
# 2^(11 i) (so a remainder keeps FP16's 11 bits instead of falling into its subnormals) and its
# products are scaled back by 2^(-11 i) after the FP32 sum: two terms carry ~22 bits, three ~33
# (BF16: ~16 and ~24). The q/k/v inputs then enter the products as FP16 too. `fp16u`: the
# remainders unscaled (one accumulator for every term pair; small remainders fall into FP16's
# subnormals, an absolute error of up to 2^-25 each).
FMT = "bf16"
# --pairs tri: a product of split operands keeps the term pairs i + j <= max(terms) - 1 (what
# the library's BF16X3 takes: hi·hi + hi·lo + lo·hi for two terms); `all` every pair.
PAIRS = "all"


def terms_of(x, terms):
    """x as a list of `terms` terms, each rounding what the ones before left (in FP32)."""
    r = np.asarray(x, dtype=np.float32)
    out = []
    for i in range(terms):
        if not ROUND:
            h = r
        elif FMT == "fp16":
            sc = np.float32(2.0 ** (11 * i))
            h = (fp16(r * sc) / sc).astype(np.float32)
        elif FMT == "fp16u":
            sc = np.float32(1.0)
            h = (fp16(r * sc) / sc).astype(np.float32)
        else:
            h = bf16(r)
        out.append(h)
        r = (r - h).astype(np.float32)
    return out


def split(x, terms):
    """x as the sum (in FP32) of its `terms` terms (see terms_of)."""
    acc = np.zeros_like(np.asarray(x, dtype=np.float32))
    for h in terms_of(x, terms):
        acc = acc + h
    return acc


def tprod(a, ta, b, tb):
    """a @ b with a as ta terms and b as tb terms: the pairs PAIRS keeps, summed in FP64 and
    rounded to FP32 once."""
    A, B = terms_of(a, ta), terms_of(b, tb)
    lim = max(ta, tb) - 1 if PAIRS == "tri" else ta + tb
    acc = 0.0
    for i, x in enumerate(A):
        for j, y in enumerate(B):
            if i + j <= lim:
                acc = acc + x.astype(np.float64) @ y.astype(np.float64)
    return f32(acc)


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


def operand(fmt):
    """A product operand's rounding to fmt (tf32: cvt.rna; fp16, bf16: to nearest even), or
    none under --exact 1."""
    f = {"tf32": tf32_rna, "fp16": fp16, "bf16": bf16}[fmt]
    return lambda x: f(x) if ROUND else np.asarray(x, dtype=np.float32)


def diag_product(Ad, split):
    """A diagonal block's (I + A)^-1 by the nilpotent product form (I − A)(I + A²)(I + A⁴)(I + A⁸)
    on TF32 operands (cvt.rna), FP32 sums; split: each operand a TF32 value and a TF32 remainder,
    three products (hi·hi + hi·lo + lo·hi). perf-notes v115; scripts/tdiag_numerics.py."""
    r = operand("tf32")

    def dot(a, b):
        if not split:
            return mm(r(a), r(b))
        ah, bh = r(a), r(b)
        al, bl = r(f32(a) - ah), r(f32(b) - bh)
        return mm(ah, bh) + mm(ah, bl) + mm(al, bh)

    I = np.eye(Ad.shape[0], dtype=np.float32)
    A2 = f32(dot(Ad, Ad))
    A4 = f32(dot(A2, A2))
    A8 = f32(dot(A4, A4))
    Pd = f32(I - Ad)
    for Ak in (A2, A4, A8):
        Pd = f32(Pd + dot(Pd, Ak))
    return Pd


def solve_fused(A, fmt, diag="fp32"):
    """(I + A)^-1 as the fused kernel's prep forms it (perf-notes v54, v113): the 16 x 16
    diagonal inverses in FP32, level 2 T_ba = −T_bb (A_ba T_aa) for (a, b) = (0, 1), (2, 3),
    level 3 T_10 = −T_1 (A_10 T_0) on the 32 x 32 halves, every product's operands rounded to
    fmt (the library: TF32), FP32 sums. diag `prod` / `prod3`: the diagonal inverses by the
    product form on single / split TF32 operands instead (an idea, perf-notes v115)."""
    n = A.shape[0]
    A = np.pad(A, (0, C - n))
    r = operand(fmt)
    dot = lambda a, b: mm(r(a), r(b))
    T = np.zeros((C, C), dtype=np.float32)
    for i in range(4):
        s = slice(16 * i, 16 * i + 16)
        if diag == "fp32":
            T[s, s] = f32(np.linalg.inv(np.eye(16) + A[s, s].astype(np.float64)))
        else:
            T[s, s] = diag_product(A[s, s], diag == "prod3")
    for a0 in (0, 32):
        sa, sb = slice(a0, a0 + 16), slice(a0 + 16, a0 + 32)
        T[sb, sa] = -dot(T[sb, sb], dot(A[sb, sa], T[sa, sa]))
    h0, h1 = slice(0, 32), slice(32, 64)
    T[h1, h0] = -dot(T[h1, h1], dot(A[h1, h0], T[h0, h0]))
    return T[:n, :n]


def solve_doubling(A, fmt):
    """(I + A)^-1 as FlashInfer's sm90 prep forms it (perf-notes v65, v113; fmt fp16): the 8 x 8
    diagonal inverses in FP32 (forward substitution), then doubling 8 -> 16 -> 32 -> 64, each
    level's off-diagonal block T_ba = −T_bb (A_ba T_aa) on fmt operands (the inner product
    rounded as the outer one's operand), FP32 sums, every block of T rounded to fmt as stored
    for the next level."""
    n = A.shape[0]
    A = np.pad(A, (0, C - n))
    h = operand(fmt)
    dot = lambda a, b: mm(h(a), h(b))
    T = np.zeros((C, C), dtype=np.float32)
    for i in range(C // 8):
        s = slice(8 * i, 8 * i + 8)
        T[s, s] = h(f32(np.linalg.inv(np.eye(8) + A[s, s].astype(np.float64))))
    w = 8
    while w < C:
        for a0 in range(0, C, 2 * w):
            sa, sb = slice(a0, a0 + w), slice(a0 + w, a0 + 2 * w)
            T[sb, sa] = h(-dot(T[sb, sb], dot(A[sb, sa], T[sa, sa])))
        w *= 2
    return T[:n, :n]


# --solve: T's form and its products' operands; `exact` (none of these) an FP32 inverse.
SOLVES = dict(tf32=(solve_fused, "tf32"), f16merge=(solve_fused, "fp16"), bf16merge=(solve_fused, "bf16"),
              fp16dbl=(solve_doubling, "fp16"), bf16dbl=(solve_doubling, "bf16"),
              tf32prod=(lambda A, fmt: solve_fused(A, fmt, "prod"), "tf32"),
              tf32prod3=(lambda A, fmt: solve_fused(A, fmt, "prod3"), "tf32"))
SOLVE = "exact"


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
        if SOLVE in SOLVES:
            solve, fmt = SOLVES[SOLVE]
            T = solve(A, fmt)
        else:
            T = f32(np.linalg.inv(np.eye(L) + A.astype(np.float64)))
        TB = T * bc[None, :]
        P = np.where(low | np.eye(L, dtype=bool), scale * ed * qk, 0.0).astype(np.float32)
        eg = np.exp(gam).astype(np.float32)
        gl = gam[L - 1]
        # The chain's inputs as its products take them: BF16 (exact), or FP16 under --fmt fp16.
        kin, qin = (fp16(kc), fp16(qc)) if FMT != "bf16" and ROUND else (kc, qc)
        # [Sᵀk | Sᵀq] from Sᵀ in its terms.
        SK = tprod(kin, 1, S, terms["s"])  # [L][V]: (Sᵀ k_t)ᵀ
        SQ = tprod(qin, 1, S, terms["s"])
        W = (vc - eg[:, None] * SK).astype(np.float32)
        D = tprod(TB, terms["tb"], W, terms["w"])
        out[c0:c0 + L] = f32((eg * scale)[:, None].astype(np.float64) * SQ
                             + tprod(P, terms["p"], D, terms["d"]).astype(np.float64))
        D2 = (np.exp(gl - gam)[:, None].astype(np.float32) * D).astype(np.float32)
        S = f32(np.exp(gl) * S.astype(np.float64) + tprod(kin.T, 1, D2, terms["d2"]).astype(np.float64))
    return out, S


# --scheme scan32: the two-kernel register-state scan's form (C = 32; chunk_prep.cu and
# chunk_scan_mma.cuh, the BF16X3 mode), its operands' terms set by --scan-terms
# (tb,v,w,s,p,d,d2,kq; BF16X3's by default) and --fmt / --pairs:
#   prep: q·kᵀ and k·kᵀ from the inputs as kq terms (exact sums), A and T = (I + A)^-1 in
#   FP32, Tβ = T diag(β), −W = −Tβ diag(e^γ) k (FP32, then split) and P;
#   scan: Dᵀ = (Tβ v)ᵀ + Sᵀ(−W)ᵀ, Yqᵀ = Sᵀ qᵀ, O = e^γ scale Yq + P D,
#   S = e^{γ_last} S + kᵀ D2 with D2 = e^{γ_last − γ} D.
SCAN_TERMS = dict(tb=3, v=3, w=2, s=2, p=3, d=3, d2=3, kq=2)


def scan32(q, k, v, g, b, s0, scale, terms):
    C32 = 32
    S = s0.astype(np.float32).copy()
    n = len(q)
    out = np.empty((n, V), dtype=np.float32)
    # Inputs exact in the operands' format take one term (BF16 inputs in BF16; in FP16 when
    # the conversion is exact), others their terms.
    def nterms(x, t):
        return 1 if np.array_equal(split(x, 1), x) else t
    for c0 in range(0, n, C32):
        L = min(C32, n - c0)
        qc, kc, vc = q[c0:c0 + L], k[c0:c0 + L], v[c0:c0 + L]
        tkq, tv = nterms(np.concatenate([qc, kc]), terms["kq"]), nterms(vc, terms["v"])
        gam = np.cumsum(g[c0:c0 + L].astype(np.float32), dtype=np.float32)
        bc = b[c0:c0 + L].astype(np.float32)
        kk = tprod(kc, tkq, kc.T, tkq)
        qk = tprod(qc, tkq, kc.T, tkq)
        low = np.tril(np.ones((L, L), dtype=bool), -1)
        caus = low | np.eye(L, dtype=bool)
        ed = np.exp(np.where(caus, gam[:, None] - gam[None, :], -np.inf)).astype(np.float32)
        A = np.where(low, bc[:, None] * ed * kk, 0.0).astype(np.float32)
        T = f32(np.linalg.inv(np.eye(L) + A.astype(np.float64)))
        TB = (T * bc[None, :]).astype(np.float32)
        eg = np.exp(gam).astype(np.float32)
        NW = -mm(TB * eg[None, :], kc)  # −W = −Tβ diag(e^γ) k, FP32
        P = np.where(caus, scale * ed * qk, 0.0).astype(np.float32)
        gl = gam[L - 1]
        D = f32(tprod(TB, terms["tb"], vc, tv).astype(np.float64)
                + tprod(NW, terms["w"], S, terms["s"]).astype(np.float64))
        YQ = tprod(qc, tkq, S, terms["s"])
        out[c0:c0 + L] = f32((eg * scale)[:, None].astype(np.float64) * YQ
                             + tprod(P, terms["p"], D, terms["d"]).astype(np.float64))
        D2 = (np.exp(gl - gam)[:, None].astype(np.float32) * D).astype(np.float32)
        S = f32(np.exp(gl) * S.astype(np.float64) + tprod(kc.T, tkq, D2, terms["d2"]).astype(np.float64))
    return out, S


RCP_LN2 = np.float32(1.4426950216)  # fla's 1/ln 2: gates in log2, exponentials as exp2
BC = 16  # fla's solve: 16 x 16 diagonal blocks by substitution, then a block merge


def mm(a, b):
    """An FP32-accumulated product (summed in FP64, rounded once)."""
    return f32(np.asarray(a, dtype=np.float64) @ np.asarray(b, dtype=np.float64))


def exp2(x):
    return np.exp2(np.asarray(x, dtype=np.float32)).astype(np.float32)


def solve_tf32(A):
    """(I + A)^-1 as fla's kkt_solve kernel merges it: the 16 x 16 diagonal inverses in FP32,
    then the off-diagonal blocks from tl.dots with TF32 operands (its order of products)."""
    n = A.shape[0]
    A = np.pad(A, (0, C - n))  # the padded rows are I's: they leave rows < n alone
    blk = lambda X, i, j: X[i * BC:(i + 1) * BC, j * BC:(j + 1) * BC]
    dot = lambda a, b: mm(tf32(a), tf32(b))
    Ai = np.zeros((C, C), dtype=np.float32)
    for i in range(C // BC):
        blk(Ai, i, i)[:] = f32(np.linalg.inv(np.eye(BC) + blk(A, i, i).astype(np.float64)))
    for d in range(1, C // BC):
        for i in range(d, C // BC):
            j = i - d
            if d == 1:
                blk(Ai, i, j)[:] = -dot(dot(blk(Ai, i, i), blk(A, i, j)), blk(Ai, j, j))
            else:
                acc = sum(dot(blk(A, i, m), blk(Ai, m, j)) for m in range(j, i))
                blk(Ai, i, j)[:] = -dot(blk(Ai, i, i), f32(acc))
    return Ai[:n, :n]


def fla(q, k, v, g, b, s0, scale, use_tf32=False):
    """fla 0.5.2's bf16 chunk_gated_delta_rule forward (chunk 64): O in FP32, O in BF16, S."""
    S = s0.astype(np.float32).copy()
    n = len(q)
    out = np.empty((n, V), dtype=np.float32)
    for c0 in range(0, n, C):
        L = min(C, n - c0)
        qc, kc, vc = q[c0:c0 + L], k[c0:c0 + L], v[c0:c0 + L]
        gam = (np.cumsum(g[c0:c0 + L].astype(np.float32), dtype=np.float32) * RCP_LN2).astype(np.float32)
        bc = b[c0:c0 + L].astype(np.float32)
        dg = gam[:, None] - gam[None, :]
        low = np.tril(np.ones((L, L), dtype=bool), -1)
        caus = low | np.eye(L, dtype=bool)
        ed = exp2(np.where(caus, dg, -np.inf))
        # kkt_solve: A in FP32, T = (I + A)^-1 stored in BF16 (k's dtype).
        A = (np.where(low, mm(kc, kc.T) * ed, 0.0) * bc[:, None]).astype(np.float32)
        T = solve_tf32(A) if use_tf32 else f32(np.linalg.inv(np.eye(L) + A.astype(np.float64)))
        T = rnd(T)
        eg = exp2(gam)
        # recompute_w_u: BF16 operands, w and u stored in BF16.
        w = rnd(mm(T, rnd(kc * bc[:, None] * eg[:, None])))
        u = rnd(mm(T, rnd(vc * bc[:, None])))
        # fwd_h: the chunk's state stored in BF16 (what fwd_o reads too) and used so here.
        h16 = rnd(S)
        vn = (u - mm(w, h16)).astype(np.float32)
        gl = gam[L - 1]
        D2 = rnd(vn * exp2(gl - gam)[:, None])  # the FP32 v_new, gated, in BF16
        S = f32(exp2(gl) * S.astype(np.float64) + kc.T.astype(np.float64) @ D2.astype(np.float64))
        # fwd_o: the stored v_new (BF16); scale after the products, as fla applies it.
        P = rnd(np.where(caus, mm(qc, kc.T) * ed, 0.0))
        out[c0:c0 + L] = f32(scale * (mm(qc, h16) * eg[:, None]).astype(np.float64)
                             + scale * mm(P, rnd(vn)).astype(np.float64))
    return out, rnd(out), S


IN_F32 = False  # --inputs f32: q, k, v kept in FP32 (the scan32 form splits them)


def inputs(rng, T, regime, spread=0.35):
    """Per-regime inputs for one (key head, value head): q, k, v BF16 (or FP32); g, β FP32; S0."""
    cast = f32 if IN_F32 else bf16
    q = cast(rng.standard_normal((T, K)))
    k = rng.standard_normal((T, K))
    if regime == "alike-keys":
        # Keys a step `spread` from one direction (0.35: k_t·k_i ~ 0.9, 1: ~0.5), so that
        # T = (I + A)^-1 is far from I.
        base = rng.standard_normal(K)
        k = base[None, :] + spread * rng.standard_normal((T, K))
    k = cast(k / np.linalg.norm(k, axis=1, keepdims=True))
    v = cast(rng.standard_normal((T, V)))
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
    ap.add_argument("--scheme", default="fused", choices=["fused", "fla", "scan32"])
    ap.add_argument("--scan-terms", default=",".join(str(n) for n in SCAN_TERMS.values()),
                    help="scan32: terms of " + ",".join(SCAN_TERMS) + " (BF16X3's by default)")
    ap.add_argument("--inputs", default="bf16", choices=["bf16", "f32"])
    ap.add_argument("--T", type=int, default=1000)
    ap.add_argument("--heads", type=int, default=4, help="independent heads (the max over them)")
    for name, n in PROBE_TERMS.items():
        ap.add_argument(f"--{name}", type=int, default=n, choices=[1, 2, 3],
                        help=f"BF16 terms of {OPERANDS[name]} (the probe: {n})")
    ap.add_argument("--regime", default="all", choices=REGIMES + ["all"])
    ap.add_argument("--spread", type=float, default=0.35, help="alike-keys: the keys' step from one direction")
    ap.add_argument("--seed", type=int, default=12345)
    ap.add_argument("--exact", type=int, default=0, choices=[0, 1], help="no BF16/TF32 rounding in the model")
    ap.add_argument("--tf32", type=int, default=0, choices=[0, 1], help="fla: T's block merge with TF32 operands")
    ap.add_argument("--fmt", default="bf16", choices=["bf16", "fp16", "fp16u"],
                    help="fused: the split operands' terms in BF16 or in FP16 (scaled remainders)")
    ap.add_argument("--pairs", default="all", choices=["all", "tri"],
                    help="fused: every term pair of a split product, or i + j <= max(terms) - 1")
    ap.add_argument("--solve", default="exact", choices=["exact", *SOLVES],
                    help="fused: T = (I + A)^-1 in FP32 (the split products), by TF32 block merges "
                         "(f16merge / bf16merge: the merges on FP16 / BF16 operands), or by FlashInfer's "
                         "FP16 doubling from 8 x 8 blocks (bf16dbl: on BF16 operands)")
    a = ap.parse_args()
    global ROUND, SOLVE, FMT, PAIRS, IN_F32
    SOLVE, FMT, PAIRS, IN_F32 = a.solve, a.fmt, a.pairs, a.inputs == "f32"
    sterms = dict(zip(SCAN_TERMS, (int(x) for x in a.scan_terms.split(","))))
    ROUND = not a.exact
    scale = 1.0 / np.sqrt(K)
    terms = {name: getattr(a, name) for name in PROBE_TERMS}
    if a.scheme == "fused":
        label = " ".join(f"{name} {n}" for name, n in terms.items()) + f", solve {a.solve}"
        label += f", {a.fmt}" + (", pairs i+j<n" if a.pairs == "tri" else "")
    elif a.scheme == "scan32":
        label = "scan32 " + " ".join(f"{n} {t}" for n, t in sterms.items()) + f", {a.fmt}"
        label += ", pairs i+j<n" if a.pairs == "tri" else ""
    else:
        label = "fla 0.5.2" + (", TF32 merge" if a.tf32 else "")
    label += ", f32 inputs" if IN_F32 else ""
    label += ", exact" if a.exact else ""
    for regime in REGIMES if a.regime == "all" else [a.regime]:
        rng = np.random.default_rng(a.seed)
        eo = eb = es = 0.0
        for _ in range(a.heads):
            q, k, v, g, b, s0 = inputs(rng, a.T, regime, a.spread)
            ro, rs = reference(q, k, v, g, b, s0, scale)
            if a.scheme == "fused":
                fo, fs = fused(q, k, v, g, b, s0, scale, terms)
                fb = fo
            elif a.scheme == "scan32":
                fo, fs = scan32(q, k, v, g, b, s0, scale, sterms)
                fb = fo
            else:
                fo, fb, fs = fla(q, k, v, g, b, s0, scale, a.tf32)
            if not (np.isfinite(fo).all() and np.isfinite(fs).all()):
                eo = eb = es = float("inf")
                break
            eo = max(eo, np.abs(fo - ro).max() / np.abs(ro).max())
            eb = max(eb, np.abs(fb - ro).max() / np.abs(ro).max())
            es = max(es, np.abs(fs - rs).max() / np.abs(rs).max())
        # fla's O is stored in BF16: its error after that rounding too.
        ob = f" (bf16 {eb:.3e})" if a.scheme == "fla" else ""
        print(f"{regime:18s} T {a.T:6d} heads {a.heads} ({label}):  out {eo:.3e}{ob}  state {es:.3e}")


if __name__ == "__main__":
    main()

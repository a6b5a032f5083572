#!/usr/bin/env python3
"""gdn beside flash-linear-attention (fla) on the same GPU, shapes and inputs (issue #7).

Both are timed per call by CUDA-graph replay (torch.cuda.CUDAGraph, median of
repeats); both are compared with an FP64 recurrence on the GPU
(max|diff|/max|ref| over outputs and final states). gdn is called through its C
ABI with ctypes (libgdn.so from a CUDA build); fla must be importable (its
wheels on PYTHONPATH), else gdn is reported alone.

The matrix: H_k = 16, H_v = 48 and 64, K = V = 128; one sequence of T = 512,
2048, 8192, 32768, 65536 tokens and a varlen batch of 8 x 4096 (cu_seqlens for
both); every sequence starts from its own random FP32 initial state. Methods:
  gdn FP32 / TF32X3 / BF16 / FP16 / BF16X3 / FP16X3
                                    problem.precision (forced `chunked`): bf16
                                    q/k/v/out, f32 g and beta, FP32 state
  gdn <precision> f32-in            (--f32-inputs) the same precisions from the f32 inputs
                                    before bf16 rounding (f32 q/k/v/out), beside fla fp32-in
  fla bf16                          chunk_gated_delta_rule, the same bf16 tensors
  fla fp32-in                       the same inputs before bf16 rounding (f32 q/k/v/out;
                                    its dots then run in tf32)
  fla bf16 cp                       (--fla-cp) fla bf16 with its intra-card context-parallel
                                    backend: FLA_INTRACARD_CP=1, torch.inference_mode() and
                                    cu_seqlens even for one sequence (the backend's conditions);
                                    a long sequence is split into sub-sequences run side by side
--gdn-algo auto lets gdn's dispatch choose (the sequential kernel below its
chunked threshold) instead of forcing `chunked`: the call an engine makes.
Inputs (identical for both libraries, no in-kernel norm): q ~ N(0, 1), k
L2-normalised per row, v ~ N(0, 1), g ~ U(-0.3, -0.01) (log-space decay),
beta ~ U(0, 1), h0 ~ 0.5 N(0, 1); scale 1/sqrt(K); grouped heads (value head h
reads key head h / (H_v / H_k)), as fla does.
With --l2norm, the call Qwen3-Next-style engines make: q and k ~ N(0, 1) raw,
L2-normalised inside both kernels (gdn GDN_FLAG_QK_L2NORM, fla
use_qk_l2norm_in_kernel=True; both x / sqrt(x·x + 1e-6)), and in FP64 by the
reference. --precisions limits gdn's methods (e.g. BF16,BF16X3). FP16X3 (gdn 0.6.0+) is
left out, with a note, for an older libgdn.

Errors: the gdn error runs write f32 outputs (the arithmetic's error; the timed
runs write bf16, f32 with f32 inputs); fla writes its input dtype (bf16 outputs carry ~2e-3 rounding).
The FP64 reference is the exact chunked (WY) form of the recurrence in float64
(a triangular solve per 64-token chunk), checked at start-up against the
token-by-token FP64 loop (printed). Each error row names the T it was measured
at (all shapes by default; --err-max-tokens lowers that).

usage: python3 scripts/bench_fla.py --lib build-cuda/libgdn.so.0.5.2 [--quick | --shapes 48:32768,...]
       python3 scripts/bench_fla.py --abi        (the ctypes layouts, no GPU, no torch)
       python3 scripts/bench_fla.py --selftest   (the FP64 references on the CPU, no GPU)
"""
import argparse
import contextlib
import ctypes
import math
import os
import sys
import time

try:
    import torch
except ImportError:  # --abi needs no torch
    torch = None

HK, K, V = 16, 128, 128
DEV = "cuda"
L2NORM = False  # --l2norm: q and k normalised inside the kernels (and by the reference)
L2EPS = 1e-6    # gdn's default l2norm_eps, fla's l2norm eps
GDN_ALGO = "chunked"  # --gdn-algo
F32_IN = False        # --f32-inputs: gdn also from the f32 inputs


def gdn_methods():
    """(method key, input kind) of every gdn method: each precision from the bf16 inputs, and
    with --f32-inputs from the f32 ones ("gdn FP32 f32-in")."""
    kinds = ("bf16", "f32") if F32_IN else ("bf16",)
    return [(f"gdn {p}" + ("" if kind == "bf16" else " f32-in"), pv, kind) for p, pv in PRECISIONS for kind in kinds]

# ---------------------------------------------------------------- the C ABI
# Mirrors include/gdn/gdn.h (0.2.0; 0.3.0 added a flag, not a field); the sizes are asserted below. `--abi`
# prints every field's offset, to diff against the C compiler's offsetof
# (x86-64: caps 184, problem 96, tensors 240, path_info 216 bytes).


class Caps(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("backend", ctypes.c_int), ("device", ctypes.c_int32),
                ("arch", ctypes.c_char * 32), ("name", ctypes.c_char * 96),
                ("multiprocessor_count", ctypes.c_int32), ("warp_size", ctypes.c_int32),
                ("shared_mem_per_block_optin", ctypes.c_size_t),
                ("shared_mem_per_multiprocessor", ctypes.c_size_t), ("features", ctypes.c_uint64),
                ("compute_major", ctypes.c_int32), ("compute_minor", ctypes.c_int32)]


class Problem(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("num_seqs", ctypes.c_int32), ("num_tokens", ctypes.c_int64),
                ("max_seqlen", ctypes.c_int64), ("num_k_heads", ctypes.c_int32), ("num_v_heads", ctypes.c_int32),
                ("head_dim_k", ctypes.c_int32), ("head_dim_v", ctypes.c_int32), ("head_mapping", ctypes.c_int),
                ("input_dtype", ctypes.c_int), ("gate_dtype", ctypes.c_int), ("output_dtype", ctypes.c_int),
                ("state_layout", ctypes.c_int), ("num_state_slots", ctypes.c_int32), ("algorithm", ctypes.c_int),
                ("precision", ctypes.c_int), ("flags", ctypes.c_uint32), ("scale", ctypes.c_float),
                ("l2norm_eps", ctypes.c_float), ("norm_eps", ctypes.c_float)]


def _tensor_fields():
    f = [("struct_size", ctypes.c_size_t)]
    for n in ("q", "k", "v", "g", "beta", "out", "z"):
        f += [(n, ctypes.c_void_p), (n + "_token_stride", ctypes.c_int64), (n + "_head_stride", ctypes.c_int64)]
    f += [("state", ctypes.c_void_p), ("state_slot_stride", ctypes.c_int64), ("cu_seqlens", ctypes.c_void_p),
          ("state_indices", ctypes.c_void_p), ("start_from_zero", ctypes.c_void_p), ("A_log", ctypes.c_void_p),
          ("dt_bias", ctypes.c_void_p), ("norm_weight", ctypes.c_void_p)]
    return f


class Tensors(ctypes.Structure):
    _fields_ = _tensor_fields()


class PathInfo(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("path", ctypes.c_int), ("chunk_size", ctypes.c_int32),
                ("precision", ctypes.c_int), ("reason", ctypes.c_char * 192)]


assert ctypes.sizeof(Caps) == 184 and ctypes.sizeof(Problem) == 96 and ctypes.sizeof(Tensors) == 240
assert ctypes.sizeof(PathInfo) == 216

ALGO = {"auto": 0, "sequential": 1, "chunked": 2}
# gdn_precision_t: the values are pinned in gdn.h (FP16 = 2, BF16 = 3, BF16X3 = 4, FP16X3 = 5).
PRECISIONS = (("FP32", 0), ("TF32X3", 1), ("BF16", 3), ("FP16", 2), ("BF16X3", 4), ("FP16X3", 5))
PRECISION_NAME = {v: n for n, v in PRECISIONS}
PATH = {0: "none", 1: "sequential", 2: "chunked-fp32", 3: "chunked-lowp-c16", 4: "chunked-tc"}


def print_abi():
    """One line per field: STRUCT FIELD OFFSET SIZE, then STRUCT sizeof N (as scripts' C twin prints)."""
    for name, cls in (("gdn_caps_t", Caps), ("gdn_problem_t", Problem), ("gdn_tensors_t", Tensors),
                      ("gdn_path_info_t", PathInfo)):
        for fname, _ in cls._fields_:
            f = getattr(cls, fname)
            print(f"{name} {fname} {f.offset} {f.size}")
        print(f"{name} sizeof {ctypes.sizeof(cls)}")


def dtype_code(dtype):
    return {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}[dtype]


class Gdn:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.lib.gdn_last_error.restype = ctypes.c_char_p
        self.lib.gdn_version.restype = ctypes.c_uint32
        self.version = self.lib.gdn_version()
        if self.version < 200:
            raise RuntimeError(f"{path} is gdn {self.version}: this script needs 0.2.0+ (problem.precision)")
        self.caps = Caps()
        self.caps.struct_size = ctypes.sizeof(Caps)
        self.check(self.lib.gdn_probe(1, torch.cuda.current_device(), ctypes.byref(self.caps)), "gdn_probe")

    def check(self, status, what):
        if status != 0:
            raise RuntimeError(f"{what}: status {status}: {self.lib.gdn_last_error().decode()}")

    def problem(self, q, v, g, out, state, algo, precision, num_seqs, max_seqlen):
        p = Problem()
        p.struct_size = ctypes.sizeof(Problem)
        p.num_seqs = num_seqs
        p.num_tokens = q.shape[0]
        p.max_seqlen = max_seqlen
        p.num_k_heads, p.num_v_heads, p.head_dim_k, p.head_dim_v = q.shape[1], v.shape[1], q.shape[2], v.shape[2]
        p.input_dtype = dtype_code(q.dtype)
        p.gate_dtype = dtype_code(g.dtype)
        p.output_dtype = dtype_code(out.dtype)
        p.num_state_slots = state.shape[0]
        p.algorithm = ALGO[algo]
        p.precision = precision
        p.flags = 1 if L2NORM else 0  # GDN_FLAG_QK_L2NORM (l2norm_eps 0: the default, 1e-6)
        return p

    def path_of(self, p):
        info = PathInfo()
        info.struct_size = ctypes.sizeof(PathInfo)
        st = self.lib.gdn_select_path(ctypes.byref(self.caps), ctypes.byref(p), None, ctypes.byref(info))
        if st != 0:
            return f"n/a ({self.lib.gdn_last_error().decode()})"
        # The precision it runs in, where not the one asked for (BF16X3 and FP16X3
        # take the TF32X3 scan where their own does not fit the device).
        served = f" ({PRECISION_NAME.get(info.precision, info.precision)})" if info.precision != p.precision else ""
        return f"{PATH.get(info.path, info.path)} C={info.chunk_size}{served}"

    def call_for(self, q, k, v, g, beta, out, state, algo="chunked", precision=0, cu_seqlens=None, max_seqlen=0):
        """A closure that runs one gdn call on the current stream (graph-capturable).
        cu_seqlens: int32 device tensor of num_seqs + 1 offsets, or None (one sequence per state slot,
        equal lengths)."""
        num_seqs = state.shape[0] if cu_seqlens is None else cu_seqlens.numel() - 1
        p = self.problem(q, v, g, out, state, algo, precision, num_seqs, max_seqlen)
        t = Tensors()
        t.struct_size = ctypes.sizeof(Tensors)
        for name, x in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta), ("out", out), ("state", state)):
            assert x.is_contiguous() and x.is_cuda
            setattr(t, name, x.data_ptr())
        if cu_seqlens is not None:
            assert cu_seqlens.dtype == torch.int32 and cu_seqlens.is_cuda
            t.cu_seqlens = cu_seqlens.data_ptr()
        size = ctypes.c_size_t(0)
        self.check(self.lib.gdn_workspace_size(ctypes.byref(self.caps), ctypes.byref(p), ctypes.byref(size)),
                   "gdn_workspace_size")
        ws = torch.empty(max(size.value, 256), dtype=torch.uint8, device=DEV)
        keep = (p, t, ws, cu_seqlens)

        def run():
            stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
            status = self.lib.gdn_chunked_recurrence(ctypes.byref(self.caps), ctypes.byref(keep[0]),
                                                     ctypes.byref(keep[1]), ctypes.c_void_p(keep[2].data_ptr()),
                                                     ctypes.c_size_t(keep[2].numel()), stream)
            self.check(status, "gdn_chunked_recurrence")
        run.path = self.path_of(p)
        return run


# ------------------------------------------------------------------ inputs

def inputs(T, hv, n_state=1, seed=0):
    """FP32 inputs: q, k [T, Hk, K], v [T, Hv, V], g, beta [T, Hv], h0 [n_state, Hv, K, V]."""
    gen = torch.Generator(device=DEV).manual_seed(seed)
    q = torch.randn(T, HK, K, device=DEV, generator=gen)
    k = torch.randn(T, HK, K, device=DEV, generator=gen)
    if not L2NORM:  # (with it, both kernels normalise q and k themselves)
        k = torch.nn.functional.normalize(k, dim=-1)
    v = torch.randn(T, hv, V, device=DEV, generator=gen)
    g = -0.3 + 0.29 * torch.rand(T, hv, device=DEV, generator=gen)
    beta = torch.rand(T, hv, device=DEV, generator=gen)
    h0 = 0.5 * torch.randn(n_state, hv, K, V, device=DEV, generator=gen)
    return q, k, v, g, beta, h0


# ------------------------------------------------------------- FP64 references

def _expand(q, k, v):
    rep = v.shape[1] // q.shape[1]  # grouped: value head h reads key head h // rep
    qd, kd = q.double(), k.double()
    if L2NORM:
        qd, kd = (x / torch.sqrt((x * x).sum(-1, keepdim=True) + L2EPS) for x in (qd, kd))
    return (qd.repeat_interleave(rep, dim=1) / math.sqrt(q.shape[2]),
            kd.repeat_interleave(rep, dim=1), v.double())


def _bounds(T, cu):
    if cu is None:
        return [(0, T)]
    c = [int(x) for x in cu.tolist()]
    return list(zip(c[:-1], c[1:]))


def reference_loop(q, k, v, g, beta, h0, cu=None):
    """FP64 recurrence, token by token (slow: ~10 launches a token). cu: offsets (any int tensor) or None."""
    qd, kd, vd = _expand(q, k, v)
    gd, bd = g.double(), beta.double()
    out = torch.empty(vd.shape, dtype=torch.float64, device=q.device)
    states = []
    for n, (a, b) in enumerate(_bounds(q.shape[0], cu)):
        S = h0[n].double().clone()
        for t in range(a, b):
            S *= torch.exp(gd[t])[:, None, None]
            d = bd[t][:, None] * (vd[t] - torch.einsum("hk,hkv->hv", kd[t], S))
            S += kd[t][:, :, None] * d[:, None, :]
            out[t] = torch.einsum("hk,hkv->hv", qd[t], S)
        states.append(S)
    return out, torch.stack(states)


def reference(q, k, v, g, beta, h0, cu=None, chunk=64):
    """FP64 recurrence in the exact chunked (WY) form: per chunk of C tokens, with Γ the in-chunk
    cumulative log decay, D = rows d_t solve (I + A) D = β ⊙ (V − e^Γ ⊙ K S0), A[t,i] = β_t e^{Γt−Γi}
    k_t·k_i (i < t); o = e^Γ ⊙ Q S0 + (e^{Γt−Γi} q_t·k_i)_{i<=t} D; S = e^{ΓC} S0 + Kᵀ(e^{ΓC−Γi} ⊙ D).
    Equal to reference_loop up to FP64 rounding (checked at start-up); ~20 launches per chunk."""
    qd, kd, vd = _expand(q, k, v)
    gd, bd = g.double(), beta.double()
    out = torch.empty(vd.shape, dtype=torch.float64, device=q.device)
    states = []
    idx = torch.arange(chunk, device=q.device)
    incl = idx[:, None] >= idx[None, :]  # i <= t
    for n, (a, b) in enumerate(_bounds(q.shape[0], cu)):
        S = h0[n].double().clone()  # [H, K, V]
        for c0 in range(a, b, chunk):
            c1 = min(c0 + chunk, b)
            C = c1 - c0
            Qc, Kc, Vc = (x[c0:c1].transpose(0, 1) for x in (qd, kd, vd))  # [H, C, K|V]
            G = torch.cumsum(gd[c0:c1], dim=0).transpose(0, 1)  # [H, C]
            Bc = bd[c0:c1].transpose(0, 1)  # [H, C]
            diff = G[:, :, None] - G[:, None, :]  # Γt − Γi
            m = incl[:C, :C]
            dec = torch.exp(torch.where(m, diff, torch.full_like(diff, -math.inf)))  # 0 above the diagonal
            eG = torch.exp(G)[:, :, None]
            A = Bc[:, :, None] * dec * (Kc @ Kc.transpose(1, 2))  # diagonal ignored (unitriangular)
            rhs = Bc[:, :, None] * (Vc - eG * (Kc @ S))
            D = torch.linalg.solve_triangular(A, rhs, upper=False, unitriangular=True)
            out[c0:c1] = (eG * (Qc @ S) + (dec * (Qc @ Kc.transpose(1, 2))) @ D).transpose(0, 1)
            w = torch.exp(G[:, -1:] - G)[:, :, None]  # [H, C, 1]
            S = torch.exp(G[:, -1])[:, None, None] * S + Kc.transpose(1, 2) @ (w * D)
        states.append(S)
    return out, torch.stack(states)


def rel(got, want):
    return ((got.double() - want).abs().max() / want.abs().max()).item()


def err_str(o, s, ro, rs):
    return f"{rel(o, ro):.2e} / {rel(s, rs):.2e}"


# ------------------------------------------------------------------ timing

def graph_time_ms(fn, reps=7):
    """Per-call device time by CUDA-graph replay (median of reps batches of >= 20 ms). If capture
    fails (a host sync inside fn), back-to-back calls between events instead, marked '*'."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    mark = ""
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        run = graph.replay
    except Exception as e:  # noqa: BLE001
        print(f"  (graph capture failed: {str(e).splitlines()[0][:120]}; timing eager calls)")
        torch.cuda.synchronize()
        run, mark = fn, "*"
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    run()
    torch.cuda.synchronize()
    e0.record()
    run()
    e1.record()
    torch.cuda.synchronize()
    one = e0.elapsed_time(e1)
    inner = max(2, min(1000, int(20.0 / max(one, 1e-3))))
    times = []
    for _ in range(reps):
        e0.record()
        for _ in range(inner):
            run()
        e1.record()
        torch.cuda.synchronize()
        times.append(e0.elapsed_time(e1) / inner)
    times.sort()
    return times[len(times) // 2], mark


def host_time_us(fn, calls=100):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls * 1e6


# ------------------------------------------------------------------ the matrix

def shape_name(lens):
    return f"T = {lens[0]}" if len(lens) == 1 else f"{len(lens)} x {lens[0]}"


PHASES = {}  # wall time of run_shape's phases (errors included), for the progress line


class fla_intracard_cp:
    """fla's intra-card context-parallel backend for the calls inside (fla reads the variable per call)."""

    def __enter__(self):
        self.old = os.environ.get("FLA_INTRACARD_CP")
        os.environ["FLA_INTRACARD_CP"] = "1"
        self.mode = torch.inference_mode()
        self.mode.__enter__()

    def __exit__(self, *exc):
        self.mode.__exit__(*exc)
        if self.old is None:
            del os.environ["FLA_INTRACARD_CP"]
        else:
            os.environ["FLA_INTRACARD_CP"] = self.old


def run_shape(gdn, fla_chunk, hv, lens, err_max_tokens, seed, fla_cp=False):
    """Times and errors of every method for one shape; returns (times, errors, err_note, paths)."""
    T = sum(lens)
    n = len(lens)
    q, k, v, g, beta, h0 = inputs(T, hv, n_state=n, seed=seed)
    qb, kb, vb = q.bfloat16(), k.bfloat16(), v.bfloat16()
    cu32 = cu64 = cu_cpu = None
    offs = [0]
    for L in lens:
        offs.append(offs[-1] + L)
    cu_all_cpu = torch.tensor(offs, dtype=torch.int64)  # for fla's CP backend, one sequence too
    cu_all = cu_all_cpu.to(DEV)
    if n > 1:
        cu_cpu = cu_all_cpu
        cu64 = cu_all
        cu32 = cu_cpu.to(device=DEV, dtype=torch.int32)
    maxlen = max(lens)
    times, errs, paths = {}, {}, {}
    do_err = T <= err_max_tokens

    # FP64 references: from the bf16-rounded inputs (gdn, fla bf16) and from the f32 ones (fla fp32-in).
    # Each phase's wall time goes to PHASES (the progress line prints it).
    PHASES.clear()
    t_phase = time.time()
    refs = {}
    if do_err:
        refs["bf16"] = reference(qb, kb, vb, g, beta, h0, cu_cpu)
        if fla_chunk or F32_IN:
            refs["f32"] = reference(q, k, v, g, beta, h0, cu_cpu)
        torch.cuda.synchronize()
    PHASES["FP64 refs"] = time.time() - t_phase
    t_phase = time.time()

    for key, pval, kind in gdn_methods():
        xs = (qb, kb, vb) if kind == "bf16" else (q, k, v)
        if do_err:  # f32 outputs: the arithmetic's error
            out = torch.empty(T, hv, V, dtype=torch.float32, device=DEV)
            st = h0.clone()
            gdn.call_for(*xs, g, beta, out, st, GDN_ALGO, pval, cu32, maxlen)()
            torch.cuda.synchronize()
            errs[key] = err_str(out, st, *refs[kind])
            del out, st
        out = torch.empty(T, hv, V, dtype=xs[0].dtype, device=DEV)
        st = h0.clone()
        run = gdn.call_for(*xs, g, beta, out, st, GDN_ALGO, pval, cu32, maxlen)
        paths[key] = run.path  # (the path can depend on the input type: the fused BF16 kernel)
        times[key] = graph_time_ms(run)
        del out, st, run

    PHASES["gdn"] = time.time() - t_phase
    t_phase = time.time()
    if fla_chunk:
        def fla_call(x_q, x_k, x_v, state, varlen=False):
            qq, kk, vv, gg, bb = x_q[None], x_k[None], x_v[None], g[None], beta[None]
            kw = dict(initial_state=state, output_final_state=True, use_qk_l2norm_in_kernel=L2NORM)
            if cu64 is not None or varlen:
                kw.update(cu_seqlens=cu_all, cu_seqlens_cpu=cu_all_cpu)
            return lambda: fla_chunk(qq, kk, vv, gg, bb, **kw)
        runs = [("fla bf16", (qb, kb, vb), "bf16", False), ("fla fp32-in", (q, k, v), "f32", False)]
        if fla_cp:
            runs.append(("fla bf16 cp", (qb, kb, vb), "bf16", True))
        for key, xs, rkey, cp in runs:
            try:
                with (fla_intracard_cp() if cp else contextlib.nullcontext()):
                    call = fla_call(*xs, h0, varlen=cp)
                    if do_err:
                        o, s = call()
                        torch.cuda.synchronize()
                        errs[key] = err_str(o[0], s, *refs[rkey])
                        del o, s
                    times[key] = graph_time_ms(call)
                    del call
            except Exception as e:  # noqa: BLE001  (an optional backend's failure is reported, not fatal)
                if not cp:
                    raise
                print(f"  ({key} failed: {str(e).splitlines()[0][:160]})")
                times[key] = (float("nan"), "!")
    PHASES["fla"] = time.time() - t_phase
    del refs
    torch.cuda.empty_cache()
    return times, errs, (shape_name(lens) if do_err else "not measured"), paths


def matrix(gdn, fla_chunk, shapes, err_max_tokens, fla_cp=False):
    methods = [key for key, _, _ in gdn_methods()] + (["fla bf16", "fla fp32-in"] if fla_chunk else [])
    if fla_chunk and fla_cp:
        methods.append("fla bf16 cp")
    ratio = fla_chunk and "gdn BF16" in methods  # (the ratio column needs gdn's BF16 method)
    results = []
    for i, (hv, lens) in enumerate(shapes):
        t0 = time.time()
        r = run_shape(gdn, fla_chunk, hv, lens, err_max_tokens, seed=10 + i, fla_cp=fla_cp)
        results.append((hv, lens) + r)
        # Errors on the progress line too: a run cut by its time limit keeps them.
        print(f"  [{hv} value heads, {shape_name(lens)}: {time.time() - t0:.1f} s ("
              + ", ".join(f"{k} {v:.1f} s" for k, v in PHASES.items()) + ")] "
              + ", ".join(f"{m} {r[0][m][0]:.4f}{r[0][m][1]}" for m in methods if m in r[0])
              + ("; errors (out / state) " + ", ".join(f"{m} {r[1][m]}" for m in methods if m in r[1])
                 if r[1] else ""))
        sys.stdout.flush()
    for hv in sorted({s[0] for s in shapes}):
        rows = [r for r in results if r[0] == hv]
        print(f"\n### H_k = {HK}, H_v = {hv}, K = V = {K}: time per call (ms, CUDA-graph replay, median)\n")
        head = "| shape | " + " | ".join(methods) + (" | fla bf16 / gdn BF16 |" if ratio else " |")
        print(head)
        print("|---|" + "---:|" * (len(methods) + (1 if ratio else 0)))
        for _, lens, times, _, _, _ in rows:
            cells = [f"{times[m][0]:.4f}{times[m][1]}" for m in methods]
            if ratio:
                cells.append(f"{times['fla bf16'][0] / times['gdn BF16'][0]:.2f}x")
            print(f"| {shape_name(lens)} | " + " | ".join(cells) + " |")
        print(f"\n### H_v = {hv}: error vs FP64, max|diff|/max|ref|, out / final state "
              "(gdn: f32 outputs, each from its inputs; fla: outputs in its input dtype)\n")
        print("| shape | measured at | " + " | ".join(methods) + " |")
        print("|---|---|" + "---|" * len(methods))
        for _, lens, _, errs, note, _ in rows:
            print(f"| {shape_name(lens)} | {note} | " + " | ".join(errs.get(m, "-") for m in methods) + " |")
    print(f"\n('*': eager calls between events, graph capture failed.) gdn paths (gdn_select_path, {GDN_ALGO}):")
    for hv, lens, _, _, _, paths in results:
        print(f"  H_v {hv}, {shape_name(lens)}: " + "; ".join(f"{k[4:]}: {paths[k]}" for k, _, _ in gdn_methods()))


# ------------------------------------------------------------------ main

def selftest():
    """On the CPU: the chunked FP64 reference against the token loop (one sequence and varlen)."""
    global DEV
    DEV = "cpu"
    worst = 0.0
    for hv, lens in ((48, (200,)), (64, (1, 64, 130, 0, 65))):
        T = sum(lens)
        q, k, v, g, beta, h0 = inputs(T, hv, n_state=len(lens), seed=5)
        offs = [0]
        for L in lens:
            offs.append(offs[-1] + L)
        cu = torch.tensor(offs) if len(lens) > 1 else None
        ro, rs = reference_loop(q, k, v, g, beta, h0, cu)
        co, cs = reference(q, k, v, g, beta, h0, cu)
        e = (rel(co, ro), rel(cs, rs))
        worst = max(worst, *e)
        print(f"Hv {hv}, lens {lens}: chunked FP64 vs token loop: out {e[0]:.2e}, state {e[1]:.2e}")
    print("selftest", "ok" if worst < 1e-12 else "FAILED")
    return 0 if worst < 1e-12 else 1


def main():
    global HK
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib")
    ap.add_argument("--quick", action="store_true", help="a few shapes, under a minute")
    ap.add_argument("--shapes", help="the matrix's shapes instead of the full one: comma-separated "
                    "HV:T (one sequence) or HV:TxN (N sequences of T tokens), e.g. 48:32768,64:4096x8")
    ap.add_argument("--err-max-tokens", type=int, default=1 << 30,
                    help="measure errors only on shapes of at most this many tokens (default: all)")
    ap.add_argument("--no-decode", action="store_true", help="skip the decode and host-time tables")
    ap.add_argument("--hk", type=int, default=HK,
                    help=f"key heads (default {HK}); every H_v of --shapes must be a multiple of it, e.g. "
                    "--hk 4 --shapes 8:32768 for a model of H_k 16, H_v 32 split over 4 GPUs")
    ap.add_argument("--fla-cp", action="store_true",
                    help="also fla bf16 through its intra-card context-parallel backend (FLA_INTRACARD_CP=1)")
    ap.add_argument("--l2norm", action="store_true",
                    help="raw q and k, L2-normalised inside both kernels (the Qwen3-Next call)")
    ap.add_argument("--precisions", help="gdn's precisions to run, comma-separated (default: all six)")
    ap.add_argument("--gdn-algo", choices=("chunked", "auto"), default="chunked",
                    help="gdn's algorithm in the matrix (default chunked: forced; auto: its dispatch)")
    ap.add_argument("--f32-inputs", action="store_true",
                    help="gdn also from the f32 inputs (f32 q/k/v/out), beside fla fp32-in")
    ap.add_argument("--abi", action="store_true", help="print the ctypes layouts and exit")
    ap.add_argument("--selftest", action="store_true", help="check the FP64 references on the CPU and exit")
    args = ap.parse_args()
    if args.abi:
        print_abi()
        return 0
    if args.selftest:
        return selftest()
    if not args.lib:
        ap.error("--lib is required")
    HK = args.hk
    global L2NORM, PRECISIONS, GDN_ALGO, F32_IN
    L2NORM = args.l2norm
    GDN_ALGO = args.gdn_algo
    F32_IN = args.f32_inputs
    if args.precisions:
        want = args.precisions.split(",")
        bad = [w for w in want if w not in PRECISION_NAME.values()]
        if bad:
            ap.error(f"--precisions: unknown {bad}; the six are {[n for n, _ in PRECISIONS]}")
        PRECISIONS = tuple(pv for pv in PRECISIONS if pv[0] in want)
    t_start = time.time()
    torch.backends.cuda.matmul.allow_tf32 = False
    gdn = Gdn(args.lib)
    if gdn.version < 600 and any(n == "FP16X3" for n, _ in PRECISIONS):
        # FP16X3 (= 5) is gdn 0.6.0's: an older library rejects it.
        print(f"(FP16X3 left out: gdn {gdn.version} predates it, 0.6.0)")
        PRECISIONS = tuple(pv for pv in PRECISIONS if pv[0] != "FP16X3")
    try:
        import fla
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule
        fla_version = getattr(fla, "__version__", "?")
    except Exception as e:  # noqa: BLE001  (report gdn alone)
        print(f"fla not importable: {e}")
        chunk_gated_delta_rule = fused_recurrent_gated_delta_rule = None
        fla_version = None
    v = gdn.version
    print(f"# gdn {v // 10000}.{v // 100 % 100}.{v % 100} vs fla {fla_version} on {torch.cuda.get_device_name()} "
          f"(torch {torch.__version__}), H_k {HK}, K = V = {K}; CUDA-graph replay, median"
          + ("; q and k L2-normalised in the kernels" if L2NORM else ""))

    # ---- the FP64 reference checked against the token loop, on the GPU (same code as the matrix)
    lens = (70, 0, 130, 1, 99)
    q, k, v, g, beta, h0 = inputs(sum(lens), 64, n_state=len(lens), seed=7)
    cu = torch.tensor([0, 70, 70, 200, 201, 300])
    ro, rs = reference_loop(q, k, v, g, beta, h0, cu)
    co, cs = reference(q, k, v, g, beta, h0, cu)
    print(f"\nFP64 reference check (chunked WY form vs token loop, varlen {lens}, H_v 64): "
          f"out {rel(co, ro):.1e}, state {rel(cs, rs):.1e}")

    # ---- the matrix of issue #7
    if args.shapes:
        shapes = []
        for item in args.shapes.split(","):
            hv, _, lens = item.partition(":")
            T, _, n = lens.partition("x")
            shapes.append((int(hv), (int(T),) * int(n or 1)))
    elif args.quick:
        shapes = [(48, (2048,)), (64, (8192,)), (64, (1024,) * 8)]
    else:
        shapes = [(hv, (T,)) for hv in (48, 64) for T in (512, 2048, 8192, 32768, 65536)]
        shapes += [(hv, (4096,) * 8) for hv in (48, 64)]
    print(f"\n## gdn precisions beside fla chunk_gated_delta_rule ({len(shapes)} shapes)\n")
    matrix(gdn, chunk_gated_delta_rule, shapes, args.err_max_tokens, args.fla_cp)
    print(f"\n(matrix: {time.time() - t_start:.0f} s so far)")
    if args.no_decode:
        return 0

    # ---- decode timing and error (H_v 48)
    hv = 48
    print(f"\n## decode: N sequences, one token each, H_v {hv}, bf16 q/k/v/out, f32 gates, FP32 state "
          "(graph replay; gdn auto = the sequential kernel)\n")
    print("| N | gdn | fla fused_recurrent | fla / gdn | gdn err (out / state) | fla err (out / state) |\n"
          "|---:|---:|---:|---:|---|---|")
    for N in ((1, 64) if args.quick else (1, 8, 64, 256, 1024)):
        q, k, v, g, beta, h0 = inputs(N, hv, n_state=N, seed=3)
        q, k, v = q.bfloat16(), k.bfloat16(), v.bfloat16()
        cu = torch.arange(N + 1)
        ro, rs = reference(q, k, v, g, beta, h0, cu)
        out = torch.empty(N, hv, V, dtype=torch.bfloat16, device=DEV)
        st = h0.clone()
        run = gdn.call_for(q, k, v, g, beta, out, st, "auto", max_seqlen=1)
        run()
        torch.cuda.synchronize()
        gdn_err = err_str(out, st, ro, rs)
        st.copy_(h0)
        t_gdn = graph_time_ms(run)[0]
        t_fla, fla_err = float("nan"), "-"
        if fused_recurrent_gated_delta_rule:
            qb, kb, vb, gb, bb = q[:, None], k[:, None], v[:, None], g[:, None], beta[:, None]
            o, s = fused_recurrent_gated_delta_rule(qb, kb, vb, g=gb, beta=bb, initial_state=h0.clone(),
                                                    output_final_state=True, use_qk_l2norm_in_kernel=L2NORM)
            torch.cuda.synchronize()
            fla_err = err_str(o[:, 0], s, ro, rs)
            t_fla = graph_time_ms(lambda: fused_recurrent_gated_delta_rule(
                qb, kb, vb, g=gb, beta=bb, initial_state=h0, output_final_state=True,
                use_qk_l2norm_in_kernel=L2NORM))[0]
        print(f"| {N} | {t_gdn * 1e3:.1f} us | {t_fla * 1e3:.1f} us | {t_fla / t_gdn:.2f}x | {gdn_err} | {fla_err} |")
        sys.stdout.flush()

    # ---- host time per call, no graph
    print("\n## host time per call (no graph), H_v 48, T = 2048, bf16\n\n| call | gdn | fla |\n|---|---:|---:|")
    q, k, v, g, beta, h0 = inputs(2048, hv, seed=4)
    q, k, v = q.bfloat16(), k.bfloat16(), v.bfloat16()
    out = torch.empty(2048, hv, V, dtype=torch.bfloat16, device=DEV)
    for pname, pval in (("FP32", 0), ("BF16", 3)):
        st = h0.clone()
        h_gdn = host_time_us(gdn.call_for(q, k, v, g, beta, out, st, "chunked", pval))
        h_fla = float("nan")
        if chunk_gated_delta_rule and pname == "BF16":
            h_fla = host_time_us(lambda: chunk_gated_delta_rule(q[None], k[None], v[None], g[None], beta[None],
                                                                initial_state=h0, output_final_state=True,
                                                                use_qk_l2norm_in_kernel=L2NORM))
        print(f"| prompt, gdn {pname} (chunked) | {h_gdn:.1f} us | {h_fla:.1f} us |")
    print(f"\n(total {time.time() - t_start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

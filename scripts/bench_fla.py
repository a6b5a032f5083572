#!/usr/bin/env python3
"""gdn beside flash-linear-attention (fla) on the same GPU, shapes and inputs.

Both are timed per call by CUDA-graph replay (torch.cuda.CUDAGraph, median of
repeats); both outputs are compared with an FP64 recurrence on the GPU
(max|diff|/max|ref| over outputs and final state). gdn is called through its C
ABI with ctypes (libgdn.so from a CUDA build); fla must be importable (its
wheels on PYTHONPATH). Shapes: H_k = 16, H_v = 48, K = V = 128, one sequence
(prompt) or N sequences of one token (decode), FP32 state.

usage: python3 scripts/bench_fla.py --lib build-cuda/libgdn.so.0.2.0 [--quick]
"""
import argparse
import ctypes
import math
import sys

import torch

HK, HV, K, V = 16, 48, 128, 128

# ---------------------------------------------------------------- the C ABI
# Mirrors include/gdn/gdn.h; the sizes are asserted below (measured with the C
# compiler on x86-64: caps 184, problem 96, tensors 240 bytes).


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


assert ctypes.sizeof(Caps) == 184 and ctypes.sizeof(Problem) == 96 and ctypes.sizeof(Tensors) == 240

DTYPE = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
ALGO = {"auto": 0, "sequential": 1, "chunked": 2}


class Gdn:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.lib.gdn_last_error.restype = ctypes.c_char_p
        self.caps = Caps()
        self.caps.struct_size = ctypes.sizeof(Caps)
        self.check(self.lib.gdn_probe(1, torch.cuda.current_device(), ctypes.byref(self.caps)), "gdn_probe")

    def check(self, status, what):
        if status != 0:
            raise RuntimeError(f"{what}: status {status}: {self.lib.gdn_last_error().decode()}")

    def call_for(self, q, k, v, g, beta, out, state, algo, num_seqs=1, max_seqlen=0):
        """A closure that runs one gdn call on the current stream (graph-capturable)."""
        p = Problem()
        p.struct_size = ctypes.sizeof(Problem)
        p.num_seqs = num_seqs
        p.num_tokens = q.shape[0]
        p.max_seqlen = max_seqlen
        p.num_k_heads, p.num_v_heads, p.head_dim_k, p.head_dim_v = HK, HV, K, V
        p.input_dtype = DTYPE[q.dtype]
        p.gate_dtype = DTYPE[g.dtype]
        p.output_dtype = DTYPE[out.dtype]
        p.num_state_slots = state.shape[0]
        p.algorithm = ALGO[algo]
        t = Tensors()
        t.struct_size = ctypes.sizeof(Tensors)
        for name, x in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta), ("out", out)):
            assert x.is_contiguous()
            setattr(t, name, x.data_ptr())
        t.state = state.data_ptr()
        size = ctypes.c_size_t(0)
        self.check(self.lib.gdn_workspace_size(ctypes.byref(self.caps), ctypes.byref(p), ctypes.byref(size)),
                   "gdn_workspace_size")
        ws = torch.empty(max(size.value, 256), dtype=torch.uint8, device="cuda")
        keep = (p, t, ws)

        def run():
            stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
            status = self.lib.gdn_chunked_recurrence(ctypes.byref(self.caps), ctypes.byref(keep[0]),
                                                     ctypes.byref(keep[1]), ctypes.c_void_p(keep[2].data_ptr()),
                                                     ctypes.c_size_t(keep[2].numel()), stream)
            self.check(status, "gdn_chunked_recurrence")
        return run


# ------------------------------------------------------------------ helpers

def inputs(T, dtype, n_state=1, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(T, HK, K, device="cuda", generator=gen)
    k = torch.nn.functional.normalize(torch.randn(T, HK, K, device="cuda", generator=gen), dim=-1)
    v = torch.randn(T, HV, V, device="cuda", generator=gen)
    g = -0.3 + 0.29 * torch.rand(T, HV, device="cuda", generator=gen)
    beta = torch.rand(T, HV, device="cuda", generator=gen)
    h0 = 0.5 * torch.randn(n_state, HV, K, V, device="cuda", generator=gen)
    return q.to(dtype), k.to(dtype), v.to(dtype), g, beta, h0


def reference(q, k, v, g, beta, h0, seqs=1):
    """FP64 recurrence. Prompt: one sequence of T tokens; decode: T sequences of one token."""
    scale = 1.0 / math.sqrt(K)
    qd, kd, vd, gd, bd = (x.double() for x in (q, k, v, g, beta))
    rep = HV // HK
    qd = qd.repeat_interleave(rep, dim=1) * scale  # grouped: value head h reads key head h // rep
    kd = kd.repeat_interleave(rep, dim=1)
    if seqs > 1:  # decode: every sequence one step from its own state
        S = h0.double() * torch.exp(gd)[:, :, None, None]
        d = bd[:, :, None] * (vd - torch.einsum("nhk,nhkv->nhv", kd, S))
        S = S + kd[:, :, :, None] * d[:, :, None, :]
        return torch.einsum("nhk,nhkv->nhv", qd, S), S
    S = h0[0].double().clone()
    out = torch.empty(q.shape[0], HV, V, dtype=torch.float64, device="cuda")
    for t in range(q.shape[0]):
        S *= torch.exp(gd[t])[:, None, None]
        d = bd[t][:, None] * (vd[t] - torch.einsum("hk,hkv->hv", kd[t], S))
        S += kd[t][:, :, None] * d[:, None, :]
        out[t] = torch.einsum("hk,hkv->hv", qd[t], S)
    return out, S[None]


def rel(got, want):
    return ((got.double() - want).abs().max() / want.abs().max()).item()


def graph_time_ms(fn, reps=7, inner=None):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    graph.replay()
    torch.cuda.synchronize()
    e0.record()
    graph.replay()
    e1.record()
    torch.cuda.synchronize()
    one = e0.elapsed_time(e1)
    inner = inner or max(2, min(1000, int(20.0 / max(one, 1e-3))))
    times = []
    for _ in range(reps):
        e0.record()
        for _ in range(inner):
            graph.replay()
        e1.record()
        torch.cuda.synchronize()
        times.append(e0.elapsed_time(e1) / inner)
    times.sort()
    return times[len(times) // 2]


def host_time_us(fn, calls=100):
    import time
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    gdn = Gdn(args.lib)
    try:
        import fla
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule
        fla_version = getattr(fla, "__version__", "?")
    except Exception as e:  # report gdn alone
        print(f"fla not importable: {e}")
        chunk_gated_delta_rule = fused_recurrent_gated_delta_rule = None
        fla_version = None
    print(f"# gdn vs fla {fla_version} on {torch.cuda.get_device_name()} (torch {torch.__version__}), "
          f"Hk {HK}, Hv {HV}, K = V = {K}; CUDA-graph replay, median")

    # ---- errors against FP64 at T = 4099 (as METHOD.md's anchors)
    T = 1024 if args.quick else 4099
    print(f"\n## error vs FP64, T = {T}, one sequence: max|diff|/max|ref| (out / final state)\n")
    print("| inputs | gdn sequential | gdn chunked | fla chunk |\n|---|---|---|---|")
    for dtype in (torch.bfloat16, torch.float32):
        q, k, v, g, beta, h0 = inputs(T, dtype, seed=1)
        ro, rs = reference(q, k, v, g, beta, h0)
        row = [str(dtype).split(".")[-1]]
        for algo in ("sequential", "chunked"):
            out = torch.empty(T, HV, V, dtype=torch.float32, device="cuda")  # f32 out: the arithmetic's error
            st = h0.clone()
            gdn.call_for(q, k, v, g, beta, out, st, algo)()
            torch.cuda.synchronize()
            row.append(f"{rel(out, ro):.2e} / {rel(st, rs):.2e}")
        if chunk_gated_delta_rule:
            o, s = chunk_gated_delta_rule(q[None], k[None], v[None], g[None], beta[None], initial_state=h0.clone(),
                                          output_final_state=True)
            torch.cuda.synchronize()
            row.append(f"{rel(o[0].float(), ro):.2e} / {rel(s, rs):.2e} (out {str(o.dtype).split('.')[-1]})")
        print("| " + " | ".join(row) + " |")

    # ---- prompt timing
    print("\n## prompt: time per call (graph replay), one sequence\n")
    print("| T | inputs | gdn chunked | fla chunk | fla / gdn chunked |\n|---:|---|---:|---:|---:|")
    lengths = (128, 2048) if args.quick else (128, 512, 2048, 8192, 32768)
    for dtype in (torch.bfloat16, torch.float32):
        for T in lengths:
            q, k, v, g, beta, h0 = inputs(T, dtype, seed=2)
            out = torch.empty(T, HV, V, dtype=dtype, device="cuda")
            st = h0.clone()
            t_chk = graph_time_ms(gdn.call_for(q, k, v, g, beta, out, st, "chunked"))
            t_fla = float("nan")
            if chunk_gated_delta_rule:
                qb, kb, vb, gb, bb = q[None], k[None], v[None], g[None], beta[None]
                t_fla = graph_time_ms(lambda: chunk_gated_delta_rule(qb, kb, vb, gb, bb, initial_state=h0,
                                                                     output_final_state=True))
            print(f"| {T} | {str(dtype).split('.')[-1]} | {t_chk:.4f} ms | {t_fla:.4f} ms | "
                  f"{t_fla / t_chk:.2f}x |")
            sys.stdout.flush()

    # ---- decode timing and error
    print("\n## decode: N sequences, one token each, bf16 q/k/v/out, f32 gates, FP32 state (graph replay)\n")
    print("| N | gdn | fla fused_recurrent | fla / gdn | gdn err (out / state) | fla err (out / state) |\n"
          "|---:|---:|---:|---:|---|---|")
    for N in ((1, 64) if args.quick else (1, 8, 64, 256, 1024)):
        q, k, v, g, beta, h0 = inputs(N, torch.bfloat16, n_state=N, seed=3)
        ro, rs = reference(q, k, v, g, beta, h0, seqs=N)
        out = torch.empty(N, HV, V, dtype=torch.bfloat16, device="cuda")
        st = h0.clone()
        run = gdn.call_for(q, k, v, g, beta, out, st, "auto", num_seqs=N, max_seqlen=1)
        run()
        torch.cuda.synchronize()
        gdn_err = f"{rel(out.float(), ro):.2e} / {rel(st, rs):.2e}"
        st.copy_(h0)
        t_gdn = graph_time_ms(run)
        t_fla, fla_err = float("nan"), "-"
        if fused_recurrent_gated_delta_rule:
            qb, kb, vb, gb, bb = q[:, None], k[:, None], v[:, None], g[:, None], beta[:, None]
            o, s = fused_recurrent_gated_delta_rule(qb, kb, vb, g=gb, beta=bb, initial_state=h0.clone(),
                                                    output_final_state=True)
            torch.cuda.synchronize()
            fla_err = f"{rel(o[:, 0].float(), ro):.2e} / {rel(s, rs):.2e}"
            t_fla = graph_time_ms(lambda: fused_recurrent_gated_delta_rule(qb, kb, vb, g=gb, beta=bb, initial_state=h0,
                                                                           output_final_state=True))
        print(f"| {N} | {t_gdn * 1e3:.1f} us | {t_fla * 1e3:.1f} us | {t_fla / t_gdn:.2f}x | {gdn_err} | {fla_err} |")
        sys.stdout.flush()

    # ---- host time per call, no graph
    print("\n## host time per call (no graph)\n\n| call | gdn | fla |\n|---|---:|---:|")
    q, k, v, g, beta, h0 = inputs(2048, torch.bfloat16, seed=4)
    out = torch.empty(2048, HV, V, dtype=torch.bfloat16, device="cuda")
    st = h0.clone()
    h_gdn = host_time_us(gdn.call_for(q, k, v, g, beta, out, st, "chunked"))
    h_fla = float("nan")
    if chunk_gated_delta_rule:
        h_fla = host_time_us(lambda: chunk_gated_delta_rule(q[None], k[None], v[None], g[None], beta[None],
                                                            initial_state=h0, output_final_state=True))
    print(f"| prompt T = 2048 (chunked) | {h_gdn:.1f} us | {h_fla:.1f} us |")


if __name__ == "__main__":
    main()

// The HIP backend's kernels. One source, three builds: HIP device code per gfx
// target (src/hip/kernels.hip), nvcc against the WMMA emulation (the H200
// test), and host fibers (the CI test); arch.hpp is the only difference.
//
//   gdn_hip_sequential_k{K}_v{V}  token by token, FP32, every feature; any gfx
//                                 target, wave32 or wave64. Decode and fallback.
//   gdn_hip_chunk_prep            gfx11: T·diag(β), P and γ of every chunk of a
//                                 super-block (they do not depend on the state)
//   gdn_hip_chunk_scan            gfx11: walks the chunks carrying the state in
//                                 WMMA accumulators; gated RMSNorm fused
//   gdn_hip_wmma_tile             one 16x16x16 product (tests the layout)
//
// Formulas of the optional features are those of src/common/cpu_kernels.hpp.
#pragma once

#include "arch.hpp"
#include "params.hpp"

namespace gdn::hip {

// ------------------------------------------------------------ elements

GDN_DEVICE float load_scalar(const void* base, int32_t dtype, int64_t i) {
    if (dtype == GDN_DTYPE_F32) return static_cast<const float*>(base)[i];
    const uint32_t bits = static_cast<const uint16_t*>(base)[i];
    return dtype == GDN_DTYPE_F16 ? arch::half_value(bits) : arch::bf16_value(bits);
}

GDN_DEVICE void store_scalar(void* base, int32_t dtype, int64_t i, float x) {
    if (dtype == GDN_DTYPE_F32) {
        static_cast<float*>(base)[i] = x;
    } else {
        const uint32_t bits = dtype == GDN_DTYPE_F16 ? arch::half_bits(x) : arch::bf16_bits(x);
        static_cast<uint16_t*>(base)[i] = static_cast<uint16_t>(bits);
    }
}

// base + offset elements of dtype.
GDN_DEVICE const void* element_ptr(const void* base, int32_t dtype, int64_t offset) {
    return static_cast<const char*>(base) + offset * (dtype == GDN_DTYPE_F32 ? 4 : 2);
}
GDN_DEVICE void* element_ptr(void* base, int32_t dtype, int64_t offset) {
    return static_cast<char*>(base) + offset * (dtype == GDN_DTYPE_F32 ? 4 : 2);
}

// Eight consecutive elements of a row, as loaded (16-byte aligned): one
// 16-byte vector for f16/bf16, two for f32.
struct Raw8 {
    arch::U32x4 lo, hi;
};

GDN_DEVICE Raw8 zero_raw8() {
    Raw8 r;
    r.lo = arch::make_u32x4(0, 0, 0, 0);
    r.hi = r.lo;
    return r;
}

// The same with the element width fixed at compile time (no branch between
// the loads: a branch join makes the compiler wait for loads in flight).
template <bool kF32>
GDN_DEVICE Raw8 load_raw8_fixed(const void* base, int32_t offset) {
    Raw8 r;
    if (kF32) {
        const float* ptr = static_cast<const float*>(base) + offset;
        r.lo = arch::load16(ptr);
        r.hi = arch::load16(ptr + 4);
    } else {
        r.lo = arch::load16(static_cast<const uint16_t*>(base) + offset);
        r.hi = r.lo;
    }
    return r;
}

GDN_DEVICE Raw8 load_raw8(const void* base, int32_t dtype, int64_t offset) {
    Raw8 r;
    if (dtype == GDN_DTYPE_F32) {
        const float* p = static_cast<const float*>(base) + offset;
        r.lo = arch::load16(p);
        r.hi = arch::load16(p + 4);
    } else {
        r.lo = arch::load16(static_cast<const uint16_t*>(base) + offset);
        r.hi = arch::make_u32x4(0, 0, 0, 0);
    }
    return r;
}

GDN_DEVICE void unpack_raw8(const Raw8& r, int32_t dtype, float x[8]) {
    if (dtype == GDN_DTYPE_F32) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            x[j] = arch::as_float(arch::word(r.lo, j));
            x[4 + j] = arch::as_float(arch::word(r.hi, j));
        }
    } else if (dtype == GDN_DTYPE_F16) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            x[2 * j] = arch::lo_half(arch::word(r.lo, j));
            x[2 * j + 1] = arch::hi_half(arch::word(r.lo, j));
        }
    } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            x[2 * j] = arch::bf16_value(arch::word(r.lo, j) & 0xffffu);
            x[2 * j + 1] = arch::bf16_value(arch::word(r.lo, j) >> 16);
        }
    }
}

// ------------------------------------------------------------ features

GDN_DEVICE float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
GDN_DEVICE float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
GDN_DEVICE float silu(float z) { return z / (1.0f + expf(-z)); }

// g of (token, value head h); neg_a = −exp(A_log[h]) with GDN_FLAG_GATE_FROM_RAW.
GDN_DEVICE float gate_g(const KernelParams& p, float raw, float neg_a, float dt_bias) {
    return (p.flags & GDN_FLAG_GATE_FROM_RAW) ? neg_a * softplus(raw + dt_bias) : raw;
}
GDN_DEVICE float gate_beta(const KernelParams& p, float raw) {
    return (p.flags & GDN_FLAG_BETA_FROM_LOGITS) ? sigmoid(raw) : raw;
}

// ------------------------------------------------------------ sequences

struct SeqInfo {
    int64_t bos;     // first token
    int64_t len;     // tokens (may be 0)
    int32_t slot;    // state slot; negative = padding (nothing read or written)
    bool from_zero;  // S0 = 0 (the slot is written, never read)
};

GDN_DEVICE SeqInfo sequence_info(const KernelParams& p, int32_t s) {
    SeqInfo si;
    if (p.cu_seqlens) {
        si.bos = p.cu_seqlens[s];
        si.len = int64_t(p.cu_seqlens[s + 1]) - si.bos;
    } else {
        const int64_t equal = p.num_tokens / p.num_seqs;
        si.bos = int64_t(s) * equal;
        si.len = equal;
    }
    si.slot = p.state_indices ? p.state_indices[s] : s;
    si.from_zero = p.start_from_zero != nullptr && p.start_from_zero[s] != 0;
    return si;
}

GDN_DEVICE int32_t key_head_of(const KernelParams& p, int32_t h) {
    return p.head_mapping == GDN_HEADS_GROUPED ? h / p.group : h % p.num_k_heads;
}

// ------------------------------------------------------------ sequential

// Block per (sequence, value head), 256 threads: KSPLIT = 256 / V adjacent
// threads share value column v, each holding ROWS = K / KSPLIT state rows in
// registers. Per token: k and q go through LDS (double-buffered, so one
// barrier per token), Sᵀk and Sᵀq are summed over the KSPLIT threads by
// shuffles; the output norm adds one block reduction. The next token's
// inputs are loaded while this one computes. Independent of the wave size.
template <int K, int V>
GDN_DEVICE void sequential_body(const KernelParams& p) {
    constexpr int NT = kSequentialThreads;
    constexpr int KSPLIT = NT / V;
    constexpr int ROWS = K / KSPLIT;
    static_assert(NT % V == 0 && K % KSPLIT == 0 && 2 * K <= NT, "unsupported head dims");
    GDN_SHARED float kq_s[2][2][K];    // [token parity][k, q][K]
    GDN_SHARED float red_s[2][NT / 32];  // [token parity][wave]: Σ o² for the output norm

    const int tid = int(threadIdx.x);
    const int h = int(blockIdx.x % unsigned(p.num_v_heads));
    const int s = int(blockIdx.x / unsigned(p.num_v_heads));
    const SeqInfo seq = sequence_info(p, s);
    if (seq.slot < 0) return;  // padding: the whole block leaves
    const int kh = key_head_of(p, h);
    const int vcol = tid / KSPLIT;
    const int part = tid % KSPLIT;
    const int r0 = part * ROWS;
    const bool l2norm = (p.flags & GDN_FLAG_QK_L2NORM) != 0;
    const bool out_norm = (p.flags & GDN_FLAG_OUTPUT_NORM) != 0;
    const bool raw_gate = (p.flags & GDN_FLAG_GATE_FROM_RAW) != 0;
    const int32_t dt = p.input_dtype;

    // Row r0 + j of column vcol: base + j * row_step in either layout.
    const bool kv_layout = p.state_layout == GDN_STATE_KV;
    float* state = p.state + int64_t(seq.slot) * p.state_slot_stride + int64_t(h) * K * V +
                   (kv_layout ? r0 * V + vcol : vcol * K + r0);
    const int row_step = kv_layout ? V : 1;
    float S[ROWS];
#pragma unroll
    for (int j = 0; j < ROWS; ++j) S[j] = seq.from_zero ? 0.0f : state[j * row_step];

    const float norm_w = out_norm ? p.norm_weight[vcol] : 0.0f;
    const float neg_a = raw_gate ? -expf(p.A_log[h]) : 0.0f;
    const float dt_bias = raw_gate ? p.dt_bias[h] : 0.0f;

    // Threads [0, K) stage k, [K, 2K) stage q; each thread loads its own
    // column's v and z and the token's g and β.
    float next_kq = 0.0f, next_v = 0.0f, next_z = 0.0f, next_g = 0.0f, next_b = 0.0f;
    auto fetch = [&](int64_t tok) {
        if (tid < K)
            next_kq = load_scalar(p.k, dt, tok * p.k_token_stride + kh * p.k_head_stride + tid);
        else if (tid < 2 * K)
            next_kq = load_scalar(p.q, dt, tok * p.q_token_stride + kh * p.q_head_stride + tid - K);
        next_v = load_scalar(p.v, dt, tok * p.v_token_stride + h * p.v_head_stride + vcol);
        if (out_norm) next_z = load_scalar(p.z, dt, tok * p.z_token_stride + h * p.z_head_stride + vcol);
        next_g = load_scalar(p.g, p.gate_dtype, tok * p.g_token_stride + h * p.g_head_stride);
        next_b = load_scalar(p.beta, p.gate_dtype, tok * p.beta_token_stride + h * p.beta_head_stride);
    };

    if (seq.len > 0) fetch(seq.bos);
    for (int64_t i = 0; i < seq.len; ++i) {
        const int par = int(i & 1);
        if (tid < 2 * K) kq_s[par][tid / K][tid % K] = next_kq;
        const float v_t = next_v, z_t = next_z;
        const float g = gate_g(p, next_g, neg_a, dt_bias);
        const float beta = gate_beta(p, next_b);
        arch::block_barrier();
        if (i + 1 < seq.len) fetch(seq.bos + i + 1);

        // Sᵀk (and Σk², Σq²) over this thread's rows, then over the column's threads.
        float sk = 0.0f, kk = 0.0f, qq = 0.0f;
#pragma unroll
        for (int j = 0; j < ROWS; ++j) {
            const float kj = kq_s[par][0][r0 + j];
            sk = fmaf(S[j], kj, sk);
            if (l2norm) {
                kk = fmaf(kj, kj, kk);
                qq = fmaf(kq_s[par][1][r0 + j], kq_s[par][1][r0 + j], qq);
            }
        }
#pragma unroll
        for (int m = 1; m < KSPLIT; m <<= 1) {
            sk += arch::shfl_xor(sk, m);
            if (l2norm) {
                kk += arch::shfl_xor(kk, m);
                qq += arch::shfl_xor(qq, m);
            }
        }
        // k̂ = k / sqrt(Σk² + eps); q̂ = q · scale / sqrt(Σq² + eps)
        const float k_scale = l2norm ? 1.0f / sqrtf(kk + p.l2norm_eps) : 1.0f;
        const float q_scale = l2norm ? p.scale / sqrtf(qq + p.l2norm_eps) : p.scale;

        // d = β (v − e^g Sᵀk̂);  S = e^g S + k̂ dᵀ;  o = Sᵀ q̂
        const float decay = expf(g);
        const float d = beta * (v_t - decay * (sk * k_scale));
        const float kd = d * k_scale;
        float o = 0.0f;
#pragma unroll
        for (int j = 0; j < ROWS; ++j) {
            S[j] = fmaf(kq_s[par][0][r0 + j], kd, decay * S[j]);
            o = fmaf(S[j], kq_s[par][1][r0 + j], o);
        }
#pragma unroll
        for (int m = 1; m < KSPLIT; m <<= 1) o += arch::shfl_xor(o, m);
        o *= q_scale;

        if (out_norm) {  // out = o / sqrt(mean(o²) + eps) · w · silu(z)
            const int ws = arch::wave_size();
            float ss = part == 0 ? o * o : 0.0f;
            for (int m = 1; m < ws; m <<= 1) ss += arch::shfl_xor(ss, m);
            if (tid % ws == 0) red_s[par][tid / ws] = ss;
            arch::block_barrier();
            float total = 0.0f;
            for (int w = 0; w < NT / ws; ++w) total += red_s[par][w];
            const float inv_rms = 1.0f / sqrtf(total / float(V) + p.norm_eps);
            o = o * inv_rms * norm_w * silu(z_t);
        }
        if (part == 0)
            store_scalar(p.out, p.output_dtype,
                         (seq.bos + i) * p.out_token_stride + h * p.out_head_stride + vcol, o);
        // GDN_FLAG_TOKEN_STATES: the state after this token, to the slot it names
        // (with GDN_FLAG_BLOCK_STATES only a block's last token and the sequence's).
        if (p.token_state_indices && (!(p.flags & GDN_FLAG_BLOCK_STATES) ||
                                      (i + 1) % GDN_STATE_BLOCK == 0 || i == seq.len - 1)) {
            const int32_t ts = p.token_state_indices[seq.bos + i];
            if (ts >= 0) {
                float* dst = state + (int64_t(ts) - seq.slot) * p.state_slot_stride;
#pragma unroll
                for (int j = 0; j < ROWS; ++j) dst[j * row_step] = S[j];
            }
        }
    }
    if (p.token_state_indices) return;  // the own slot is only read
#pragma unroll
    for (int j = 0; j < ROWS; ++j) state[j * row_step] = S[j];
}

// ------------------------------------------------------------ chunk prep

// Block per (sequence, chunk of the super-block, key head); 64 or 128
// threads. k̂ and q̂ of the chunk go to LDS as FP16 rows; wave 0 forms k̂·k̂ᵀ
// and wave 1 q̂·k̂ᵀ (8 WMMAs each, once per key head); then one wave per value
// head of the group: γ, A = β_t e^{γ_t−γ_i} k̂_t·k̂_i (i < t), T = (I + A)^{-1}
// by forward substitution (lane j: column j), and writes T·diag(β), P, γ.
GDN_DEVICE void chunk_prep_body(const KernelParams& p) {
#if GDN_HIP_WMMA
    constexpr int C = kChunk;
    constexpr int K = kChunkHeadDim;
    constexpr int KW = (K + 8) / 2;  // words per FP16 row; 8 halfs of padding spread the LDS banks
    constexpr int MAXW = kPrepMaxThreads / 32;
    GDN_SHARED uint32_t k_s[C][KW] GDN_ALIGN16;
    GDN_SHARED uint32_t q_s[C][KW] GDN_ALIGN16;
    GDN_SHARED float kk_s[C][C + 1];
    GDN_SHARED float qk_s[C][C + 1];
    GDN_SHARED float a_s[MAXW][C][C + 1];
    GDN_SHARED float g_s[MAXW][C];
    GDN_SHARED float beta_s[MAXW][C];
    GDN_SHARED float gam_s[MAXW][C];

    const int tid = int(threadIdx.x);
    const int nthreads = p.prep_threads;
    const int wave = tid >> 5;
    const int lane = tid & 31;
    const int col = lane & 15;
    const int hi = lane >> 4;
    unsigned b = blockIdx.x;
    const int c = int(b % unsigned(p.sb_chunks));
    b /= unsigned(p.sb_chunks);
    const int kh = int(b % unsigned(p.num_k_heads));
    const int s = int(b / unsigned(p.num_k_heads));
    const SeqInfo seq = sequence_info(p, s);
    if (seq.slot < 0) return;
    const int64_t pos = int64_t(p.sb_first_chunk + c) * C;
    if (seq.len <= pos) return;  // the sequence has no such chunk
    const int n = seq.len - pos < C ? int(seq.len - pos) : C;
    const int64_t slot = int64_t(s) * p.sb_chunks + c;
    const int32_t dt = p.input_dtype;
    const bool l2norm = (p.flags & GDN_FLAG_QK_L2NORM) != 0;

    // k̂, q̂·scale as FP16 rows: 16 rows x 8 segments of 16 elements; the 8
    // segments of a row are 8 adjacent lanes (for the norm's shuffles).
    for (int item = tid; item < C * 8; item += nthreads) {
        const int row = item >> 3;
        const int e0 = (item & 7) * 16;
        float kx[16], qx[16];
        if (row < n) {
            const int64_t tok = seq.bos + pos + row;
            const int64_t ko = tok * p.k_token_stride + kh * p.k_head_stride + e0;
            const int64_t qo = tok * p.q_token_stride + kh * p.q_head_stride + e0;
            unpack_raw8(load_raw8(p.k, dt, ko), dt, kx);
            unpack_raw8(load_raw8(p.k, dt, ko + 8), dt, kx + 8);
            unpack_raw8(load_raw8(p.q, dt, qo), dt, qx);
            unpack_raw8(load_raw8(p.q, dt, qo + 8), dt, qx + 8);
        } else {
#pragma unroll
            for (int j = 0; j < 16; ++j) kx[j] = qx[j] = 0.0f;
        }
        float k_scale = 1.0f, q_scale = p.scale;
        if (l2norm) {
            float kk = 0.0f, qq = 0.0f;
#pragma unroll
            for (int j = 0; j < 16; ++j) {
                kk = fmaf(kx[j], kx[j], kk);
                qq = fmaf(qx[j], qx[j], qq);
            }
#pragma unroll
            for (int m = 1; m < 8; m <<= 1) {
                kk += arch::shfl_xor(kk, m);
                qq += arch::shfl_xor(qq, m);
            }
            k_scale = 1.0f / sqrtf(kk + p.l2norm_eps);
            q_scale = p.scale / sqrtf(qq + p.l2norm_eps);
        }
        uint32_t kw[8], qw[8];
#pragma unroll
        for (int w = 0; w < 8; ++w) {
            kw[w] = arch::pack_half2(kx[2 * w] * k_scale, kx[2 * w + 1] * k_scale);
            qw[w] = arch::pack_half2(qx[2 * w] * q_scale, qx[2 * w + 1] * q_scale);
        }
        arch::store16(&k_s[row][e0 / 2], arch::make_u32x4(kw[0], kw[1], kw[2], kw[3]));
        arch::store16(&k_s[row][e0 / 2 + 4], arch::make_u32x4(kw[4], kw[5], kw[6], kw[7]));
        arch::store16(&q_s[row][e0 / 2], arch::make_u32x4(qw[0], qw[1], qw[2], qw[3]));
        arch::store16(&q_s[row][e0 / 2 + 4], arch::make_u32x4(qw[4], qw[5], qw[6], qw[7]));
    }
    arch::block_barrier();

    // k̂·k̂ᵀ (wave 0) and q̂·k̂ᵀ (wave 1): A = rows of k̂ or q̂; B = columns of
    // k̂ᵀ, which are rows of k̂ again.
    if (wave < 2) {
        arch::Acc8 acc = {};
#pragma unroll
        for (int kb = 0; kb < K / 16; ++kb) {
            const arch::Frag16 a = arch::load_frag(wave == 0 ? &k_s[col][kb * 8] : &q_s[col][kb * 8]);
            const arch::Frag16 bk = arch::load_frag(&k_s[col][kb * 8]);
            acc = arch::wmma(a, bk, acc);
        }
#pragma unroll
        for (int r = 0; r < 8; ++r) {
            if (wave == 0)
                kk_s[2 * r + hi][col] = acc.x[r];
            else
                qk_s[2 * r + hi][col] = acc.x[r];
        }
    }
    arch::block_barrier();

    const int waves = nthreads >> 5;
    const bool raw_gate = (p.flags & GDN_FLAG_GATE_FROM_RAW) != 0;
    for (int m = wave; m < p.group; m += waves) {
        const int h = p.head_mapping == GDN_HEADS_GROUPED ? kh * p.group + m : kh + m * p.num_k_heads;
        const int64_t ws_index = slot * p.num_v_heads + h;
        // g and β of token `col` (lanes 16-31 repeat lanes 0-15); padding: 0.
        float g = 0.0f, beta = 0.0f;
        if (col < n) {
            const int64_t tok = seq.bos + pos + col;
            const float neg_a = raw_gate ? -expf(p.A_log[h]) : 0.0f;
            const float dt_bias = raw_gate ? p.dt_bias[h] : 0.0f;
            g = gate_g(p, load_scalar(p.g, p.gate_dtype, tok * p.g_token_stride + h * p.g_head_stride),
                       neg_a, dt_bias);
            beta = gate_beta(p, load_scalar(p.beta, p.gate_dtype,
                                            tok * p.beta_token_stride + h * p.beta_head_stride));
        }
        if (lane < 16) {
            g_s[wave][col] = g;
            beta_s[wave][col] = beta;
        }
        arch::wave_sync();
        // γ_i = g_0 + ... + g_i, summed in token order.
        float gam = 0.0f;
#pragma unroll
        for (int j = 0; j < C; ++j)
            if (j <= col) gam += g_s[wave][j];
        if (lane < 16) gam_s[wave][col] = gam;
        arch::wave_sync();

        // A (strictly lower) into LDS; P (lower, diagonal included) to the workspace.
        uint16_t* P = p.ws_P + ws_index * (C * C);
        for (int e = lane; e < C * C; e += 32) {
            const int t = e >> 4, i = e & 15;
            const float decay = i <= t ? expf(gam_s[wave][t] - gam_s[wave][i]) : 0.0f;
            a_s[wave][t][i] = i < t ? beta_s[wave][t] * decay * kk_s[t][i] : 0.0f;
            P[e] = static_cast<uint16_t>(arch::half_bits(decay * qk_s[t][i]));
        }
        arch::wave_sync();

        // T = (I + A)^{-1}: T[t][j] = δ_tj − Σ_{i<t} A[t][i] T[i][j], column j = col.
        float tcol[C];
#pragma unroll
        for (int t = 0; t < C; ++t) {
            float acc = t == col ? 1.0f : 0.0f;
#pragma unroll
            for (int i = 0; i < t; ++i) acc = fmaf(-a_s[wave][t][i], tcol[i], acc);
            tcol[t] = acc;
        }
        if (lane < 16) {
            const float beta_col = beta_s[wave][col];
            uint16_t* T = p.ws_T + ws_index * (C * C);
#pragma unroll
            for (int t = 0; t < C; ++t)
                T[t * C + col] = static_cast<uint16_t>(arch::half_bits(tcol[t] * beta_col));
            p.ws_gamma[ws_index * (2 * C) + col] = gam;
            p.ws_gamma[ws_index * (2 * C) + C + col] = expf(gam_s[wave][C - 1] - gam);
        }
        arch::wave_sync();  // the wave's LDS rows are reused by its next value head
    }
#else
    (void)p;
    arch::trap();
#endif
}

// ------------------------------------------------------------ chunk scan

// Block per (sequence, value head), 8 waves; wave w owns value columns
// [16w, 16w + 16) and holds S0[0:128][its columns] as 8 accumulators. Per
// chunk (26 WMMAs):
//   U = k̂·S0, W = q̂·S0                         8 + 8
//   D = T·diag(β)·(v − e^γ ⊙ U)                 1
//   o = e^γ ⊙ W + P·D                           1
//   S = e^{γ_last} S0 + (e^{γ_last−γ} ⊙ k̂)ᵀ·D    8
// then the gated RMSNorm over the 8 waves' columns. Each thread stages one
// token row's 8 elements of k, q, v, z; the next chunk's rows (and the
// prep's T, P, γ) are loaded while this one computes, and the barriers wait
// for LDS only, so those loads stay in flight.
template <bool kF32Inputs>
GDN_DEVICE void chunk_scan_body(const KernelParams& p) {
#if GDN_HIP_WMMA
    constexpr int C = kChunk;
    constexpr int K = kChunkHeadDim;
    constexpr int V = kChunkHeadDim;
    constexpr int KW = (K + 8) / 2;  // words per FP16 row of k̂ / q̂
    constexpr int TH = C + 8;        // halfs per row of the transposed k̃ (48 bytes)
    constexpr int VP = V + 4;
    static_assert(GDN_STATE_BLOCK % C == 0, "block ends must be chunk ends");
    GDN_SHARED uint32_t k_s[C][KW] GDN_ALIGN16;     // k̂ rows, FP16
    GDN_SHARED uint32_t q_s[C][KW] GDN_ALIGN16;     // q̂·scale rows, FP16
    GDN_SHARED uint16_t kt_s[K][TH] GDN_ALIGN16;    // e^{γ_last−γ_i} k̂_i, transposed, FP16
    GDN_SHARED float v_s[C][VP] GDN_ALIGN16;
    GDN_SHARED float gate_s[2][C][VP] GDN_ALIGN16;  // w ⊙ silu(z), by chunk parity
    GDN_SHARED float gam_s[C];
    GDN_SHARED float red_s[2][8][C];                // Σ o² per wave and token, by parity

    const int tid = int(threadIdx.x);
    const int wave = tid >> 5;
    const int lane = tid & 31;
    const int col = lane & 15;
    const int hi = lane >> 4;
    const int vcol = wave * 16 + col;
    const int h = int(blockIdx.x % unsigned(p.num_v_heads));
    const int s = int(blockIdx.x / unsigned(p.num_v_heads));
    const SeqInfo seq = sequence_info(p, s);
    if (seq.slot < 0) return;
    const int64_t pos0 = int64_t(p.sb_first_chunk) * C;
    if (pos0 > 0 && seq.len <= pos0) return;  // finished in an earlier super-block
    const int64_t chunks_left = (seq.len - pos0 + C - 1) / C;
    const int nch = chunks_left < p.sb_chunks ? int(chunks_left) : p.sb_chunks;
    const int kh = key_head_of(p, h);
    const int32_t dt = p.input_dtype;
    const bool l2norm = (p.flags & GDN_FLAG_QK_L2NORM) != 0;
    const bool out_norm = (p.flags & GDN_FLAG_OUTPUT_NORM) != 0;

    // This lane's state elements (k = 16kb + 2r + hi, v = vcol) sit at
    // compile-time offsets from one base in either layout.
    const bool kv_layout = p.state_layout == GDN_STATE_KV;
    const int64_t lane_offset = int64_t(h) * K * V + (kv_layout ? hi * V + vcol : vcol * K + hi);
    float* state = p.state + int64_t(seq.slot) * p.state_slot_stride + lane_offset;
    // GDN_FLAG_TOKEN_STATES (with GDN_FLAG_BLOCK_STATES here): the own slot is
    // only read; the state of a sequence longer than a super-block crosses
    // them through the workspace, in the carry of its rank among such
    // sequences (launch.hpp: carried_states).
    const bool token_states = p.token_state_indices != nullptr;
    float* carry = nullptr;
    const int64_t sb_tokens = int64_t(p.sb_chunks) * C;
    if (token_states && seq.len > sb_tokens) {
        int64_t rank = s;  // equal lengths: every sequence is that long
        if (p.cu_seqlens) {
            rank = 0;
            int64_t prev = p.cu_seqlens[0];
            for (int32_t j = 0; j < s; ++j) {
                const int64_t next = p.cu_seqlens[j + 1];
                rank += next - prev > sb_tokens ? 1 : 0;
                prev = next;
            }
        }
        // (More long sequences than the lengths allow, or a longer one than
        // problem.max_seqlen says, break the caller's contract: their states
        // are then not carried, and nothing is written out of bounds.)
        if (rank < p.carry_count) carry = p.ws_carry + rank * p.num_v_heads * K * V + lane_offset;
    }
    arch::Acc8 S[K / 16];
    auto store_state = [&](float* dst) {
        if (kv_layout) {
#pragma unroll
            for (int kb = 0; kb < K / 16; ++kb)
#pragma unroll
                for (int r = 0; r < 8; ++r) dst[(kb * 16 + 2 * r) * V] = S[kb].x[r];
        } else {
#pragma unroll
            for (int kb = 0; kb < K / 16; ++kb)
#pragma unroll
                for (int r = 0; r < 8; ++r) dst[kb * 16 + 2 * r] = S[kb].x[r];
        }
    };
    const float* state_in = token_states && pos0 > 0 ? carry : state;
    if (state_in == nullptr) return;  // (the broken contract above)
    if (seq.from_zero && p.sb_first_chunk == 0) {
#pragma unroll
        for (int kb = 0; kb < K / 16; ++kb) S[kb] = arch::Acc8{};
    } else if (kv_layout) {
#pragma unroll
        for (int kb = 0; kb < K / 16; ++kb)
#pragma unroll
            for (int r = 0; r < 8; ++r) S[kb].x[r] = state_in[(kb * 16 + 2 * r) * V];
    } else {
#pragma unroll
        for (int kb = 0; kb < K / 16; ++kb)
#pragma unroll
            for (int r = 0; r < 8; ++r) S[kb].x[r] = state_in[kb * 16 + 2 * r];
    }

    // Staging role: token row srow of the chunk, elements [e0, e0 + 8).
    const int srow = tid >> 4;
    const int e0 = (tid & 15) * 8;
    GDN_SHARED float norm_w_s[V];
    if (out_norm && tid < V) norm_w_s[tid] = p.norm_weight[tid];
    arch::lds_barrier();  // every staging thread reads all of w

    // Without the output norm z is absent: its loads re-read v (never used),
    // so the prefetch has no branch to join (a join would wait for the loads).
    const void* z_src = out_norm ? p.z : p.v;
    const int64_t z_token_stride = out_norm ? p.z_token_stride : p.v_token_stride;
    const int64_t z_head_stride = out_norm ? p.z_head_stride : p.v_head_stride;
    Raw8 pk, pq, pv, pz;
    float pgam, pdecay;
    // Rows past the sequence's end re-read its last token (zeroed when
    // staged). Addresses: a per-chunk base, the same for every lane (scalar
    // registers), plus a 32-bit per-lane offset (the policy keeps 15 row
    // strides + 128 below 2^31 elements).
    auto prefetch_kq = [&](int c) {
        const int64_t first = seq.bos + pos0 + int64_t(c) * C;  // the chunk's first token
        const int64_t rows = seq.len - (pos0 + int64_t(c) * C);
        const int32_t r = srow < rows ? srow : int32_t(rows - 1);
        pk = load_raw8_fixed<kF32Inputs>(
            element_ptr(p.k, dt, first * p.k_token_stride + kh * p.k_head_stride),
            r * int32_t(p.k_token_stride) + e0);
        pq = load_raw8_fixed<kF32Inputs>(
            element_ptr(p.q, dt, first * p.q_token_stride + kh * p.q_head_stride),
            r * int32_t(p.q_token_stride) + e0);
        const float* gam = p.ws_gamma + ((int64_t(s) * p.sb_chunks + c) * p.num_v_heads + h) * (2 * C);
        pgam = gam[srow];
        pdecay = gam[C + srow];
    };
    auto prefetch_vz = [&](int c) {
        const int64_t first = seq.bos + pos0 + int64_t(c) * C;
        const int64_t rows = seq.len - (pos0 + int64_t(c) * C);
        const int32_t r = srow < rows ? srow : int32_t(rows - 1);
        pv = load_raw8_fixed<kF32Inputs>(
            element_ptr(p.v, dt, first * p.v_token_stride + h * p.v_head_stride),
            r * int32_t(p.v_token_stride) + e0);
        pz = load_raw8_fixed<kF32Inputs>(
            element_ptr(z_src, dt, first * z_token_stride + h * z_head_stride),
            r * int32_t(z_token_stride) + e0);
    };

    if (nch > 0) {
        prefetch_kq(0);
        if constexpr (!kF32Inputs) prefetch_vz(0);
    }
    for (int c = 0; c < nch; ++c) {
        const int64_t cpos = pos0 + int64_t(c) * C;
        const int n = seq.len - cpos < C ? int(seq.len - cpos) : C;
        const int par = c & 1;

        // ---- stage chunk c into LDS
        if constexpr (kF32Inputs) prefetch_vz(c);
        {
            const float valid = pos0 + int64_t(c) * C + srow < seq.len ? 1.0f : 0.0f;
            float kx[8], qx[8], vx[8];
            unpack_raw8(pk, dt, kx);
            unpack_raw8(pq, dt, qx);
            unpack_raw8(pv, dt, vx);
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                kx[j] *= valid;
                qx[j] *= valid;
                vx[j] *= valid;
            }
            float k_scale = 1.0f, q_scale = p.scale;
            if (l2norm) {  // the row's 16 staging threads are 16 adjacent lanes
                float kk = 0.0f, qq = 0.0f;
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    kk = fmaf(kx[j], kx[j], kk);
                    qq = fmaf(qx[j], qx[j], qq);
                }
#pragma unroll
                for (int m = 1; m < 16; m <<= 1) {
                    kk += arch::shfl_xor(kk, m);
                    qq += arch::shfl_xor(qq, m);
                }
                k_scale = 1.0f / sqrtf(kk + p.l2norm_eps);
                q_scale = p.scale / sqrtf(qq + p.l2norm_eps);
            }
            uint32_t kw[4], qw[4];
#pragma unroll
            for (int w = 0; w < 4; ++w) {
                kw[w] = arch::pack_half2(kx[2 * w] * k_scale, kx[2 * w + 1] * k_scale);
                qw[w] = arch::pack_half2(qx[2 * w] * q_scale, qx[2 * w + 1] * q_scale);
            }
            arch::store16(&k_s[srow][e0 / 2], arch::make_u32x4(kw[0], kw[1], kw[2], kw[3]));
            arch::store16(&q_s[srow][e0 / 2], arch::make_u32x4(qw[0], qw[1], qw[2], qw[3]));
            const float k_decay = k_scale * pdecay;  // e^{γ_last−γ_i} k̂_i
#pragma unroll
            for (int j = 0; j < 8; ++j)
                kt_s[e0 + j][srow] = static_cast<uint16_t>(arch::half_bits(kx[j] * k_decay));
            arch::store16(&v_s[srow][e0], arch::make_u32x4(arch::as_bits(vx[0]), arch::as_bits(vx[1]),
                                                           arch::as_bits(vx[2]), arch::as_bits(vx[3])));
            arch::store16(&v_s[srow][e0 + 4],
                          arch::make_u32x4(arch::as_bits(vx[4]), arch::as_bits(vx[5]),
                                           arch::as_bits(vx[6]), arch::as_bits(vx[7])));
            if (out_norm) {
                float zx[8];
                unpack_raw8(pz, dt, zx);
#pragma unroll
                for (int j = 0; j < 8; ++j)
                    gate_s[par][srow][e0 + j] = norm_w_s[e0 + j] * silu(zx[j] * valid);
            }
            if ((tid & 15) == 0) gam_s[srow] = pgam;
        }
        // Loads issued before the barrier (which the compiler cannot move them
        // across) stay in flight through the products: this chunk's T·diag(β)
        // and P rows (first used after 16 WMMAs), the next chunk's rows (used
        // at the next staging). Unconditional: a branch would join, and wait, here.
        const int64_t ws_index = (int64_t(s) * p.sb_chunks + c) * p.num_v_heads + h;
        const arch::Frag16 Tc = arch::load_frag(p.ws_T + ws_index * (C * C) + col * C);
        const arch::Frag16 Pc = arch::load_frag(p.ws_P + ws_index * (C * C) + col * C);
        const int next = c + 1 < nch ? c + 1 : c;
        prefetch_kq(next);
        // f32 rows take twice the registers: their v and z rows are loaded at
        // the staging (their latency shows), or the scan would spill.
        if constexpr (!kF32Inputs) prefetch_vz(next);
        arch::lds_barrier();

        // ---- U = k̂·S0, W = q̂·S0
        arch::Acc8 U = {}, W = {};
#pragma unroll
        for (int kb = 0; kb < K / 16; ++kb) {
            const arch::Frag16 bS = arch::acc_to_b(S[kb]);
            U = arch::wmma(arch::load_frag(&k_s[col][kb * 8]), bS, U);
            W = arch::wmma(arch::load_frag(&q_s[col][kb * 8]), bS, W);
        }
        float eg[8];
#pragma unroll
        for (int r = 0; r < 8; ++r) eg[r] = expf(gam_s[2 * r + hi]);

        // ---- D = T·diag(β)·(v − e^γ ⊙ U)
        arch::Acc8 X;
#pragma unroll
        for (int r = 0; r < 8; ++r) X.x[r] = v_s[2 * r + hi][vcol] - eg[r] * U.x[r];
        const arch::Acc8 zero = {};
        const arch::Frag16 bD = arch::acc_to_b(arch::wmma(Tc, arch::acc_to_b(X), zero));

        // ---- o = e^γ ⊙ W + P·D
        arch::Acc8 O;
#pragma unroll
        for (int r = 0; r < 8; ++r) O.x[r] = eg[r] * W.x[r];
        O = arch::wmma(Pc, bD, O);

        // ---- S = e^{γ_last} S0 + k̃ᵀ·D
        const float e_last = expf(gam_s[C - 1]);
#pragma unroll
        for (int kb = 0; kb < K / 16; ++kb) {
            arch::Acc8 decayed;
#pragma unroll
            for (int r = 0; r < 8; ++r) decayed.x[r] = e_last * S[kb].x[r];
            S[kb] = arch::wmma(arch::load_frag(&kt_s[kb * 16 + col][0]), bD, decayed);
        }

        // ---- epilogue: out = o / sqrt(mean(o²) + eps) · w ⊙ silu(z)
        if (out_norm) {
#pragma unroll
            for (int r = 0; r < 8; ++r) {
                float ss = O.x[r] * O.x[r];
#pragma unroll
                for (int m = 1; m < 16; m <<= 1) ss += arch::shfl_xor(ss, m);
                if (col == 0) red_s[par][wave][2 * r + hi] = ss;
            }
        }
        arch::lds_barrier();
        void* out_chunk = element_ptr(p.out, p.output_dtype,
                                      (seq.bos + cpos) * p.out_token_stride + h * p.out_head_stride);
        if (out_norm) {
#pragma unroll
            for (int r = 0; r < 8; ++r) {
                const int row = 2 * r + hi;
                float total = 0.0f;
#pragma unroll
                for (int w = 0; w < 8; ++w) total += red_s[par][w][row];
                const float inv_rms = 1.0f / sqrtf(total / float(V) + p.norm_eps);
                O.x[r] = O.x[r] * inv_rms * gate_s[par][row][vcol];
            }
        }
        if (p.output_dtype == GDN_DTYPE_F32) {
#pragma unroll
            for (int r = 0; r < 8; ++r)
                if (2 * r + hi < n)
                    static_cast<float*>(out_chunk)[(2 * r + hi) * int32_t(p.out_token_stride) + vcol] = O.x[r];
        } else {
            const bool f16 = p.output_dtype == GDN_DTYPE_F16;
#pragma unroll
            for (int r = 0; r < 8; ++r)
                if (2 * r + hi < n)
                    static_cast<uint16_t*>(out_chunk)[(2 * r + hi) * int32_t(p.out_token_stride) + vcol] =
                        static_cast<uint16_t>(f16 ? arch::half_bits(O.x[r]) : arch::bf16_bits(O.x[r]));
        }
        // GDN_FLAG_BLOCK_STATES: the state after a block's last token (a chunk
        // end, C dividing GDN_STATE_BLOCK) and after the sequence's last, to
        // the slot its token names (a padding row of a last partial chunk
        // changes nothing: its k̂ and v are zero).
        if (token_states) {
            const int64_t end = cpos + n;
            if (end % GDN_STATE_BLOCK == 0 || end == seq.len) {
                const int32_t ts = p.token_state_indices[seq.bos + end - 1];
                if (ts >= 0) store_state(state + (int64_t(ts) - seq.slot) * p.state_slot_stride);
            }
        }
    }
    if (token_states) {
        // A later super-block goes on from here.
        if (pos0 + int64_t(nch) * C < seq.len && carry) store_state(carry);
        return;
    }
    store_state(state);
#else
    (void)p;
    arch::trap();
#endif
}

// ------------------------------------------------------------ WMMA tile

// D = A·B + C for one tile (row-major 16x16; A, B FP16 bits, C, D FP32),
// loaded into and stored from the fragments by the layout: a direct test of
// the layout against a plain matrix product. One wave.
GDN_DEVICE void wmma_tile_body(const uint16_t* A, const uint16_t* B, const float* Cm, float* D) {
#if GDN_HIP_WMMA
    const int lane = arch::lane_id();
    const int col = lane & 15, hi = lane >> 4;
    const arch::Frag16 a = arch::load_frag(A + col * 16);  // row `col` of A
    arch::Frag16 b;
#pragma unroll
    for (int w = 0; w < 8; ++w)  // column `col` of B
        b.w[w] = uint32_t(B[(2 * w) * 16 + col]) | (uint32_t(B[(2 * w + 1) * 16 + col]) << 16);
    arch::Acc8 c;
#pragma unroll
    for (int r = 0; r < 8; ++r) c.x[r] = Cm[(2 * r + hi) * 16 + col];
    const arch::Acc8 d = arch::wmma(a, b, c);
#pragma unroll
    for (int r = 0; r < 8; ++r) D[(2 * r + hi) * 16 + col] = d.x[r];
#else
    (void)A; (void)B; (void)Cm; (void)D;
    arch::trap();
#endif
}

}  // namespace gdn::hip

// ------------------------------------------------------------ entry points

GDN_KERNEL(gdn_hip_sequential_k64_v64, gdn::hip::kSequentialThreads)(const gdn::hip::KernelParams p) {
    gdn::hip::sequential_body<64, 64>(p);
}
GDN_KERNEL(gdn_hip_sequential_k64_v128, gdn::hip::kSequentialThreads)(const gdn::hip::KernelParams p) {
    gdn::hip::sequential_body<64, 128>(p);
}
GDN_KERNEL(gdn_hip_sequential_k128_v64, gdn::hip::kSequentialThreads)(const gdn::hip::KernelParams p) {
    gdn::hip::sequential_body<128, 64>(p);
}
GDN_KERNEL(gdn_hip_sequential_k128_v128, gdn::hip::kSequentialThreads)(const gdn::hip::KernelParams p) {
    gdn::hip::sequential_body<128, 128>(p);
}
GDN_KERNEL(gdn_hip_chunk_prep, gdn::hip::kPrepMaxThreads)(const gdn::hip::KernelParams p) {
    gdn::hip::chunk_prep_body(p);
}
GDN_KERNEL(gdn_hip_chunk_scan, gdn::hip::kScanThreads)(const gdn::hip::KernelParams p) {
    gdn::hip::chunk_scan_body<false>(p);  // f16 / bf16 inputs
}
GDN_KERNEL(gdn_hip_chunk_scan_f32, gdn::hip::kScanThreads)(const gdn::hip::KernelParams p) {
    gdn::hip::chunk_scan_body<true>(p);  // f32 inputs
}
GDN_KERNEL(gdn_hip_wmma_tile, 32)(const uint16_t* A, const uint16_t* B, const float* C, float* D) {
    gdn::hip::wmma_tile_body(A, B, C, D);
}

#define _POSIX_C_SOURCE 200809L
/* gdn example: a prompt, then a few decode steps through the same state.
 *
 * Synthetic, seeded tensors in the shape of a Qwen3-Next linear-attention
 * layer (16 key heads, 48 value heads, K = V = 128). The program probes the
 * backends, takes the best one available (CUDA, then HIP, then the CPU), runs
 * a 2048-token prompt and 4 decode steps, and prints the backend, the path
 * each call took and why, the time, and the error against a double-precision
 * recurrence on a few heads.
 *
 * Build and run: see the README (the example runs on the CPU without a GPU). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gdn/gdn.h"

#if defined(GDN_EXAMPLE_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

enum { HK = 16, HV = 48, DK = 128, DV = 128, PROMPT = 2048, DECODE = 4 };
#define TOTAL (PROMPT + DECODE)

/* ---------------------------------------------------------------- memory
 * The library never allocates device memory: the caller does. These helpers
 * are the only backend-specific code of the example. */
static gdn_backend_t g_backend = GDN_BACKEND_CPU;

static void* dev_alloc(size_t bytes) {
#if defined(GDN_EXAMPLE_WITH_CUDA)
    if (g_backend == GDN_BACKEND_CUDA) {
        void* p = NULL;
        return cudaMalloc(&p, bytes) == cudaSuccess ? p : NULL;
    }
#endif
    /* 256-byte aligned: GDN_WORKSPACE_ALIGNMENT */
    return aligned_alloc(GDN_WORKSPACE_ALIGNMENT, (bytes + GDN_WORKSPACE_ALIGNMENT - 1) /
                                                      GDN_WORKSPACE_ALIGNMENT * GDN_WORKSPACE_ALIGNMENT);
}
static void dev_free(void* p) {
#if defined(GDN_EXAMPLE_WITH_CUDA)
    if (g_backend == GDN_BACKEND_CUDA) { cudaFree(p); return; }
#endif
    free(p);
}
static void to_dev(void* dst, const void* src, size_t bytes) {
#if defined(GDN_EXAMPLE_WITH_CUDA)
    if (g_backend == GDN_BACKEND_CUDA) { cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice); return; }
#endif
    memcpy(dst, src, bytes);
}
static void to_host(void* dst, const void* src, size_t bytes) {
#if defined(GDN_EXAMPLE_WITH_CUDA)
    if (g_backend == GDN_BACKEND_CUDA) { cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost); return; }
#endif
    memcpy(dst, src, bytes);
}
static void dev_sync(void) {
#if defined(GDN_EXAMPLE_WITH_CUDA)
    if (g_backend == GDN_BACKEND_CUDA) cudaDeviceSynchronize();
#endif
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static unsigned g_seed = 12345u;
static float frand(void) { /* uniform in [-0.5, 0.5) */
    g_seed = g_seed * 1664525u + 1013904223u;
    return (float)((g_seed >> 8) & 0xffffff) / 16777216.0f - 0.5f;
}

#define CHECK(call)                                                                  \
    do {                                                                             \
        gdn_status_t st_ = (call);                                                   \
        if (st_ != GDN_SUCCESS) {                                                    \
            fprintf(stderr, "%s failed: %s: %s\n", #call, gdn_status_string(st_),    \
                    gdn_last_error());                                               \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

/* One value head of the recurrence in double precision, over tokens
 * [t0, t1), continuing from (and updating) `S` ([K][V]). */
static void reference_head(const float* q, const float* k, const float* v, const float* g,
                           const float* beta, int h, int t0, int t1, double* S, double* out) {
    const int kh = h / (HV / HK); /* grouped head mapping */
    const double scale = 1.0 / sqrt((double)DK);
    double d[DV];
    int t, i, j;
    for (t = t0; t < t1; ++t) {
        const float* kt = k + ((size_t)t * HK + kh) * DK;
        const float* qt = q + ((size_t)t * HK + kh) * DK;
        const float* vt = v + ((size_t)t * HV + h) * DV;
        const double decay = exp((double)g[(size_t)t * HV + h]);
        const double b = beta[(size_t)t * HV + h];
        for (j = 0; j < DV; ++j) d[j] = 0.0;
        for (i = 0; i < DK; ++i)
            for (j = 0; j < DV; ++j) d[j] += S[i * DV + j] * kt[i];
        for (j = 0; j < DV; ++j) d[j] = b * (vt[j] - decay * d[j]);
        for (i = 0; i < DK; ++i)
            for (j = 0; j < DV; ++j) S[i * DV + j] = decay * S[i * DV + j] + kt[i] * d[j];
        for (j = 0; j < DV; ++j) {
            double o = 0.0;
            for (i = 0; i < DK; ++i) o += S[i * DV + j] * scale * qt[i];
            out[(size_t)(t - t0) * DV + j] = o;
        }
    }
}

int main(void) {
    static const gdn_backend_t order[] = {GDN_BACKEND_CUDA, GDN_BACKEND_HIP, GDN_BACKEND_CPU};
    static const char* names[] = {"CPU", "CUDA", "HIP"};
    static const int check_heads[] = {0, 17, 47};
    const size_t nq = (size_t)TOTAL * HK * DK, nv = (size_t)TOTAL * HV * DV, ng = (size_t)TOTAL * HV;
    const size_t nstate = (size_t)HV * DK * DV;
    float *q = malloc(nq * 4), *k = malloc(nq * 4), *v = malloc(nv * 4), *g = malloc(ng * 4),
          *beta = malloc(ng * 4), *out = malloc(nv * 4), *state0 = malloc(nstate * 4),
          *state = malloc(nstate * 4);
    double *ref_out = malloc((size_t)TOTAL * DV * sizeof(double)), *ref_S = malloc((size_t)DK * DV * sizeof(double));
    gdn_caps_t caps;
    gdn_problem_t problem;
    gdn_tensors_t tensors;
    gdn_path_info_t info;
    size_t ws_bytes = 0, ws_decode = 0, i;
    void *d_q, *d_k, *d_v, *d_g, *d_beta, *d_out, *d_state, *d_ws;
    double t_prompt, t_decode, worst_out = 0.0, worst_state = 0.0;
    int b, step, c;

    /* 1. Probe: the first backend that answers. */
    gdn_caps_init(&caps);
    for (b = 0; b < 3; ++b) {
        gdn_status_t st = gdn_probe(order[b], 0, &caps);
        printf("probe %-4s: %s%s%s\n", names[order[b]], gdn_status_string(st),
               st ? " - " : "", st ? gdn_last_error() : "");
        if (st == GDN_SUCCESS) break;
    }
    g_backend = caps.backend;
    printf("backend: %s, device %d: %s (%s), %d %s\n", names[caps.backend], caps.device, caps.name,
           caps.arch, caps.multiprocessor_count,
           caps.backend == GDN_BACKEND_CPU ? "threads" : "multiprocessors");

    /* 2. Synthetic inputs: unit-norm keys (as after the model's L2 norm),
     *    decays in (0.37, 0.99), betas in (0, 1), a non-zero initial state. */
    for (i = 0; i < nq; ++i) q[i] = frand();
    for (i = 0; i < nq; ++i) k[i] = frand();
    for (i = 0; i < (size_t)TOTAL * HK; ++i) {
        float n = 0.0f;
        size_t j;
        for (j = 0; j < DK; ++j) n += k[i * DK + j] * k[i * DK + j];
        for (j = 0; j < DK; ++j) k[i * DK + j] /= sqrtf(n);
    }
    for (i = 0; i < nv; ++i) v[i] = frand();
    for (i = 0; i < ng; ++i) g[i] = -0.01f - (frand() + 0.5f);
    for (i = 0; i < ng; ++i) beta[i] = frand() + 0.5f;
    for (i = 0; i < nstate; ++i) state0[i] = 0.05f * frand();
    for (i = 0; i < nv; ++i) out[i] = NAN;

    d_q = dev_alloc(nq * 4); d_k = dev_alloc(nq * 4); d_v = dev_alloc(nv * 4);
    d_g = dev_alloc(ng * 4); d_beta = dev_alloc(ng * 4); d_out = dev_alloc(nv * 4);
    d_state = dev_alloc(nstate * 4);
    to_dev(d_q, q, nq * 4); to_dev(d_k, k, nq * 4); to_dev(d_v, v, nv * 4);
    to_dev(d_g, g, ng * 4); to_dev(d_beta, beta, ng * 4); to_dev(d_out, out, nv * 4);
    to_dev(d_state, state0, nstate * 4);

    /* 3. The problem (shapes) and the tensors (pointers; packed strides). */
    gdn_problem_init(&problem);
    problem.num_tokens = PROMPT;
    problem.num_k_heads = HK;
    problem.num_v_heads = HV;
    problem.head_dim_k = DK;
    problem.head_dim_v = DV;
    gdn_tensors_init(&tensors);
    tensors.q = d_q; tensors.k = d_k; tensors.v = d_v; tensors.g = d_g; tensors.beta = d_beta;
    tensors.out = d_out; tensors.state = d_state;
    /* Views into the full buffers: the token stride stays that of one token. */

    /* 4. Workspace: sized once for the largest call (the prompt). */
    CHECK(gdn_workspace_size(&caps, &problem, &ws_bytes));
    problem.num_tokens = 1;
    CHECK(gdn_workspace_size(&caps, &problem, &ws_decode));
    problem.num_tokens = PROMPT;
    if (ws_decode > ws_bytes) ws_bytes = ws_decode;
    d_ws = ws_bytes ? dev_alloc(ws_bytes) : NULL;
    printf("workspace: %.1f MB\n", ws_bytes / 1e6);

    /* 5. The prompt. */
    gdn_path_info_init(&info);
    CHECK(gdn_select_path(&caps, &problem, &tensors, &info));
    printf("prompt (%d tokens): %s\n", PROMPT, info.reason);
    t_prompt = now_ms();
    CHECK(gdn_chunked_recurrence(&caps, &problem, &tensors, d_ws, ws_bytes, NULL));
    dev_sync();
    t_prompt = now_ms() - t_prompt;

    /* 6. Decode: one token at a time through the same state slot. */
    problem.num_tokens = 1;
    CHECK(gdn_select_path(&caps, &problem, &tensors, &info));
    printf("decode (1 token): %s\n", info.reason);
    t_decode = now_ms();
    for (step = 0; step < DECODE; ++step) {
        const size_t t = PROMPT + step;
        tensors.q = (float*)d_q + t * HK * DK; tensors.k = (float*)d_k + t * HK * DK;
        tensors.v = (float*)d_v + t * HV * DV; tensors.g = (float*)d_g + t * HV;
        tensors.beta = (float*)d_beta + t * HV; tensors.out = (float*)d_out + t * HV * DV;
        CHECK(gdn_chunked_recurrence(&caps, &problem, &tensors, d_ws, ws_bytes, NULL));
    }
    dev_sync();
    t_decode = (now_ms() - t_decode) / DECODE;
    to_host(out, d_out, nv * 4);
    to_host(state, d_state, nstate * 4);
    printf("time: prompt %.3f ms, decode %.3f ms per step (wall clock, first call included)\n",
           t_prompt, t_decode);

    /* 7. Error against double precision on a few heads. */
    for (c = 0; c < 3; ++c) {
        const int h = check_heads[c];
        double max_ref = 0.0, max_diff = 0.0, max_sref = 0.0, max_sdiff = 0.0;
        for (i = 0; i < (size_t)DK * DV; ++i) ref_S[i] = state0[(size_t)h * DK * DV + i];
        reference_head(q, k, v, g, beta, h, 0, TOTAL, ref_S, ref_out);
        for (i = 0; i < (size_t)TOTAL * DV; ++i) {
            const double got = out[(i / DV * HV + (size_t)h) * DV + i % DV];
            if (fabs(ref_out[i]) > max_ref) max_ref = fabs(ref_out[i]);
            if (!(fabs(got - ref_out[i]) <= max_diff)) max_diff = fabs(got - ref_out[i]);
        }
        for (i = 0; i < (size_t)DK * DV; ++i) {
            const double got = state[(size_t)h * DK * DV + i];
            if (fabs(ref_S[i]) > max_sref) max_sref = fabs(ref_S[i]);
            if (!(fabs(got - ref_S[i]) <= max_sdiff)) max_sdiff = fabs(got - ref_S[i]);
        }
        printf("head %2d vs FP64: output %.2e, final state %.2e (max|diff|/max|ref|)\n", h,
               max_diff / max_ref, max_sdiff / max_sref);
        if (max_diff / max_ref > worst_out || isnan(max_diff)) worst_out = isnan(max_diff) ? INFINITY : max_diff / max_ref;
        if (max_sdiff / max_sref > worst_state || isnan(max_sdiff)) worst_state = isnan(max_sdiff) ? INFINITY : max_sdiff / max_sref;
    }

    dev_free(d_q); dev_free(d_k); dev_free(d_v); dev_free(d_g); dev_free(d_beta);
    dev_free(d_out); dev_free(d_state); if (d_ws) dev_free(d_ws);
    free(q); free(k); free(v); free(g); free(beta); free(out); free(state0); free(state);
    free(ref_out); free(ref_S);
    if (!(worst_out <= 1e-5 && worst_state <= 1e-5)) {
        fprintf(stderr, "error against FP64 above 1e-5: the library is broken here\n");
        return 1;
    }
    printf("ok\n");
    return 0;
}

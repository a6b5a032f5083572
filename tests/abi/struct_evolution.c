/* Struct evolution through struct_size, seen from a C program linked against
 * the shared libgdn, as a program built against an older or a newer gdn.h
 * would call it:
 *   - the layout and pinned constants of release 0.1.0 are frozen below: a
 *     field moved or a value renumbered fails to compile;
 *   - the smallest struct_size the library accepts for each struct is exactly
 *     the first release's, every smaller one is rejected by name;
 *   - an old-size struct placed right before an unreadable page (so the
 *     library cannot read or write one byte past struct_size without a
 *     crash) is accepted, the missing fields take their defaults, and the
 *     results are the bits of a full-size run with those defaults (checked
 *     against a double-precision recurrence too);
 *   - a struct from a newer header (struct_size > sizeof) is rejected, names
 *     the struct, and nothing is written.
 * Exit 0 on success, 1 on any failure (each printed). */
#define _DEFAULT_SOURCE
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gdn/gdn.h"

/* ---------------------------------------------------------------- frozen */

/* The first release's minimum struct_size for each struct: the fields up to
 * (not including) these existed in it; the library defaults the rest. */
#define MIN_CAPS offsetof(gdn_caps_t, compute_major)
#define MIN_PROBLEM offsetof(gdn_problem_t, head_mapping)
#define MIN_TENSORS offsetof(gdn_tensors_t, state_slot_stride)
#define MIN_PATH_INFO offsetof(gdn_path_info_t, chunk_size)

/* The structs as release 0.1.0 shipped them. Fields may be appended to
 * gdn.h's structs; none of these may move. */
typedef struct {
    size_t struct_size;
    int backend;
    int32_t device;
    char arch[32];
    char name[96];
    int32_t multiprocessor_count;
    int32_t warp_size;
    size_t shared_mem_per_block_optin;
    size_t shared_mem_per_multiprocessor;
    uint64_t features;
    int32_t compute_major, compute_minor;
} caps_v0_1;

typedef struct {
    size_t struct_size;
    int32_t num_seqs;
    int64_t num_tokens;
    int64_t max_seqlen;
    int32_t num_k_heads, num_v_heads, head_dim_k, head_dim_v;
    int head_mapping, input_dtype, gate_dtype, output_dtype, state_layout;
    int32_t num_state_slots;
    int algorithm, precision;
    uint32_t flags;
    float scale, l2norm_eps, norm_eps;
} problem_v0_1;

typedef struct {
    size_t struct_size;
    const void* q;     int64_t q_token_stride, q_head_stride;
    const void* k;     int64_t k_token_stride, k_head_stride;
    const void* v;     int64_t v_token_stride, v_head_stride;
    const void* g;     int64_t g_token_stride, g_head_stride;
    const void* beta;  int64_t beta_token_stride, beta_head_stride;
    void* out;         int64_t out_token_stride, out_head_stride;
    const void* z;     int64_t z_token_stride, z_head_stride;
    float* state;      int64_t state_slot_stride;
    const int32_t* cu_seqlens;
    const int32_t* state_indices;
    const uint8_t* start_from_zero;
    const float* A_log;
    const float* dt_bias;
    const float* norm_weight;
} tensors_v0_1;

typedef struct {
    size_t struct_size;
    int path;
    int32_t chunk_size;
    int precision;
    char reason[192];
} path_info_v0_1;

#define SAME_FIELD(cur, old, f)                                                        \
    _Static_assert(offsetof(cur, f) == offsetof(old, f) &&                              \
                       sizeof(((cur*)0)->f) == sizeof(((old*)0)->f),                     \
                   #cur "." #f " moved or changed size since 0.1.0")
#define AT_LEAST(cur, old) \
    _Static_assert(sizeof(cur) >= sizeof(old), #cur " shrank since 0.1.0")

SAME_FIELD(gdn_caps_t, caps_v0_1, struct_size);
SAME_FIELD(gdn_caps_t, caps_v0_1, backend);
SAME_FIELD(gdn_caps_t, caps_v0_1, device);
SAME_FIELD(gdn_caps_t, caps_v0_1, arch);
SAME_FIELD(gdn_caps_t, caps_v0_1, name);
SAME_FIELD(gdn_caps_t, caps_v0_1, multiprocessor_count);
SAME_FIELD(gdn_caps_t, caps_v0_1, warp_size);
SAME_FIELD(gdn_caps_t, caps_v0_1, shared_mem_per_block_optin);
SAME_FIELD(gdn_caps_t, caps_v0_1, shared_mem_per_multiprocessor);
SAME_FIELD(gdn_caps_t, caps_v0_1, features);
SAME_FIELD(gdn_caps_t, caps_v0_1, compute_major);
SAME_FIELD(gdn_caps_t, caps_v0_1, compute_minor);
AT_LEAST(gdn_caps_t, caps_v0_1);

SAME_FIELD(gdn_problem_t, problem_v0_1, struct_size);
SAME_FIELD(gdn_problem_t, problem_v0_1, num_seqs);
SAME_FIELD(gdn_problem_t, problem_v0_1, num_tokens);
SAME_FIELD(gdn_problem_t, problem_v0_1, max_seqlen);
SAME_FIELD(gdn_problem_t, problem_v0_1, num_k_heads);
SAME_FIELD(gdn_problem_t, problem_v0_1, num_v_heads);
SAME_FIELD(gdn_problem_t, problem_v0_1, head_dim_k);
SAME_FIELD(gdn_problem_t, problem_v0_1, head_dim_v);
SAME_FIELD(gdn_problem_t, problem_v0_1, head_mapping);
SAME_FIELD(gdn_problem_t, problem_v0_1, input_dtype);
SAME_FIELD(gdn_problem_t, problem_v0_1, gate_dtype);
SAME_FIELD(gdn_problem_t, problem_v0_1, output_dtype);
SAME_FIELD(gdn_problem_t, problem_v0_1, state_layout);
SAME_FIELD(gdn_problem_t, problem_v0_1, num_state_slots);
SAME_FIELD(gdn_problem_t, problem_v0_1, algorithm);
SAME_FIELD(gdn_problem_t, problem_v0_1, precision);
SAME_FIELD(gdn_problem_t, problem_v0_1, flags);
SAME_FIELD(gdn_problem_t, problem_v0_1, scale);
SAME_FIELD(gdn_problem_t, problem_v0_1, l2norm_eps);
SAME_FIELD(gdn_problem_t, problem_v0_1, norm_eps);
AT_LEAST(gdn_problem_t, problem_v0_1);

SAME_FIELD(gdn_tensors_t, tensors_v0_1, struct_size);
SAME_FIELD(gdn_tensors_t, tensors_v0_1, q);
SAME_FIELD(gdn_tensors_t, tensors_v0_1, q_token_stride);
SAME_FIELD(gdn_tensors_t, tensors_v0_1, q_head_stride);
SAME_FIELD(gdn_tensors_t, tensors_v0_1, k);
SAME_FIELD(gdn_tensors_t, tensors_v0_1, k_token_stride);
SAME_FIELD(gdn_tensors_t, tensors_v0_1, k_head_stride);
SAME_FIELD(gdn_tensors_t, tensors_v0_1, v);
SAME_FIELD(gdn_tensors_t, tensors_v0_1, v_token_stride);
SAME_FIELD(gdn_tensors_t, tensors_v0_1, v_head_stride);
SAME_FIELD(gdn_tensors_t, tensors_v0_1, g);
SAME_FIELD(gdn_tensors_t, tensors_v0_1, g_token_stride);
SAME_FIELD(gdn_tensors_t, tensors_v0_1, g_head_stride);
SAME_FIELD(gdn_tensors_t, tensors_v0_1, beta);
SAME_FIELD(gdn_tensors_t, tensors_v0_1, beta_token_stride);
SAME_FIELD(gdn_tensors_t, tensors_v0_1, beta_head_stride);
SAME_FIELD(gdn_tensors_t, tensors_v0_1, out);
SAME_FIELD(gdn_tensors_t, tensors_v0_1, out_token_stride);
SAME_FIELD(gdn_tensors_t, tensors_v0_1, out_head_stride);
SAME_FIELD(gdn_tensors_t, tensors_v0_1, z);
SAME_FIELD(gdn_tensors_t, tensors_v0_1, z_token_stride);
SAME_FIELD(gdn_tensors_t, tensors_v0_1, z_head_stride);
SAME_FIELD(gdn_tensors_t, tensors_v0_1, state);
SAME_FIELD(gdn_tensors_t, tensors_v0_1, state_slot_stride);
SAME_FIELD(gdn_tensors_t, tensors_v0_1, cu_seqlens);
SAME_FIELD(gdn_tensors_t, tensors_v0_1, state_indices);
SAME_FIELD(gdn_tensors_t, tensors_v0_1, start_from_zero);
SAME_FIELD(gdn_tensors_t, tensors_v0_1, A_log);
SAME_FIELD(gdn_tensors_t, tensors_v0_1, dt_bias);
SAME_FIELD(gdn_tensors_t, tensors_v0_1, norm_weight);
AT_LEAST(gdn_tensors_t, tensors_v0_1);

SAME_FIELD(gdn_path_info_t, path_info_v0_1, struct_size);
SAME_FIELD(gdn_path_info_t, path_info_v0_1, path);
SAME_FIELD(gdn_path_info_t, path_info_v0_1, chunk_size);
SAME_FIELD(gdn_path_info_t, path_info_v0_1, precision);
SAME_FIELD(gdn_path_info_t, path_info_v0_1, reason);
AT_LEAST(gdn_path_info_t, path_info_v0_1);

/* The header's version is the build's (CMakeLists.txt project(), the SONAME). */
#ifdef GDN_PROJECT_VERSION_MAJOR
_Static_assert(GDN_VERSION_MAJOR == GDN_PROJECT_VERSION_MAJOR &&
                   GDN_VERSION_MINOR == GDN_PROJECT_VERSION_MINOR &&
                   GDN_VERSION_PATCH == GDN_PROJECT_VERSION_PATCH,
               "gdn.h's GDN_VERSION_* differ from project(gdn VERSION ...) in CMakeLists.txt");
#endif

/* Enums are int-sized (a field of every struct). */
_Static_assert(sizeof(gdn_status_t) == sizeof(int) && sizeof(gdn_backend_t) == sizeof(int) &&
                   sizeof(gdn_dtype_t) == sizeof(int) && sizeof(gdn_path_t) == sizeof(int),
               "an enum changed size");

/* Pinned values: never renumbered, never reused. */
#define PINNED(name, value) _Static_assert((name) == (value), #name " was renumbered")
PINNED(GDN_SUCCESS, 0);
PINNED(GDN_ERROR_INVALID_ARGUMENT, 1);
PINNED(GDN_ERROR_NOT_SUPPORTED, 2);
PINNED(GDN_ERROR_WORKSPACE_TOO_SMALL, 3);
PINNED(GDN_ERROR_BACKEND_UNAVAILABLE, 4);
PINNED(GDN_ERROR_DEVICE, 5);
PINNED(GDN_ERROR_INTERNAL, 6);
PINNED(GDN_BACKEND_CPU, 0);
PINNED(GDN_BACKEND_CUDA, 1);
PINNED(GDN_BACKEND_HIP, 2);
PINNED(GDN_DTYPE_F32, 0);
PINNED(GDN_DTYPE_F16, 1);
PINNED(GDN_DTYPE_BF16, 2);
PINNED(GDN_HEADS_GROUPED, 0);
PINNED(GDN_HEADS_INTERLEAVED, 1);
PINNED(GDN_STATE_KV, 0);
PINNED(GDN_STATE_VK, 1);
PINNED(GDN_ALGO_AUTO, 0);
PINNED(GDN_ALGO_SEQUENTIAL, 1);
PINNED(GDN_ALGO_CHUNKED, 2);
PINNED(GDN_PRECISION_FP32, 0);
PINNED(GDN_PRECISION_TF32X3, 1);
PINNED(GDN_PRECISION_FP16, 2);
PINNED(GDN_PRECISION_BF16, 3);
PINNED(GDN_PRECISION_BF16X3, 4);
PINNED(GDN_PRECISION_FP16X3, 5);
PINNED(GDN_PATH_NONE, 0);
PINNED(GDN_PATH_SEQUENTIAL, 1);
PINNED(GDN_PATH_CHUNKED_FP32, 2);
PINNED(GDN_PATH_CHUNKED_LOWP_C16, 3);
PINNED(GDN_PATH_CHUNKED_TC, 4);
PINNED(GDN_FLAG_QK_L2NORM, 1u);
PINNED(GDN_FLAG_GATE_FROM_RAW, 2u);
PINNED(GDN_FLAG_BETA_FROM_LOGITS, 4u);
PINNED(GDN_FLAG_OUTPUT_NORM, 8u);
PINNED(GDN_FLAG_VALIDATE, 16u);
PINNED(GDN_FLAG_PDL, 32u);
PINNED(GDN_FLAG_TOKEN_STATES, 64u);
PINNED(GDN_FLAG_BLOCK_STATES, 128u);
PINNED(GDN_STATE_BLOCK, 64);
PINNED(GDN_FEATURE_ASYNC_COPY, 1ull);
PINNED(GDN_FEATURE_FP16_MMA, 2ull);
PINNED(GDN_FEATURE_TF32_MMA, 4ull);
PINNED(GDN_FEATURE_WGMMA, 8ull);
PINNED(GDN_FEATURE_GFX11_WMMA, 16ull);
PINNED(GDN_FEATURE_CPU_THREADS, 32ull);
PINNED(GDN_FEATURE_TOKEN_STATES, 64ull);
PINNED(GDN_FEATURE_BLOCK_STATES, 128ull);
PINNED(GDN_WORKSPACE_ALIGNMENT, 256);

/* ------------------------------------------------------------------- run */

static int failures = 0;
#define EXPECT(cond, ...)                                                       \
    do {                                                                        \
        if (!(cond)) {                                                          \
            fprintf(stderr, "%s:%d: FAILED: %s: ", __FILE__, __LINE__, #cond);  \
            fprintf(stderr, __VA_ARGS__);                                       \
            fprintf(stderr, " (last error: \"%s\")\n", gdn_last_error());       \
            ++failures;                                                         \
        }                                                                       \
    } while (0)

/* A small problem in which every defaulted field matters: 2 key heads for 4
 * value heads (grouped is the default mapping), 2 sequences of equal length
 * (no cu_seqlens), slot i for sequence i (no indices), packed strides, a
 * nonzero state carried in, long enough for auto to pick the chunked path. */
enum { NSEQ = 2, SEQLEN = 80, NTOK = NSEQ * SEQLEN, HK = 2, HV = 4, DK = 64, DV = 64 };

static float q[NTOK][HK][DK], k[NTOK][HK][DK], v[NTOK][HV][DV], g[NTOK][HV], beta[NTOK][HV];
static float state0[NSEQ][HV][DK][DV];

static float frand(unsigned* s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 65536.0f - 0.5f;
}

static void make_inputs(void) {
    unsigned s = 12345u;
    for (int t = 0; t < NTOK; ++t) {
        for (int h = 0; h < HK; ++h) {
            double nq = 0, nk = 0;
            for (int d = 0; d < DK; ++d) {
                q[t][h][d] = frand(&s);
                k[t][h][d] = frand(&s);
                nk += (double)k[t][h][d] * k[t][h][d];
                nq += (double)q[t][h][d] * q[t][h][d];
            }
            /* unit-norm keys keep the recurrence contractive, as after L2 norm */
            for (int d = 0; d < DK; ++d) k[t][h][d] = (float)(k[t][h][d] / sqrt(nk));
            (void)nq;
        }
        for (int h = 0; h < HV; ++h) {
            for (int d = 0; d < DV; ++d) v[t][h][d] = frand(&s);
            g[t][h] = -0.05f - 0.2f * (frand(&s) + 0.5f);
            beta[t][h] = 0.1f + 0.8f * (frand(&s) + 0.5f);
        }
    }
    for (int i = 0; i < NSEQ; ++i)
        for (int h = 0; h < HV; ++h)
            for (int a = 0; a < DK; ++a)
                for (int b = 0; b < DV; ++b) state0[i][h][a][b] = 0.1f * frand(&s);
}

/* The recurrence in double with the defaults (grouped heads, scale 1/sqrt(K)). */
static void reference(double* out, double* st) {
    const int group = HV / HK;
    for (int i = 0; i < NSEQ; ++i)
        for (int h = 0; h < HV; ++h) {
            const int kh = h / group;
            double* S = st + ((size_t)i * HV + h) * DK * DV;
            for (int a = 0; a < DK * DV; ++a) S[a] = ((float*)state0[i][h])[a];
            for (int t = i * SEQLEN; t < (i + 1) * SEQLEN; ++t) {
                const double decay = exp(g[t][h]);
                for (int a = 0; a < DK * DV; ++a) S[a] *= decay;
                for (int b = 0; b < DV; ++b) {
                    double sk = 0;
                    for (int a = 0; a < DK; ++a) sk += S[a * DV + b] * k[t][kh][a];
                    const double d = beta[t][h] * (v[t][h][b] - sk);
                    for (int a = 0; a < DK; ++a) S[a * DV + b] += k[t][kh][a] * d;
                }
                for (int b = 0; b < DV; ++b) {
                    double o = 0;
                    for (int a = 0; a < DK; ++a) o += S[a * DV + b] * q[t][kh][a];
                    out[((size_t)t * HV + h) * DV + b] = o / sqrt((double)DK);
                }
            }
        }
}

/* Room for one struct of `bytes` bytes that ends where an unreadable page
 * begins (rounded up to 8 bytes, the structs' alignment, as an old header's
 * sizeof would be): reading or writing past it crashes the test. */
typedef struct {
    unsigned char* pages;
    size_t page;
} guarded_t;

static void* guarded_struct(guarded_t* g_, size_t bytes) {
    g_->page = (size_t)sysconf(_SC_PAGESIZE);
    g_->pages = mmap(NULL, 2 * g_->page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (g_->pages == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    if (mprotect(g_->pages + g_->page, g_->page, PROT_NONE) != 0) {
        perror("mprotect");
        exit(1);
    }
    return g_->pages + g_->page - (bytes + 7) / 8 * 8;
}

static void release(guarded_t* g_) { munmap(g_->pages, 2 * g_->page); }

static void* aligned_workspace(size_t bytes) {
    void* p = NULL;
    if (posix_memalign(&p, GDN_WORKSPACE_ALIGNMENT, bytes ? bytes : 1) != 0) exit(1);
    return p;
}

static void full_problem(gdn_problem_t* p) {
    gdn_problem_init(p);
    p->num_seqs = NSEQ;
    p->num_tokens = NTOK;
    p->num_k_heads = HK;
    p->num_v_heads = HV;
    p->head_dim_k = DK;
    p->head_dim_v = DV;
}

static void full_tensors(gdn_tensors_t* t, float* out, float* st) {
    gdn_tensors_init(t);
    t->q = q;
    t->k = k;
    t->v = v;
    t->g = g;
    t->beta = beta;
    t->out = out;
    t->state = st;
}

/* The smallest struct_size accepted must be the first release's; every size
 * from sizeof(size_t) up to the struct's size is tried. */
static void check_minimum_sizes(const gdn_caps_t* caps) {
    gdn_problem_t p;
    gdn_tensors_t t;
    gdn_path_info_t info;
    static float out[NTOK][HV][DV], st[NSEQ][HV][DK][DV];
    for (size_t size = sizeof(size_t); size <= sizeof(gdn_problem_t); ++size) {
        size_t bytes = 12345;
        full_problem(&p);
        p.struct_size = size;
        const gdn_status_t s = gdn_workspace_size(caps, &p, &bytes);
        if (size >= MIN_PROBLEM) {
            EXPECT(s == GDN_SUCCESS, "problem.struct_size %zu (>= %zu) rejected", size, (size_t)MIN_PROBLEM);
        } else {
            EXPECT(s == GDN_ERROR_INVALID_ARGUMENT && strstr(gdn_last_error(), "problem->struct_size"),
                   "problem.struct_size %zu (< %zu) not rejected by name (status %d)", size,
                   (size_t)MIN_PROBLEM, (int)s);
            EXPECT(bytes == 12345, "bytes written on failure");
        }
    }
    full_problem(&p);
    for (size_t size = sizeof(size_t); size <= sizeof(gdn_tensors_t); ++size) {
        full_tensors(&t, &out[0][0][0], &st[0][0][0][0]);
        t.struct_size = size;
        gdn_path_info_init(&info);
        const gdn_status_t s = gdn_select_path(caps, &p, &t, &info);
        if (size >= MIN_TENSORS) {
            EXPECT(s == GDN_SUCCESS, "tensors.struct_size %zu (>= %zu) rejected", size, (size_t)MIN_TENSORS);
        } else {
            EXPECT(s == GDN_ERROR_INVALID_ARGUMENT && strstr(gdn_last_error(), "tensors->struct_size"),
                   "tensors.struct_size %zu (< %zu) not rejected by name (status %d)", size,
                   (size_t)MIN_TENSORS, (int)s);
        }
    }
    for (size_t size = sizeof(size_t); size <= sizeof(gdn_path_info_t); ++size) {
        gdn_path_info_init(&info);
        info.struct_size = size;
        const gdn_status_t s = gdn_select_path(caps, &p, NULL, &info);
        if (size >= MIN_PATH_INFO) {
            EXPECT(s == GDN_SUCCESS, "path_info.struct_size %zu (>= %zu) rejected", size, (size_t)MIN_PATH_INFO);
        } else {
            EXPECT(s == GDN_ERROR_INVALID_ARGUMENT && strstr(gdn_last_error(), "info->struct_size"),
                   "path_info.struct_size %zu (< %zu) not rejected by name (status %d)", size,
                   (size_t)MIN_PATH_INFO, (int)s);
        }
    }
    for (size_t size = sizeof(size_t); size <= sizeof(gdn_caps_t); ++size) {
        gdn_caps_t c;
        gdn_caps_init(&c);
        c.struct_size = size;
        const gdn_status_t s = gdn_probe(GDN_BACKEND_CPU, 0, &c);
        if (size >= MIN_CAPS) {
            EXPECT(s == GDN_SUCCESS, "caps.struct_size %zu (>= %zu) rejected by gdn_probe", size, (size_t)MIN_CAPS);
        } else {
            EXPECT(s == GDN_ERROR_INVALID_ARGUMENT && strstr(gdn_last_error(), "caps->struct_size"),
                   "caps.struct_size %zu (< %zu) not rejected by name (status %d)", size,
                   (size_t)MIN_CAPS, (int)s);
        }
    }
}

/* Old-size structs on guard pages give the bits of full-size defaults. */
static void check_old_structs(const gdn_caps_t* full_caps) {
    static float out_full[NTOK][HV][DV], st_full[NSEQ][HV][DK][DV];
    static float out_old[NTOK][HV][DV], st_old[NSEQ][HV][DK][DV];
    static double out_ref[NTOK * HV * DV], st_ref[NSEQ * HV * DK * DV];
    gdn_problem_t p;
    gdn_tensors_t t;
    gdn_path_info_t info_full;
    size_t ws_full = 0, ws_old = 0;

    /* Full-size structs with every later field at its default. */
    full_problem(&p);
    full_tensors(&t, &out_full[0][0][0], &st_full[0][0][0][0]);
    memcpy(st_full, state0, sizeof st_full);
    memset(out_full, 0xFF, sizeof out_full);
    gdn_path_info_init(&info_full);
    EXPECT(gdn_select_path(full_caps, &p, &t, &info_full) == GDN_SUCCESS, "full select_path");
    EXPECT(gdn_workspace_size(full_caps, &p, &ws_full) == GDN_SUCCESS, "full workspace_size");
    void* ws = aligned_workspace(ws_full);
    EXPECT(gdn_chunked_recurrence(full_caps, &p, &t, ws, ws_full, NULL) == GDN_SUCCESS, "full run");
    free(ws);

    /* The same problem through structs that end at the first release's size,
     * each right before an unreadable page. */
    guarded_t gc, gp, gt, gi;
    gdn_caps_t* caps = guarded_struct(&gc, MIN_CAPS);
    gdn_problem_t* op = guarded_struct(&gp, MIN_PROBLEM);
    gdn_tensors_t* ot = guarded_struct(&gt, MIN_TENSORS);
    gdn_path_info_t* oi = guarded_struct(&gi, MIN_PATH_INFO);

    memset(caps, 0, MIN_CAPS);
    caps->struct_size = MIN_CAPS;
    EXPECT(gdn_probe(GDN_BACKEND_CPU, 0, caps) == GDN_SUCCESS, "probe into an old-size caps");
    EXPECT(caps->struct_size == MIN_CAPS, "probe changed struct_size to %zu", caps->struct_size);
    EXPECT(caps->backend == GDN_BACKEND_CPU && caps->multiprocessor_count >= 1,
           "old-size caps not filled (backend %d, %d threads)", (int)caps->backend,
           (int)caps->multiprocessor_count);

    memcpy(op, &p, MIN_PROBLEM);
    op->struct_size = MIN_PROBLEM;
    full_tensors(&t, &out_old[0][0][0], &st_old[0][0][0][0]);
    memcpy(ot, &t, MIN_TENSORS);
    ot->struct_size = MIN_TENSORS;
    memcpy(st_old, state0, sizeof st_old);
    memset(out_old, 0xFF, sizeof out_old);

    memset(oi, 0, MIN_PATH_INFO);
    oi->struct_size = MIN_PATH_INFO;
    EXPECT(gdn_select_path(caps, op, ot, oi) == GDN_SUCCESS, "old-size select_path");
    EXPECT(oi->path == info_full.path, "old-size structs took path %d, full-size %d (%s)",
           (int)oi->path, (int)info_full.path, info_full.reason);
    EXPECT(gdn_workspace_size(caps, op, &ws_old) == GDN_SUCCESS, "old-size workspace_size");
    EXPECT(ws_old == ws_full, "workspace %zu bytes with old structs, %zu with full", ws_old, ws_full);
    ws = aligned_workspace(ws_old);
    EXPECT(gdn_chunked_recurrence(caps, op, ot, ws, ws_old, NULL) == GDN_SUCCESS, "old-size run");
    free(ws);

    EXPECT(memcmp(out_full, out_old, sizeof out_full) == 0, "out differs between old and full structs");
    EXPECT(memcmp(st_full, st_old, sizeof st_full) == 0, "state differs between old and full structs");

    /* Both equal the recurrence with the documented defaults. */
    reference(out_ref, st_ref);
    double max_ref = 0, max_diff = 0, max_sref = 0, max_sdiff = 0;
    for (size_t i = 0; i < (size_t)NTOK * HV * DV; ++i) {
        const double d = fabs((double)(&out_old[0][0][0])[i] - out_ref[i]);
        if (fabs(out_ref[i]) > max_ref) max_ref = fabs(out_ref[i]);
        if (!(d <= max_diff)) max_diff = d; /* NaN sticks */
    }
    for (size_t i = 0; i < (size_t)NSEQ * HV * DK * DV; ++i) {
        const double d = fabs((double)(&st_old[0][0][0][0])[i] - st_ref[i]);
        if (fabs(st_ref[i]) > max_sref) max_sref = fabs(st_ref[i]);
        if (!(d <= max_sdiff)) max_sdiff = d;
    }
    printf("old-size structs (caps %zu, problem %zu, tensors %zu, path_info %zu bytes): path %d; "
           "vs FP64: out %.2e, state %.2e (relative)\n",
           (size_t)MIN_CAPS, (size_t)MIN_PROBLEM, (size_t)MIN_TENSORS, (size_t)MIN_PATH_INFO,
           (int)oi->path, max_diff / max_ref, max_sdiff / max_sref);
    EXPECT(max_ref > 0 && max_diff / max_ref <= 1e-5, "out vs FP64: %.3e relative", max_diff / max_ref);
    EXPECT(max_sref > 0 && max_sdiff / max_sref <= 1e-5, "state vs FP64: %.3e relative", max_sdiff / max_sref);

    release(&gc);
    release(&gp);
    release(&gt);
    release(&gi);
}

/* A struct from a newer header: rejected by name, nothing written. */
static void check_future_structs(const gdn_caps_t* caps) {
    static float out[NTOK][HV][DV], st[NSEQ][HV][DK][DV], out0[NTOK][HV][DV], st0[NSEQ][HV][DK][DV];
    struct {
        gdn_problem_t p;
        uint64_t newer_field;
    } fp;
    struct {
        gdn_tensors_t t;
        uint64_t newer_field;
    } ft;
    gdn_problem_t p;
    gdn_tensors_t t;
    size_t ws_bytes = 0;
    full_problem(&p);
    full_tensors(&t, &out[0][0][0], &st[0][0][0][0]);
    EXPECT(gdn_workspace_size(caps, &p, &ws_bytes) == GDN_SUCCESS, "workspace_size");
    unsigned char* ws = aligned_workspace(ws_bytes);
    memset(out, 0xA5, sizeof out);
    memset(st, 0xA5, sizeof st);
    memset(ws, 0xA5, ws_bytes);
    memcpy(out0, out, sizeof out);
    memcpy(st0, st, sizeof st);

    memset(&fp, 0, sizeof fp);
    fp.p = p;
    fp.p.struct_size = sizeof fp;
    gdn_status_t s = gdn_chunked_recurrence(caps, &fp.p, &t, ws, ws_bytes, NULL);
    EXPECT(s == GDN_ERROR_INVALID_ARGUMENT && strstr(gdn_last_error(), "problem->struct_size"),
           "newer problem: status %d", (int)s);

    memset(&ft, 0, sizeof ft);
    ft.t = t;
    ft.t.struct_size = sizeof ft;
    s = gdn_chunked_recurrence(caps, &p, &ft.t, ws, ws_bytes, NULL);
    EXPECT(s == GDN_ERROR_INVALID_ARGUMENT && strstr(gdn_last_error(), "tensors->struct_size"),
           "newer tensors: status %d", (int)s);

    struct {
        gdn_caps_t c;
        uint64_t newer_field;
    } fc;
    memset(&fc, 0, sizeof fc);
    fc.c = *caps;
    fc.c.struct_size = sizeof fc;
    s = gdn_chunked_recurrence(&fc.c, &p, &t, ws, ws_bytes, NULL);
    EXPECT(s == GDN_ERROR_INVALID_ARGUMENT && strstr(gdn_last_error(), "caps->struct_size"),
           "newer caps: status %d", (int)s);

    EXPECT(memcmp(out, out0, sizeof out) == 0, "out written by a rejected call");
    EXPECT(memcmp(st, st0, sizeof st) == 0, "state written by a rejected call");
    for (size_t i = 0; i < ws_bytes; ++i)
        if (ws[i] != 0xA5) {
            EXPECT(0, "workspace byte %zu written by a rejected call", i);
            break;
        }
    free(ws);

    /* Out-structs from a newer header: gdn_probe and gdn_select_path write nothing. */
    uint64_t probe_buf[sizeof(gdn_caps_t) / 8 + 1], probe0[sizeof probe_buf / 8];
    memset(probe_buf, 0x5A, sizeof probe_buf);
    gdn_caps_t newer_caps;
    gdn_caps_init(&newer_caps);
    newer_caps.struct_size = sizeof probe_buf;
    memcpy(probe_buf, &newer_caps.struct_size, sizeof(size_t));
    memcpy(probe0, probe_buf, sizeof probe_buf);
    s = gdn_probe(GDN_BACKEND_CPU, 0, (gdn_caps_t*)(void*)probe_buf);
    EXPECT(s == GDN_ERROR_INVALID_ARGUMENT && strstr(gdn_last_error(), "caps->struct_size"),
           "newer caps to gdn_probe: status %d", (int)s);
    EXPECT(memcmp(probe_buf, probe0, sizeof probe_buf) == 0, "gdn_probe wrote into a rejected caps");

    uint64_t info_buf[sizeof(gdn_path_info_t) / 8 + 1], info0[sizeof info_buf / 8];
    const size_t info_size = sizeof info_buf;
    memset(info_buf, 0x5A, sizeof info_buf);
    memcpy(info_buf, &info_size, sizeof info_size);
    memcpy(info0, info_buf, sizeof info_buf);
    s = gdn_select_path(caps, &p, NULL, (gdn_path_info_t*)(void*)info_buf);
    EXPECT(s == GDN_ERROR_INVALID_ARGUMENT && strstr(gdn_last_error(), "info->struct_size"),
           "newer path_info: status %d", (int)s);
    EXPECT(memcmp(info_buf, info0, sizeof info_buf) == 0, "gdn_select_path wrote into a rejected info");
}

int main(void) {
    EXPECT(gdn_version() / 10000 == GDN_VERSION_MAJOR && gdn_version() >= GDN_VERSION,
           "library %u, header %d", (unsigned)gdn_version(), GDN_VERSION);
    make_inputs();
    gdn_caps_t caps;
    gdn_caps_init(&caps);
    if (gdn_probe(GDN_BACKEND_CPU, 0, &caps) != GDN_SUCCESS) {
        fprintf(stderr, "gdn_probe(CPU) failed: %s\n", gdn_last_error());
        return 1;
    }
    check_minimum_sizes(&caps);
    check_old_structs(&caps);
    check_future_structs(&caps);
    if (failures) {
        fprintf(stderr, "%d failure(s)\n", failures);
        return 1;
    }
    printf("struct evolution: all checks passed\n");
    return 0;
}

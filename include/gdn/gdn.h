/*
 * gdn — the gated delta rule (Gated DeltaNet) for inference engines.
 *
 * The C ABI. C99, no vendor header: a stream is a `void*` holding a
 * `cudaStream_t` or a `hipStream_t` (NULL: the backend's default stream; the
 * CPU backend ignores it and runs synchronously: the call returns when its
 * work is done, on the calling thread and helper threads the backend keeps
 * between calls, caps.multiprocessor_count − 1 at most, asleep while idle).
 *
 * The math (per value head h, token t; S is the [K][V] FP32 state):
 *
 *     S_t = e^{g_t} S_{t-1} + k_t d_tᵀ,   d_t = β_t (v_t − e^{g_t} S_{t-1}ᵀ k_t)
 *     o_t = S_tᵀ (scale · q_t)
 *
 * Conventions that hold for every function below:
 *   - Every function returns a gdn_status_t. On any status other than
 *     GDN_SUCCESS nothing is written: no output, no state slot, no workspace
 *     byte, no out-parameter. gdn_last_error() then holds a message that names
 *     the argument and its value.
 *   - No exception, abort or signal crosses this ABI. A C++ exception inside
 *     the library becomes GDN_ERROR_INTERNAL.
 *   - The library never allocates device memory and never synchronises a
 *     stream. GPU work is enqueued on the caller's stream and the call returns;
 *     pointers must stay valid until that work completes.
 *   - Structs begin with `size_t struct_size`. Initialise each with its
 *     gdn_*_init() function (zero = default for every field), then set what you
 *     need. The library reads min(struct_size, its sizeof) bytes (in whole
 *     8-byte units: every struct size is a multiple of 8) and defaults
 *     the rest, so a program built against an older header keeps working; a
 *     struct_size larger than the library knows is rejected (the caller
 *     expects fields this library would ignore).
 *   - The library is thread-safe: calls from several host threads may run at
 *     once, each with its own workspace (a workspace serves one call at a time).
 */
#ifndef GDN_GDN_H
#define GDN_GDN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(_WIN32) && defined(GDN_BUILDING_SHARED)
#define GDN_API __declspec(dllexport)
#elif defined(_WIN32) && defined(GDN_SHARED)
#define GDN_API __declspec(dllimport)
#elif defined(__GNUC__)
#define GDN_API __attribute__((visibility("default")))
#else
#define GDN_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ version */

#define GDN_VERSION_MAJOR 0
#define GDN_VERSION_MINOR 6
#define GDN_VERSION_PATCH 5
/* MAJOR * 10000 + MINOR * 100 + PATCH */
#define GDN_VERSION (GDN_VERSION_MAJOR * 10000 + GDN_VERSION_MINOR * 100 + GDN_VERSION_PATCH)

/* The version of the library actually loaded, encoded as GDN_VERSION. A
 * header/library mismatch is `gdn_version() / 10000 != GDN_VERSION_MAJOR`
 * (different ABI) or `gdn_version() < GDN_VERSION` (a library older than the
 * header: struct sizes from this header may be rejected). */
GDN_API uint32_t gdn_version(void);

/* ------------------------------------------------------------------- errors */

/* Values are pinned: never renumbered, never reused. Every enum of this header
 * ends with a *_MAX_ENUM_ sentinel that keeps it 32 bits wide in every
 * compiler; the library rejects any value it does not name. */
typedef enum gdn_status_t {
    GDN_SUCCESS = 0,
    GDN_ERROR_INVALID_ARGUMENT = 1,      /* a null pointer, size, stride, flag or struct_size is wrong */
    GDN_ERROR_NOT_SUPPORTED = 2,         /* valid, but this backend/path does not do it (e.g. head dim 96) */
    GDN_ERROR_WORKSPACE_TOO_SMALL = 3,   /* workspace_bytes < gdn_workspace_size() */
    GDN_ERROR_BACKEND_UNAVAILABLE = 4,   /* backend not compiled in, or no such device */
    GDN_ERROR_DEVICE = 5,                /* the GPU runtime reported an error (launch, stream) */
    GDN_ERROR_INTERNAL = 6,              /* a bug in gdn: please report the message */
    GDN_STATUS_MAX_ENUM_ = 0x7FFFFFFF    /* keeps the enum 32-bit; never returned */
} gdn_status_t;

/* A static string naming the status ("invalid argument", ...). Never NULL. */
GDN_API const char* gdn_status_string(gdn_status_t status);

/* The detail of the last failed call on this thread ("v.head_stride (100) <
 * head_dim_v (128)"), or "" after a successful call. Thread-local; the
 * pointer stays valid until the next gdn call on the same thread. */
GDN_API const char* gdn_last_error(void);

/* ----------------------------------------------------------------- enums */

typedef enum gdn_backend_t {
    GDN_BACKEND_CPU = 0,
    GDN_BACKEND_CUDA = 1,
    GDN_BACKEND_HIP = 2,
    GDN_BACKEND_MAX_ENUM_ = 0x7FFFFFFF
} gdn_backend_t;

typedef enum gdn_dtype_t {
    GDN_DTYPE_F32 = 0,
    GDN_DTYPE_F16 = 1,
    GDN_DTYPE_BF16 = 2,
    GDN_DTYPE_MAX_ENUM_ = 0x7FFFFFFF
} gdn_dtype_t;

/* Which key head serves value head h (Hv value heads, Hk key heads). */
typedef enum gdn_head_mapping_t {
    GDN_HEADS_GROUPED = 0,     /* kh = h / (Hv / Hk): flash-linear-attention, Qwen */
    GDN_HEADS_INTERLEAVED = 1, /* kh = h % Hk: llama.cpp */
    GDN_HEADS_MAX_ENUM_ = 0x7FFFFFFF
} gdn_head_mapping_t;

/* Layout of one head's state inside a slot of the pool. */
typedef enum gdn_state_layout_t {
    GDN_STATE_KV = 0,  /* state[k][v]: element (k, v) at k * V + v */
    GDN_STATE_VK = 1,  /* state[v][k]: element (k, v) at v * K + k */
    GDN_STATE_MAX_ENUM_ = 0x7FFFFFFF
} gdn_state_layout_t;

typedef enum gdn_algorithm_t {
    GDN_ALGO_AUTO = 0,        /* the fastest path allowed; gdn_select_path() says which and why
                                 (the CPU, since 0.3.8: in a chunked call each sequence shorter
                                 than the chunked threshold runs the sequential kernel) */
    GDN_ALGO_SEQUENTIAL = 1,  /* token by token, FP32: bit-identical to the sequential kernel */
    GDN_ALGO_CHUNKED = 2,     /* chunked WY form; an error (not a fallback) where no chunked path runs */
    GDN_ALGO_MAX_ENUM_ = 0x7FFFFFFF
} gdn_algorithm_t;

/* The precision the caller allows for the chunked products. A path at least
 * as accurate is always allowed (FP32 sequential is allowed under every mode).
 * The default, FP32, never changes bits by itself. */
typedef enum gdn_precision_t {
    GDN_PRECISION_FP32 = 0,   /* FP32 operands and accumulation */
    GDN_PRECISION_TF32X3 = 1, /* near-FP32 tensor-core products (split operands) */
    GDN_PRECISION_FP16 = 2,   /* FP16 operands, FP32 accumulation (HIP gfx11 WMMA, CUDA tensor
                                 cores; the CPU's emulation of it where the chunked path is
                                 forced, FP32 under auto since 0.3.8) */
    GDN_PRECISION_BF16 = 3,   /* BF16 operands, FP32 accumulation (CUDA tensor cores; elsewhere
                                 served by a more accurate path) */
    GDN_PRECISION_BF16X3 = 4, /* near-FP32 tensor-core products on BF16 operands split into a
                                 value and one or two remainders, FP32 accumulation: ~3-6e-6
                                 from FP64, between TF32X3 (~1e-6) and FP16 (~3e-4) (CUDA with
                                 the shared memory for it, H100/H200 at K = 128; elsewhere a
                                 more accurate path) */
    GDN_PRECISION_FP16X3 = 5, /* near-FP32 tensor-core products on FP16 operands split into a
                                 value and an FP16 remainder, FP32 accumulation:
                                 FP32-class errors at BF16X3's cost (since 0.6.0) (CUDA where
                                 BF16X3's scan fits, since 0.6.1; elsewhere a more accurate
                                 path). Since 0.6.2 its operands run at power-of-two scales
                                 (v and the state at 64x), which keeps small entries out of
                                 FP16's subnormal range (and so FP32-class with
                                 GDN_FLAG_OUTPUT_NORM too) and narrows its range: entries of
                                 v, the state or the delta residuals beyond ~1000 overflow
                                 (non-finite results) */
    GDN_PRECISION_MAX_ENUM_ = 0x7FFFFFFF
} gdn_precision_t;

/* What actually runs. */
typedef enum gdn_path_t {
    GDN_PATH_NONE = 0,
    GDN_PATH_SEQUENTIAL = 1,          /* FP32 token by token */
    GDN_PATH_CHUNKED_FP32 = 2,        /* WY form, C = 32, all FP32 (CPU, CUDA) */
    GDN_PATH_CHUNKED_LOWP_C16 = 3,    /* WY form, C = 16, FP16/BF16 operands, FP32 accumulation
                                         (HIP gfx11 WMMA; CPU emulation of the same numerics,
                                         with GDN_ALGO_CHUNKED) */
    GDN_PATH_CHUNKED_TC = 4,          /* WY form, C = 32, FP32 prep and state; the state products
                                         on tensor cores with BF16/FP16 operands or 3xTF32 split
                                         operands, FP32 accumulation (CUDA sm_80+); since 0.2 */
    GDN_PATH_MAX_ENUM_ = 0x7FFFFFFF
} gdn_path_t;

/* Problem flags (gdn_problem_t.flags). */
#define GDN_FLAG_QK_L2NORM         (1u << 0) /* q ← q / sqrt(Σq² + l2norm_eps), same for k, before use */
#define GDN_FLAG_GATE_FROM_RAW     (1u << 1) /* tensors.g holds a; g = −exp(A_log[h]) · softplus(a + dt_bias[h]) */
#define GDN_FLAG_BETA_FROM_LOGITS  (1u << 2) /* tensors.beta holds b; β = sigmoid(b) */
#define GDN_FLAG_OUTPUT_NORM       (1u << 3) /* out = o / sqrt(mean(o²) + norm_eps) · w ⊙ silu(z), per value head */
#define GDN_FLAG_VALIDATE          (1u << 4) /* GPU backends check device-side contents (cu_seqlens,
                                                slot indices) before computing; slower. The CPU
                                                backend always checks them. */
#define GDN_FLAG_PDL               (1u << 5) /* CUDA sm_90+: programmatic dependent launch. The call's
                                                first kernel is launched as a programmatic dependent
                                                of the work ahead of it in the stream, so that its
                                                launch overlaps the end of the kernel before it; it
                                                waits for that work to complete (griddepcontrol.wait)
                                                before it reads or writes any argument, so the results
                                                are an ordinary launch's, bit for bit. (Only the decode
                                                kernel reads before its wait: a block's first slot index,
                                                through L2, to ask L2 for that slot's state, a hint that
                                                a stale index cannot turn into a wrong result; indices
                                                outside the pool are skipped. Since 0.3.1.) A kernel the
                                                caller launches after the call as a programmatic
                                                dependent may start before the call's last kernel
                                                ends, and must wait in turn before it reads the
                                                outputs or the state. Every CUDA path takes it on
                                                sm_90+; below sm_90, on HIP and on the CPU it
                                                changes nothing. Since 0.3. */
#define GDN_FLAG_TOKEN_STATES      (1u << 6) /* Speculative decoding: tensors.token_state_indices
                                                names, for every token, the slot that receives the
                                                state after that token (or none); the sequences'
                                                own slots are read, not written. Runs the sequential
                                                path (with GDN_FLAG_BLOCK_STATES, see there). Every
                                                backend of this library runs it; backends that run it set
                                                GDN_FEATURE_TOKEN_STATES; elsewhere the call is
                                                GDN_ERROR_NOT_SUPPORTED. Since 0.4. */
#define GDN_FLAG_BLOCK_STATES      (1u << 7) /* Prefix caching, with GDN_FLAG_TOKEN_STATES (alone:
                                                GDN_ERROR_INVALID_ARGUMENT): token_state_indices is
                                                read only at the tokens that end a block of
                                                GDN_STATE_BLOCK tokens of their sequence (its tokens
                                                63, 127, ..., counted from its first token in this
                                                call) and at each sequence's last token; its other
                                                entries are ignored, whatever they hold. These are
                                                states the chunked paths have at their chunk ends, so
                                                a backend that sets GDN_FEATURE_BLOCK_STATES runs its
                                                chunked path as it would without token states (auto
                                                and forced chunked alike); elsewhere the sequential
                                                path runs it, and forced chunked is
                                                GDN_ERROR_NOT_SUPPORTED. Since 0.5. */
#define GDN_FLAG_ALL_ ((1u << 8) - 1u)

/* GDN_FLAG_BLOCK_STATES' block: the tokens of a sequence whose states it can keep are those at
 * positions GDN_STATE_BLOCK - 1, 2 * GDN_STATE_BLOCK - 1, ... (and its last). Every chunked path's
 * chunk length divides it; an engine's cache block of a multiple of it keeps the entries at its
 * block ends and sets the others to -1. */
#define GDN_STATE_BLOCK 64

/* Capability feature bits (gdn_caps_t.features). */
#define GDN_FEATURE_ASYNC_COPY  (1ull << 0) /* cp.async (sm_80+) */
#define GDN_FEATURE_FP16_MMA    (1ull << 1) /* fp16/bf16 tensor-core MMA */
#define GDN_FEATURE_TF32_MMA    (1ull << 2)
#define GDN_FEATURE_WGMMA       (1ull << 3) /* sm_90 warpgroup MMA, and this build holds sm_90a code for it */
#define GDN_FEATURE_GFX11_WMMA  (1ull << 4) /* RDNA3 16x16x16 WMMA */
#define GDN_FEATURE_CPU_THREADS (1ull << 5) /* CPU backend runs multi-threaded */
#define GDN_FEATURE_TOKEN_STATES (1ull << 6) /* the backend runs GDN_FLAG_TOKEN_STATES (every
                                                backend of this library; since 0.4) */
#define GDN_FEATURE_BLOCK_STATES (1ull << 7) /* the backend's chunked paths keep the states that
                                                GDN_FLAG_BLOCK_STATES names (the CPU's since 0.5,
                                                HIP's on gfx11 since 0.5.1, CUDA's on sm_80+
                                                since 0.5.2).
                                                Every backend with GDN_FEATURE_TOKEN_STATES runs the
                                                flag, on its sequential path where this bit is
                                                clear */

/* ------------------------------------------------------------------- probe */

typedef struct gdn_caps_t {
    size_t struct_size;
    gdn_backend_t backend;
    int32_t device;                      /* device ordinal (0 for the CPU) */
    char arch[32];                       /* "sm_90", "gfx1151", "x86_64", ... */
    char name[96];                       /* marketing name of the device */
    int32_t multiprocessor_count;        /* SMs / CUs; for the CPU: worker threads the CPU
                                            backend uses (the caller may lower it, >= 1;
                                            1: the calling thread alone) */
    int32_t warp_size;                   /* 32 or 64; 1 for the CPU */
    size_t shared_mem_per_block_optin;   /* bytes */
    size_t shared_mem_per_multiprocessor;/* bytes */
    uint64_t features;                   /* GDN_FEATURE_* */
    int32_t compute_major, compute_minor;/* CUDA compute capability; gfx major/minor for HIP */
} gdn_caps_t;

static inline void gdn_caps_init(gdn_caps_t* caps) {
    memset(caps, 0, sizeof *caps);
    caps->struct_size = sizeof *caps;
}

/* Fills `caps` for a device of `backend` (device ordinal `device`; 0 for the
 * CPU). Probe once per device and keep the caps: every later call takes them
 * and queries nothing again. Also does the backend's one-time per-device setup
 * (thread-safe, at most once per device). caps->struct_size must be set
 * (gdn_caps_init). Errors: GDN_ERROR_BACKEND_UNAVAILABLE (not compiled in, no
 * such device), GDN_ERROR_INVALID_ARGUMENT (caps NULL, bad struct_size),
 * GDN_ERROR_DEVICE. */
GDN_API gdn_status_t gdn_probe(gdn_backend_t backend, int32_t device, gdn_caps_t* caps);

/* ----------------------------------------------------------------- problem */

/* Shapes and options, no pointers: everything the workspace size and the
 * choice of path depend on. */
typedef struct gdn_problem_t {
    size_t struct_size;
    int32_t num_seqs;          /* sequences in the batch, >= 1 */
    int64_t num_tokens;        /* tokens of all sequences together, >= 1 and < 2^31 */
    int64_t max_seqlen;        /* host hint: the longest sequence (0: num_tokens). A sequence
                                  longer than this is the caller's bug (checked with VALIDATE):
                                  the CUDA chunked path lays out a batch's windows by it */
    int32_t num_k_heads;       /* Hk */
    int32_t num_v_heads;       /* Hv, a multiple of Hk */
    int32_t head_dim_k;        /* K: 64 and 128 on every path; others as the path allows */
    int32_t head_dim_v;        /* V */
    gdn_head_mapping_t head_mapping;
    gdn_dtype_t input_dtype;   /* q, k, v and z */
    gdn_dtype_t gate_dtype;    /* g and beta: F32 or input_dtype */
    gdn_dtype_t output_dtype;  /* out */
    gdn_state_layout_t state_layout;
    int32_t num_state_slots;   /* slots in the pool (0: num_seqs). Without slot indices
                                  sequence i uses slot i, so it must be >= num_seqs */
    gdn_algorithm_t algorithm;
    gdn_precision_t precision;
    uint32_t flags;            /* GDN_FLAG_* */
    float scale;               /* multiplies q; 0: 1/sqrt(head_dim_k) */
    float l2norm_eps;          /* 0: 1e-6 */
    float norm_eps;            /* output norm; 0: 1e-6 */
} gdn_problem_t;

static inline void gdn_problem_init(gdn_problem_t* p) {
    memset(p, 0, sizeof *p);
    p->struct_size = sizeof *p;
    p->num_seqs = 1;
}

/* --------------------------------------------------------------- tensors */

/* Pointers and strides. Strides are in elements; 0 means packed
 * ([token][head][dim] with the head count and dim of the problem). Within a
 * row (one token, one head) elements are contiguous. A stride smaller than the
 * row it steps over is an error. For the CPU backend every pointer is host
 * memory; for GPU backends every pointer is device memory, cu_seqlens and the
 * per-sequence arrays included (no host copy: the call can be graph-captured).
 *
 * Tensor       shape                 dtype
 *   q, k       [tokens][Hk][K]        input_dtype
 *   v          [tokens][Hv][V]        input_dtype
 *   g, beta    [tokens][Hv]           gate_dtype (raw a / b logits with the flags)
 *   out        [tokens][Hv][V]        output_dtype (must not overlap any input)
 *   z          [tokens][Hv][V]        input_dtype (GDN_FLAG_OUTPUT_NORM only)
 *   state      [slots][Hv][K][V] or [slots][Hv][V][K], FP32, read and written in place
 */
typedef struct gdn_tensors_t {
    size_t struct_size;
    const void* q;     int64_t q_token_stride, q_head_stride;
    const void* k;     int64_t k_token_stride, k_head_stride;
    const void* v;     int64_t v_token_stride, v_head_stride;
    const void* g;     int64_t g_token_stride, g_head_stride;
    const void* beta;  int64_t beta_token_stride, beta_head_stride;
    void* out;         int64_t out_token_stride, out_head_stride;
    const void* z;     int64_t z_token_stride, z_head_stride;
    float* state;      int64_t state_slot_stride;  /* elements between slots; 0: Hv*K*V */
    /* num_seqs + 1 non-decreasing offsets, cu_seqlens[0] = 0, cu_seqlens[num_seqs] =
       num_tokens. NULL: every sequence has num_tokens / num_seqs tokens (a decode batch). */
    const int32_t* cu_seqlens;
    /* Optional, num_seqs entries: the pool slot of each sequence. Negative = padding:
       that sequence reads nothing and writes nothing (its out rows are left as they were). */
    const int32_t* state_indices;
    /* Optional, num_seqs entries: nonzero = the sequence starts from a zero state (its slot
       is written, never read). NULL: every sequence continues from its slot. */
    const uint8_t* start_from_zero;
    const float* A_log;        /* [Hv], GDN_FLAG_GATE_FROM_RAW */
    const float* dt_bias;      /* [Hv], GDN_FLAG_GATE_FROM_RAW */
    const float* norm_weight;  /* [V],  GDN_FLAG_OUTPUT_NORM */
    /* GDN_FLAG_TOKEN_STATES only (NULL otherwise), num_tokens entries, one per token in the
       order of the tokens: the slot into which the state after that token is written (all value
       heads); negative = not written. With it a sequence's own slot (state_indices) is read and
       never written: the state after its last token lands where that token's entry says (which
       may be its own slot). The slots written in a call are distinct, and none is another
       sequence's own slot. A padding sequence writes nothing. With GDN_FLAG_BLOCK_STATES only
       the entries at block ends and last tokens are read (and checked). Since 0.4. */
    const int32_t* token_state_indices;
} gdn_tensors_t;

static inline void gdn_tensors_init(gdn_tensors_t* t) {
    memset(t, 0, sizeof *t);
    t->struct_size = sizeof *t;
}

/* ------------------------------------------------------------ path choice */

typedef struct gdn_path_info_t {
    size_t struct_size;
    gdn_path_t path;           /* what gdn_chunked_recurrence() runs for this problem */
    int32_t chunk_size;        /* 0 for the sequential path */
    gdn_precision_t precision; /* the precision of what runs */
    char reason[192];          /* why ("auto: 2048 tokens >= 128 and 132 SMs fit the scan in one wave") */
} gdn_path_info_t;

static inline void gdn_path_info_init(gdn_path_info_t* info) {
    memset(info, 0, sizeof *info);
    info->struct_size = sizeof *info;
}

/* Which path gdn_chunked_recurrence() takes for `problem` (and, if not NULL,
 * `tensors`: some paths need aligned pointers or row strides divisible by 8)
 * on the device of `caps`, and why. With tensors == NULL the answer assumes
 * tensors every path accepts. Pure: queries no device, reads no tensor data.
 * Errors: those of the validation (a forced `chunked` that cannot run here is
 * GDN_ERROR_NOT_SUPPORTED with the reason). */
GDN_API gdn_status_t gdn_select_path(const gdn_caps_t* caps, const gdn_problem_t* problem,
                                     const gdn_tensors_t* tensors, gdn_path_info_t* info);

/* ------------------------------------------------------------------- run */

/* Workspace alignment the library needs (bytes). */
#define GDN_WORKSPACE_ALIGNMENT 256

/* The scratch bytes gdn_chunked_recurrence() needs for `problem` on `caps`
 * (0 is possible: then workspace may be NULL). Depends on the shapes and on
 * the path they select (algorithm, precision: the CUDA BF16/FP16 scan needs
 * more than FP32), and is bounded: long prompts are processed in
 * super-blocks, so a 1M-token prompt needs no more than a 2K one. Size it
 * once for the largest problem you run, with the precision you run it at; a
 * larger workspace is always fine. On the CUDA chunked path a larger one is
 * also used: with two (four) times these bytes, prompts of at least 32K (64K)
 * tokens run in fewer, longer super-blocks, with the same bits (H200, 32K
 * tokens, BF16: ~3.5% faster; 64K: ~6.5%). */
GDN_API gdn_status_t gdn_workspace_size(const gdn_caps_t* caps, const gdn_problem_t* problem,
                                        size_t* bytes);

/* Runs the gated delta rule over every sequence of the batch: reads q, k, v,
 * g, beta (and z), reads each sequence's state slot (unless it starts from
 * zero), writes out and the final state back into the same slot (with
 * GDN_FLAG_TOKEN_STATES: the state after each token into the slot that token
 * names, and nothing into the sequence's own slot). The path is the one
 * gdn_select_path() reports (the sequential one for decode).
 *
 * Ownership: nothing is retained after the call returns; GPU work is enqueued
 * on `stream` (a cudaStream_t / hipStream_t; NULL = default stream) and the
 * caller keeps every buffer alive until it completes. The workspace
 * (`workspace_bytes` >= gdn_workspace_size(), aligned to
 * GDN_WORKSPACE_ALIGNMENT, device memory for GPU backends) is scratch: its
 * contents before and after are irrelevant, and one workspace serves one call
 * at a time.
 *
 * Alignment: every pointer aligned to its element size; the CUDA/HIP chunked
 * paths need more where they load vectors and fall back (auto) or fail
 * (forced) otherwise.
 *
 * Device-side contents (cu_seqlens order, slot indices in range, no two
 * sequences sharing a slot) are the caller's contract; GDN_FLAG_VALIDATE
 * checks them on GPU backends. No two sequences may name the same slot.
 *
 * Errors (nothing written): GDN_ERROR_INVALID_ARGUMENT, GDN_ERROR_NOT_SUPPORTED,
 * GDN_ERROR_WORKSPACE_TOO_SMALL, GDN_ERROR_BACKEND_UNAVAILABLE, GDN_ERROR_DEVICE
 * (a launch failed; for GPU backends work already enqueued may have run). */
GDN_API gdn_status_t gdn_chunked_recurrence(const gdn_caps_t* caps, const gdn_problem_t* problem,
                                            const gdn_tensors_t* tensors, void* workspace,
                                            size_t workspace_bytes, void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GDN_GDN_H */

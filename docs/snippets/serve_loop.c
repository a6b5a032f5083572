/* docs/integration.md, "Prompt and decode in one state pool" and "The
 * workspace, sized once": one gdn layer as an engine drives it. Two requests
 * are prefilled together (a varlen batch), then decoded token by token in a
 * fixed-size batch with padding rows, all in one pool of state slots.
 *
 * The check: each request's outputs and final state equal those of one
 * sequential run over its whole token stream (prompt + generated tokens). */
#include "snippet_util.h"

enum { HK = 2, HV = 4, DK = 128, DV = 128 };
enum { SLOTS = 8, MAX_SEQS = 4, MAX_BATCH_TOKENS = 512, DECODE_STEPS = 5 };

/* [doc:setup] */
/* One Gated DeltaNet layer of the engine. */
typedef struct {
    gdn_caps_t caps;        /* probed once, passed to every call */
    float* pool;            /* state slots [SLOTS][HV][DK][DV], FP32, engine-owned */
    void* workspace;        /* scratch, sized once */
    size_t workspace_bytes;
} gdn_layer;

/* The shapes of one call; everything else keeps gdn_problem_init()'s default. */
static gdn_problem_t layer_problem(int32_t num_seqs, int64_t num_tokens, int64_t max_seqlen) {
    gdn_problem_t p;
    gdn_problem_init(&p);
    p.num_seqs = num_seqs;
    p.num_tokens = num_tokens;
    p.max_seqlen = max_seqlen;      /* host hint: the longest sequence of the batch */
    p.num_k_heads = HK;
    p.num_v_heads = HV;
    p.head_dim_k = DK;
    p.head_dim_v = DV;
    p.num_state_slots = SLOTS;      /* the whole pool; sequences pick slots by index */
    return p;
}

static int layer_init(gdn_layer* L) {
    gdn_caps_init(&L->caps);
    if (gdn_probe(GDN_BACKEND_CPU, 0, &L->caps) != GDN_SUCCESS) return -1;
    L->pool = calloc((size_t)SLOTS * HV * DK * DV, sizeof(float));
    /* The size depends on shapes only and is bounded (long prompts run in
     * super-blocks): size it once for the largest batch of each kind the
     * engine schedules, keep the larger, allocate once. */
    gdn_problem_t prefill = layer_problem(MAX_SEQS, MAX_BATCH_TOKENS, MAX_BATCH_TOKENS);
    gdn_problem_t decode = layer_problem(MAX_SEQS, MAX_SEQS, 1);
    size_t prefill_bytes = 0, decode_bytes = 0;
    if (gdn_workspace_size(&L->caps, &prefill, &prefill_bytes) != GDN_SUCCESS ||
        gdn_workspace_size(&L->caps, &decode, &decode_bytes) != GDN_SUCCESS)
        return -1;
    L->workspace_bytes = prefill_bytes > decode_bytes ? prefill_bytes : decode_bytes;
    L->workspace = snippet_workspace(L->workspace_bytes);  /* device memory on a GPU backend */
    return 0;
}
/* [/doc:setup] */

/* q/k/v/g/beta rows of a batch; out rows. Packed [token][head][dim]. */
typedef struct {
    float *q, *k, *v, *g, *beta, *out;
} rows_t;

static gdn_tensors_t layer_tensors(const gdn_layer* L, const rows_t* r) {
    gdn_tensors_t t;
    gdn_tensors_init(&t);
    t.q = r->q;
    t.k = r->k;
    t.v = r->v;
    t.g = r->g;
    t.beta = r->beta;
    t.out = r->out;
    t.state = L->pool;
    return t;
}

/* [doc:prefill] */
/* Two new requests of 37 and 150 prompt tokens, packed back to back: row t of
 * q/k/v/g/beta/out is token t of the batch. */
static gdn_status_t prefill(gdn_layer* L, const rows_t* rows, void* stream) {
    static const int32_t cu_seqlens[3] = {0, 37, 187}; /* device memory on a GPU backend */
    static const int32_t slots[2] = {5, 2};            /* the slots the cache manager gave them */
    static const uint8_t fresh[2] = {1, 1};            /* new requests: start from a zero state;
                                                          the slots' old contents are not read */
    gdn_problem_t p = layer_problem(2, 187, 150);
    gdn_tensors_t t = layer_tensors(L, rows);
    t.cu_seqlens = cu_seqlens;
    t.state_indices = slots;
    t.start_from_zero = fresh;
    return gdn_chunked_recurrence(&L->caps, &p, &t, L->workspace, L->workspace_bytes, stream);
}
/* [/doc:prefill] */

/* [doc:decode] */
/* One new token for each running request, in a batch of fixed size
 * MAX_SEQS: rows without a request are padding (slot -1: nothing read,
 * nothing written), so every step has the same shapes (one CUDA graph). */
static gdn_status_t decode_step(gdn_layer* L, const rows_t* rows, void* stream) {
    static const int32_t slots[MAX_SEQS] = {5, 2, -1, -1};
    gdn_problem_t p = layer_problem(MAX_SEQS, MAX_SEQS, 1);
    gdn_tensors_t t = layer_tensors(L, rows);
    t.cu_seqlens = NULL;        /* NULL: num_tokens / num_seqs = 1 token per sequence */
    t.state_indices = slots;    /* the same slots the prefill wrote */
    return gdn_chunked_recurrence(&L->caps, &p, &t, L->workspace, L->workspace_bytes, stream);
}
/* [/doc:decode] */

/* ------------------------------------------------------------- the check */

enum { LEN0 = 37, LEN1 = 150, NPROMPT = LEN0 + LEN1 };

static void alloc_rows(rows_t* r, size_t tokens) {
    r->q = malloc(tokens * HK * DK * sizeof(float));
    r->k = malloc(tokens * HK * DK * sizeof(float));
    r->v = malloc(tokens * HV * DV * sizeof(float));
    r->g = malloc(tokens * HV * sizeof(float));
    r->beta = malloc(tokens * HV * sizeof(float));
    r->out = malloc(tokens * HV * DV * sizeof(float));
}

static void copy_row(rows_t* dst, size_t dt, const rows_t* src, size_t st) {
    memcpy(dst->q + dt * HK * DK, src->q + st * HK * DK, HK * DK * sizeof(float));
    memcpy(dst->k + dt * HK * DK, src->k + st * HK * DK, HK * DK * sizeof(float));
    memcpy(dst->v + dt * HV * DV, src->v + st * HV * DV, HV * DV * sizeof(float));
    memcpy(dst->g + dt * HV, src->g + st * HV, HV * sizeof(float));
    memcpy(dst->beta + dt * HV, src->beta + st * HV, HV * sizeof(float));
}

int main(void) {
    gdn_layer L;
    SNIPPET_CHECK(layer_init(&L) == 0, "layer_init");
    /* Garbage in every slot: the prefill must not read its slots, the
     * padding rows must leave theirs alone. */
    snippet_fill(L.pool, (size_t)SLOTS * HV * DK * DV, -1.0f, 1.0f);
    float* pool0 = malloc((size_t)SLOTS * HV * DK * DV * sizeof(float));
    memcpy(pool0, L.pool, (size_t)SLOTS * HV * DK * DV * sizeof(float));

    /* Each request's whole stream: prompt tokens then DECODE_STEPS tokens. */
    const int len[2] = {LEN0, LEN1};
    rows_t stream[2];
    for (int r = 0; r < 2; ++r) {
        const size_t n = (size_t)len[r] + DECODE_STEPS;
        alloc_rows(&stream[r], n);
        snippet_fill(stream[r].q, n * HK * DK, -0.5f, 0.5f);
        snippet_fill(stream[r].k, n * HK * DK, -0.1f, 0.1f);
        snippet_fill(stream[r].v, n * HV * DV, -1.0f, 1.0f);
        snippet_fill(stream[r].g, n * HV, -0.3f, -0.01f);
        snippet_fill(stream[r].beta, n * HV, 0.1f, 0.9f);
    }

    rows_t batch;
    alloc_rows(&batch, NPROMPT);
    for (int i = 0; i < LEN0; ++i) copy_row(&batch, (size_t)i, &stream[0], (size_t)i);
    for (int i = 0; i < LEN1; ++i) copy_row(&batch, (size_t)(LEN0 + i), &stream[1], (size_t)i);
    SNIPPET_CHECK(prefill(&L, &batch, NULL) == GDN_SUCCESS, "prefill");
    float* got_out[2];
    for (int r = 0; r < 2; ++r) got_out[r] = malloc(((size_t)len[r] + DECODE_STEPS) * HV * DV * sizeof(float));
    memcpy(got_out[0], batch.out, (size_t)LEN0 * HV * DV * sizeof(float));
    memcpy(got_out[1], batch.out + (size_t)LEN0 * HV * DV, (size_t)LEN1 * HV * DV * sizeof(float));

    rows_t step;
    alloc_rows(&step, MAX_SEQS);
    memset(step.q, 0, MAX_SEQS * HK * DK * sizeof(float));
    memset(step.k, 0, MAX_SEQS * HK * DK * sizeof(float));
    memset(step.v, 0, MAX_SEQS * HV * DV * sizeof(float));
    memset(step.g, 0, MAX_SEQS * HV * sizeof(float));
    memset(step.beta, 0, MAX_SEQS * HV * sizeof(float));
    for (int s = 0; s < DECODE_STEPS; ++s) {
        for (int r = 0; r < 2; ++r) copy_row(&step, (size_t)r, &stream[r], (size_t)(len[r] + s));
        SNIPPET_CHECK(decode_step(&L, &step, NULL) == GDN_SUCCESS, "decode step %d", s);
        for (int r = 0; r < 2; ++r)
            memcpy(got_out[r] + ((size_t)len[r] + s) * HV * DV, step.out + (size_t)r * HV * DV,
                   HV * DV * sizeof(float));
    }

    /* The same streams, each as one sequence from a zero state, sequential. */
    const int slot_of[2] = {5, 2};
    for (int r = 0; r < 2; ++r) {
        const int64_t n = len[r] + DECODE_STEPS;
        float* state = calloc((size_t)HV * DK * DV, sizeof(float));
        gdn_problem_t p = layer_problem(1, n, n);
        p.num_state_slots = 1;
        p.algorithm = GDN_ALGO_SEQUENTIAL;
        gdn_tensors_t t;
        gdn_tensors_init(&t);
        t.q = stream[r].q;
        t.k = stream[r].k;
        t.v = stream[r].v;
        t.g = stream[r].g;
        t.beta = stream[r].beta;
        t.out = stream[r].out;
        t.state = state;
        SNIPPET_CHECK(gdn_chunked_recurrence(&L.caps, &p, &t, L.workspace, L.workspace_bytes, NULL) ==
                          GDN_SUCCESS,
                      "whole-stream run");
        const double e_out = snippet_rel_diff(got_out[r], stream[r].out, (size_t)n * HV * DV);
        const double e_state =
            snippet_rel_diff(L.pool + (size_t)slot_of[r] * HV * DK * DV, state, (size_t)HV * DK * DV);
        printf("request %d (%d prompt + %d decode tokens, slot %d): out %.2e, state %.2e vs one "
               "sequential run\n",
               r, len[r], DECODE_STEPS, slot_of[r], e_out, e_state);
        SNIPPET_CHECK(e_out <= 1e-5 && e_state <= 1e-5, "request %d differs", r);
        free(state);
    }
    /* Slots other than 5 and 2 were never written. */
    for (int s = 0; s < SLOTS; ++s) {
        if (s == 5 || s == 2) continue;
        const size_t off = (size_t)s * HV * DK * DV;
        SNIPPET_CHECK(memcmp(L.pool + off, pool0 + off, (size_t)HV * DK * DV * sizeof(float)) == 0,
                      "slot %d was written", s);
    }
    printf("serve_loop: prefill + %d decode steps in one pool, workspace %zu bytes sized once\n",
           DECODE_STEPS, L.workspace_bytes);
    return 0;
}

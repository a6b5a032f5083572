/* docs/integration.md, "Speculative decoding: the state after every token":
 * three requests decoded with 3 draft tokens per step (4 tokens: the one the
 * engine is sure of and 3 drafts). Each request owns 4 slots, one per token of
 * a step; the state after token j of a step goes to slot j, and the next step
 * continues from the slot of the last token the target model accepted
 * (vLLM's layout of spec-decode state slots).
 *
 * The check: each request's outputs at its accepted tokens and its state after
 * the last accepted token equal those of one sequential run over the accepted
 * tokens alone. */
#include "snippet_util.h"

enum { HK = 1, HV = 2, DK = 64, DV = 64 };
enum { NREQ = 3, STEP = 4, SLOTS = NREQ * STEP, STEPS = 6 };

/* q/k/v/g/beta/out rows, packed [token][head][dim]. */
typedef struct {
    float *q, *k, *v, *g, *beta, *out;
} rows_t;

static void alloc_rows(rows_t* r, size_t tokens) {
    r->q = calloc(tokens * HK * DK, sizeof(float));
    r->k = calloc(tokens * HK * DK, sizeof(float));
    r->v = calloc(tokens * HV * DV, sizeof(float));
    r->g = calloc(tokens * HV, sizeof(float));
    r->beta = calloc(tokens * HV, sizeof(float));
    r->out = calloc(tokens * HV * DV, sizeof(float));
}

static void copy_row(rows_t* dst, size_t dt, const rows_t* src, size_t st) {
    memcpy(dst->q + dt * HK * DK, src->q + st * HK * DK, HK * DK * sizeof(float));
    memcpy(dst->k + dt * HK * DK, src->k + st * HK * DK, HK * DK * sizeof(float));
    memcpy(dst->v + dt * HV * DV, src->v + st * HV * DV, HV * DV * sizeof(float));
    memcpy(dst->g + dt * HV, src->g + st * HV, HV * sizeof(float));
    memcpy(dst->beta + dt * HV, src->beta + st * HV, HV * sizeof(float));
}

static gdn_problem_t problem_of(int32_t num_seqs, int64_t num_tokens) {
    gdn_problem_t p;
    gdn_problem_init(&p);
    p.num_seqs = num_seqs;
    p.num_tokens = num_tokens;
    p.num_k_heads = HK;
    p.num_v_heads = HV;
    p.head_dim_k = DK;
    p.head_dim_v = DV;
    p.num_state_slots = SLOTS;
    return p;
}

/* [doc:step] */
/* One speculative step: STEP tokens of each of NREQ requests, packed request
 * after request (equal lengths: cu_seqlens NULL). Request n's slots are
 * spec_slots[n * STEP + 0..STEP-1]; it continues from the slot of the last
 * token accepted at the previous step, spec_slots[n * STEP + from[n]], and the
 * state after its token j goes to spec_slots[n * STEP + j] (one of them is the
 * slot it reads: it has read it by then). */
static gdn_status_t spec_step(const gdn_caps_t* caps, float* pool, const rows_t* rows,
                              const int32_t* spec_slots, const int32_t* from,
                              void* workspace, size_t workspace_bytes, void* stream) {
    int32_t own[NREQ]; /* device memory on a GPU backend, as spec_slots */
    for (int n = 0; n < NREQ; ++n) own[n] = spec_slots[n * STEP + from[n]];
    gdn_problem_t p = problem_of(NREQ, NREQ * STEP);
    p.max_seqlen = STEP;
    p.flags |= GDN_FLAG_TOKEN_STATES;
    gdn_tensors_t t;
    gdn_tensors_init(&t);
    t.q = rows->q;
    t.k = rows->k;
    t.v = rows->v;
    t.g = rows->g;
    t.beta = rows->beta;
    t.out = rows->out;
    t.state = pool;
    t.state_indices = own;               /* read, never written */
    t.token_state_indices = spec_slots;  /* the slot table: one entry per token, written */
    return gdn_chunked_recurrence(caps, &p, &t, workspace, workspace_bytes, stream);
}
/* [/doc:step] */

int main(void) {
    gdn_caps_t caps;
    gdn_caps_init(&caps);
    SNIPPET_CHECK(gdn_probe(GDN_BACKEND_CPU, 0, &caps) == GDN_SUCCESS, "probe");
    SNIPPET_CHECK((caps.features & GDN_FEATURE_TOKEN_STATES) != 0, "the CPU backend runs GDN_FLAG_TOKEN_STATES");

    const size_t slot_floats = (size_t)HV * DK * DV;
    float* pool = calloc((size_t)SLOTS * slot_floats, sizeof(float));
    /* Each request starts from a state of its own (its prompt's), in slot 0
     * of its row of the table. */
    int32_t spec_slots[NREQ * STEP];
    for (int i = 0; i < NREQ * STEP; ++i) spec_slots[i] = (int32_t)(SLOTS - 1 - i);
    for (int n = 0; n < NREQ; ++n)
        snippet_fill(pool + (size_t)spec_slots[n * STEP] * slot_floats, slot_floats, -0.3f, 0.3f);
    float* start = malloc((size_t)SLOTS * slot_floats * sizeof(float));
    memcpy(start, pool, (size_t)SLOTS * slot_floats * sizeof(float));

    /* The workspace of one step, sized once (the flag needs no more). */
    gdn_problem_t sizing = problem_of(NREQ, NREQ * STEP);
    size_t bytes = 0;
    SNIPPET_CHECK(gdn_workspace_size(&caps, &sizing, &bytes) == GDN_SUCCESS, "workspace size");
    void* workspace = snippet_workspace(bytes);

    /* Every token each request is shown (STEP per step), and which it keeps. */
    rows_t shown[NREQ], kept[NREQ];
    size_t nkept[NREQ] = {0};
    for (int n = 0; n < NREQ; ++n) {
        const size_t total = (size_t)STEPS * STEP;
        alloc_rows(&shown[n], total);
        alloc_rows(&kept[n], total);
        snippet_fill(shown[n].q, total * HK * DK, -0.5f, 0.5f);
        snippet_fill(shown[n].k, total * HK * DK, -0.15f, 0.15f);
        snippet_fill(shown[n].v, total * HV * DV, -1.0f, 1.0f);
        snippet_fill(shown[n].g, total * HV, -0.3f, -0.01f);
        snippet_fill(shown[n].beta, total * HV, 0.1f, 0.9f);
    }
    float* kept_out[NREQ];
    for (int n = 0; n < NREQ; ++n) kept_out[n] = malloc((size_t)STEPS * STEP * HV * DV * sizeof(float));

    rows_t batch;
    alloc_rows(&batch, NREQ * STEP);
    int32_t from[NREQ] = {0, 0, 0};
    for (int s = 0; s < STEPS; ++s) {
        for (int n = 0; n < NREQ; ++n)
            for (int j = 0; j < STEP; ++j) copy_row(&batch, (size_t)(n * STEP + j), &shown[n], (size_t)(s * STEP + j));
        SNIPPET_CHECK(spec_step(&caps, pool, &batch, spec_slots, from, workspace, bytes, NULL) == GDN_SUCCESS,
                      "step %d", s);
        /* The target model accepts 1..STEP tokens of each request. */
        for (int n = 0; n < NREQ; ++n) {
            const int accepted = 1 + (s * 7 + n * 3) % STEP;
            for (int j = 0; j < accepted; ++j) {
                copy_row(&kept[n], nkept[n], &shown[n], (size_t)(s * STEP + j));
                memcpy(kept_out[n] + nkept[n] * HV * DV, batch.out + (size_t)(n * STEP + j) * HV * DV,
                       HV * DV * sizeof(float));
                ++nkept[n];
            }
            from[n] = accepted - 1;
        }
    }

    /* Each request's kept tokens, run straight from its starting state. */
    for (int n = 0; n < NREQ; ++n) {
        float* state = malloc(slot_floats * sizeof(float));
        memcpy(state, start + (size_t)spec_slots[n * STEP] * slot_floats, slot_floats * sizeof(float));
        gdn_problem_t p = problem_of(1, (int64_t)nkept[n]);
        p.num_state_slots = 1;
        p.algorithm = GDN_ALGO_SEQUENTIAL;
        gdn_tensors_t t;
        gdn_tensors_init(&t);
        t.q = kept[n].q;
        t.k = kept[n].k;
        t.v = kept[n].v;
        t.g = kept[n].g;
        t.beta = kept[n].beta;
        t.out = kept[n].out;
        t.state = state;
        size_t need = 0;
        SNIPPET_CHECK(gdn_workspace_size(&caps, &p, &need) == GDN_SUCCESS, "workspace size");
        void* ws = snippet_workspace(need);
        SNIPPET_CHECK(gdn_chunked_recurrence(&caps, &p, &t, ws, need, NULL) == GDN_SUCCESS, "straight run");
        const double e_out = snippet_rel_diff(kept_out[n], kept[n].out, nkept[n] * HV * DV);
        const double e_state =
            snippet_rel_diff(pool + (size_t)spec_slots[n * STEP + from[n]] * slot_floats, state, slot_floats);
        printf("request %d: %zu of %d tokens kept: out %.2e, state %.2e vs one sequential run\n", n, nkept[n],
               STEPS * STEP, e_out, e_state);
        SNIPPET_CHECK(e_out == 0.0 && e_state == 0.0, "request %d differs", n);
        free(ws);
        free(state);
    }
    printf("spec_decode: every request's kept tokens match a straight run, bit for bit\n");
    return 0;
}

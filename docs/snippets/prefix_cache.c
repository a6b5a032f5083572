/* docs/integration.md, "Prefix caching: the state at every block end":
 * request A's 200-token prompt runs in one call that also keeps its state
 * after tokens 64, 128 and 192 (the ends of cache blocks of GDN_STATE_BLOCK
 * tokens) in slots of a block pool, and its final state in its own slot.
 * Request B shares A's first 128 tokens: it starts from the state kept after
 * token 128 and runs only its own 72 tokens.
 *
 * The check: B's outputs and final state equal those of B's whole prompt run
 * from the start, bit for bit (on the CPU backend, whose chunked path keeps
 * the block states: both runs take it, with the same chunks). */
#include "snippet_util.h"

enum { HK = 1, HV = 2, DK = 64, DV = 64 };
enum { PROMPT = 200, SHARED = 128, BLOCKS = PROMPT / GDN_STATE_BLOCK, SLOTS = 2 + BLOCKS };

static gdn_tensors_t rows(const float* q, const float* k, const float* v, const float* g, const float* beta,
                          float* out, float* pool) {
    gdn_tensors_t t;
    gdn_tensors_init(&t);
    t.q = q;
    t.k = k;
    t.v = v;
    t.g = g;
    t.beta = beta;
    t.out = out;
    t.state = pool;
    return t;
}

static gdn_problem_t prompt_problem(int64_t tokens) {
    gdn_problem_t p;
    gdn_problem_init(&p);
    p.num_tokens = tokens;
    p.num_k_heads = HK;
    p.num_v_heads = HV;
    p.head_dim_k = DK;
    p.head_dim_v = DV;
    p.num_state_slots = SLOTS;
    return p;
}

/* [doc:prefill] */
/* A prompt of `tokens` tokens that continues the state in slot `from` and
 * leaves its final state in slot `to`; the state after each whole block of
 * GDN_STATE_BLOCK tokens goes to block_slots[b] (-1: not kept). Only the
 * entries of token_state_indices at block ends and at the last token are
 * read: the others need no value. */
static gdn_status_t prefill(const gdn_caps_t* caps, gdn_tensors_t t, int64_t tokens, int32_t from, int32_t to,
                            const int32_t* block_slots, int32_t* token_slots, void* workspace,
                            size_t workspace_bytes) {
    for (int64_t i = 0; i < tokens; ++i) token_slots[i] = -1;
    for (int64_t b = 0; (b + 1) * GDN_STATE_BLOCK <= tokens; ++b)
        token_slots[(b + 1) * GDN_STATE_BLOCK - 1] = block_slots[b];
    token_slots[tokens - 1] = to; /* the last token: the request's running state */
    gdn_problem_t p = prompt_problem(tokens);
    p.flags |= GDN_FLAG_TOKEN_STATES | GDN_FLAG_BLOCK_STATES;
    t.state_indices = &from; /* read, never written (host memory on the CPU) */
    t.token_state_indices = token_slots;
    return gdn_chunked_recurrence(caps, &p, &t, workspace, workspace_bytes, NULL);
}
/* [/doc:prefill] */

int main(void) {
    gdn_caps_t caps;
    gdn_caps_init(&caps);
    SNIPPET_CHECK(gdn_probe(GDN_BACKEND_CPU, 0, &caps) == GDN_SUCCESS, "probe");
    SNIPPET_CHECK((caps.features & GDN_FEATURE_BLOCK_STATES) != 0, "the CPU's chunked path keeps block states");

    const size_t slot_floats = (size_t)HV * DK * DV;
    /* Slot 0: the start state (both requests start from it); slot 1: the
     * running state of whichever request ran last; slots 2..: cache blocks. */
    float* pool = calloc((size_t)SLOTS * slot_floats, sizeof(float));
    snippet_fill(pool, slot_floats, -0.3f, 0.3f);
    float *qa = malloc(PROMPT * HK * DK * sizeof(float)), *ka = malloc(PROMPT * HK * DK * sizeof(float));
    float *va = malloc(PROMPT * HV * DV * sizeof(float)), *ga = malloc(PROMPT * HV * sizeof(float));
    float* ba = malloc(PROMPT * HV * sizeof(float));
    snippet_fill(qa, PROMPT * HK * DK, -0.5f, 0.5f);
    snippet_fill(ka, PROMPT * HK * DK, -0.15f, 0.15f);
    snippet_fill(va, PROMPT * HV * DV, -1.0f, 1.0f);
    snippet_fill(ga, PROMPT * HV, -0.3f, -0.01f);
    snippet_fill(ba, PROMPT * HV, 0.1f, 0.9f);
    /* Request B: A's first SHARED tokens, then tokens of its own. */
    float *qb = malloc(PROMPT * HK * DK * sizeof(float)), *kb = malloc(PROMPT * HK * DK * sizeof(float));
    float *vb = malloc(PROMPT * HV * DV * sizeof(float)), *gb = malloc(PROMPT * HV * sizeof(float));
    float* bb = malloc(PROMPT * HV * sizeof(float));
    memcpy(qb, qa, PROMPT * HK * DK * sizeof(float));
    memcpy(kb, ka, PROMPT * HK * DK * sizeof(float));
    memcpy(vb, va, PROMPT * HV * DV * sizeof(float));
    memcpy(gb, ga, PROMPT * HV * sizeof(float));
    memcpy(bb, ba, PROMPT * HV * sizeof(float));
    snippet_fill(qb + SHARED * HK * DK, (PROMPT - SHARED) * HK * DK, -0.5f, 0.5f);
    snippet_fill(vb + SHARED * HV * DV, (PROMPT - SHARED) * HV * DV, -1.0f, 1.0f);

    gdn_problem_t sizing = prompt_problem(PROMPT);
    size_t bytes = 0;
    SNIPPET_CHECK(gdn_workspace_size(&caps, &sizing, &bytes) == GDN_SUCCESS, "workspace size");
    void* workspace = snippet_workspace(bytes);
    int32_t token_slots[PROMPT];
    float* out = malloc(PROMPT * HV * DV * sizeof(float));

    /* A, from slot 0 into slot 1, its blocks in slots 2, 3, 4. */
    const int32_t a_blocks[BLOCKS] = {2, 3, 4};
    SNIPPET_CHECK(prefill(&caps, rows(qa, ka, va, ga, ba, out, pool), PROMPT, 0, 1, a_blocks, token_slots, workspace,
                          bytes) == GDN_SUCCESS,
                  "request A");

    /* B hits the cache for SHARED tokens (2 blocks): it continues from slot 3,
     * the state after token 128, with its remaining tokens; its own block (the
     * third) is not kept. */
    const int32_t b_blocks[BLOCKS] = {-1, -1, -1};
    const size_t skip = SHARED;
    SNIPPET_CHECK(prefill(&caps,
                          rows(qb + skip * HK * DK, kb + skip * HK * DK, vb + skip * HV * DV, gb + skip * HV,
                               bb + skip * HV, out + skip * HV * DV, pool),
                          PROMPT - SHARED, 3, 1, b_blocks, token_slots, workspace, bytes) == GDN_SUCCESS,
                  "request B from the cache");

    /* B straight through: all of its tokens from slot 0 (a plain call). */
    float* pool2 = calloc((size_t)SLOTS * slot_floats, sizeof(float));
    memcpy(pool2, pool, slot_floats * sizeof(float));
    float* out2 = malloc(PROMPT * HV * DV * sizeof(float));
    gdn_problem_t p = prompt_problem(PROMPT);
    gdn_tensors_t t = rows(qb, kb, vb, gb, bb, out2, pool2);
    SNIPPET_CHECK(gdn_chunked_recurrence(&caps, &p, &t, workspace, bytes, NULL) == GDN_SUCCESS, "request B straight");

    const double e_out = snippet_rel_diff(out + skip * HV * DV, out2 + skip * HV * DV, (PROMPT - SHARED) * HV * DV);
    const double e_state = snippet_rel_diff(pool + slot_floats, pool2, slot_floats);
    printf("request B from the state after token %d: out %.2e, state %.2e vs its whole prompt\n", SHARED, e_out,
           e_state);
    SNIPPET_CHECK(e_out == 0.0 && e_state == 0.0, "request B differs");
    printf("prefix_cache: the cached block state gives the straight run's bits\n");
    free(qa), free(ka), free(va), free(ga), free(ba), free(qb), free(kb), free(vb), free(gb), free(bb);
    free(out), free(out2), free(pool), free(pool2), free(workspace);
    return 0;
}

/* docs/integration.md, "Head mapping: grouped or interleaved": with Hv = 3·Hk
 * value heads, value head h reads key head h / 3 (grouped: fla, Qwen) or
 * h % Hk (interleaved: llama.cpp). The two are the same computation with the
 * value heads in another order.
 *
 * The check: an interleaved run equals a grouped run on value heads
 * permuted accordingly, bit for bit. */
#include "snippet_util.h"

enum { HK = 2, HV = 6, DK = 64, DV = 64, T = 40 };
enum { GROUP = HV / HK };

/* [doc:heads] */
/* Which key head serves value head h. */
static int key_head(gdn_head_mapping_t mapping, int h) {
    return mapping == GDN_HEADS_GROUPED ? h / (HV / HK)   /* kh = h / (Hv/Hk) */
                                        : h % HK;         /* kh = h % Hk      */
}

static void set_head_mapping(gdn_problem_t* p, int llama_cpp_layout) {
    /* llama.cpp repeats q/k heads by tiling (ggml_repeat): value head h reads
     * key head h % Hk. Qwen's and fla's checkpoints group them: h / (Hv/Hk). */
    p->head_mapping = llama_cpp_layout ? GDN_HEADS_INTERLEAVED : GDN_HEADS_GROUPED;
}
/* [/doc:heads] */

/* Value head h under interleaved is value head perm(h) under grouped: both
 * read key head h % HK, as the (h / HK)-th head of that key head's group. */
static int grouped_index(int h) { return (h % HK) * GROUP + h / HK; }

static void run(const gdn_caps_t* caps, int interleaved, const float* q, const float* k,
                const float* v, const float* g, const float* beta, float* out, float* state) {
    gdn_problem_t p;
    gdn_problem_init(&p);
    p.num_tokens = T;
    p.num_k_heads = HK;
    p.num_v_heads = HV;
    p.head_dim_k = DK;
    p.head_dim_v = DV;
    set_head_mapping(&p, interleaved);
    gdn_tensors_t t;
    gdn_tensors_init(&t);
    t.q = q;
    t.k = k;
    t.v = v;
    t.g = g;
    t.beta = beta;
    t.out = out;
    t.state = state;
    size_t bytes = 0;
    SNIPPET_CHECK(gdn_workspace_size(caps, &p, &bytes) == GDN_SUCCESS, "workspace size");
    void* ws = snippet_workspace(bytes);
    SNIPPET_CHECK(gdn_chunked_recurrence(caps, &p, &t, ws, bytes, NULL) == GDN_SUCCESS, "run");
    free(ws);
}

int main(void) {
    gdn_caps_t caps;
    gdn_caps_init(&caps);
    SNIPPET_CHECK(gdn_probe(GDN_BACKEND_CPU, 0, &caps) == GDN_SUCCESS, "probe");
    for (int h = 0; h < HV; ++h) {
        SNIPPET_CHECK(key_head(GDN_HEADS_INTERLEAVED, h) == key_head(GDN_HEADS_GROUPED, grouped_index(h)),
                      "permutation of head %d", h);
    }

    static float q[T][HK][DK], k[T][HK][DK];
    static float v[T][HV][DV], g[T][HV], beta[T][HV], out[T][HV][DV], state[HV][DK][DV];
    static float v2[T][HV][DV], g2[T][HV], beta2[T][HV], out2[T][HV][DV], state2[HV][DK][DV];
    snippet_fill(&q[0][0][0], sizeof q / 4, -0.5f, 0.5f);
    snippet_fill(&k[0][0][0], sizeof k / 4, -0.1f, 0.1f);
    snippet_fill(&v[0][0][0], sizeof v / 4, -1.0f, 1.0f);
    snippet_fill(&g[0][0], sizeof g / 4, -0.3f, -0.01f);
    snippet_fill(&beta[0][0], sizeof beta / 4, 0.1f, 0.9f);
    snippet_fill(&state[0][0][0], sizeof state / 4, -0.1f, 0.1f);
    for (int h = 0; h < HV; ++h) {
        const int h2 = grouped_index(h);
        for (int t = 0; t < T; ++t) {
            memcpy(v2[t][h2], v[t][h], sizeof v[t][h]);
            g2[t][h2] = g[t][h];
            beta2[t][h2] = beta[t][h];
        }
        memcpy(state2[h2], state[h], sizeof state[h]);
    }
    static float state3[HV][DK][DV], out3[T][HV][DV];
    memcpy(state3, state, sizeof state);
    run(&caps, 1, &q[0][0][0], &k[0][0][0], &v[0][0][0], &g[0][0], &beta[0][0], &out[0][0][0],
        &state[0][0][0]);
    run(&caps, 0, &q[0][0][0], &k[0][0][0], &v2[0][0][0], &g2[0][0], &beta2[0][0], &out2[0][0][0],
        &state2[0][0][0]);
    for (int h = 0; h < HV; ++h) {
        const int h2 = grouped_index(h);
        for (int t = 0; t < T; ++t)
            SNIPPET_CHECK(memcmp(out[t][h], out2[t][h2], sizeof out[t][h]) == 0,
                          "out of interleaved head %d, token %d != grouped head %d", h, t, h2);
        SNIPPET_CHECK(memcmp(state[h], state2[h2], sizeof state[h]) == 0,
                      "state of interleaved head %d != grouped head %d", h, h2);
    }
    /* And the mapping matters: grouped on the unpermuted heads differs. */
    run(&caps, 0, &q[0][0][0], &k[0][0][0], &v[0][0][0], &g[0][0], &beta[0][0], &out3[0][0][0],
        &state3[0][0][0]);
    SNIPPET_CHECK(memcmp(out3[0][1], out[0][1], sizeof out[0][1]) != 0, "head 1 is the same under both");
    printf("head_mapping: interleaved (Hk %d, Hv %d) = grouped with heads permuted, bit for bit\n", HK, HV);
    return 0;
}

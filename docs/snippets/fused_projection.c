/* docs/integration.md, "Tensor strides from a fused projection": q, k and v
 * read in place from the rows of a fused projection (bf16), β and the raw
 * gate from a second one, with the gate, the q/k L2 norm and the output
 * gated RMSNorm fused. Nothing is copied.
 *
 * The check: the result equals the one from packed copies of the same
 * values, for rows of 6144 elements and for rows padded to 6152. */
#include "snippet_util.h"

enum { HK = 8, HV = 32, DK = 128, DV = 128, T = 48 };

/* [doc:fused] */
/* The projection writes one row per token, [q | k | v] over all heads:
 * 8·128 + 8·128 + 32·128 = 6144 elements, padded to row_stride (6144, 6152, ...). */
enum { Q_OFFSET = 0, K_OFFSET = HK * DK, V_OFFSET = 2 * HK * DK, QKV_WIDTH = 2 * HK * DK + HV * DV };
/* A second projection writes [b | a] per token: HV β logits, then HV raw gates. */
enum { B_OFFSET = 0, A_OFFSET = HV, BA_WIDTH = 2 * HV };

static void view_fused_projection(gdn_problem_t* p, gdn_tensors_t* t, const uint16_t* qkv,
                                  int64_t row_stride, const uint16_t* ba, const uint16_t* z,
                                  const float* A_log, const float* dt_bias,
                                  const float* norm_weight) {
    p->input_dtype = GDN_DTYPE_BF16;   /* q, k, v, z */
    p->gate_dtype = GDN_DTYPE_BF16;    /* a, b: f32 or the input dtype */
    p->flags = GDN_FLAG_QK_L2NORM | GDN_FLAG_GATE_FROM_RAW | GDN_FLAG_BETA_FROM_LOGITS |
               GDN_FLAG_OUTPUT_NORM;
    /* Strides are in elements; within a head the dim is contiguous. */
    t->q = qkv + Q_OFFSET;  t->q_token_stride = row_stride;  t->q_head_stride = DK;
    t->k = qkv + K_OFFSET;  t->k_token_stride = row_stride;  t->k_head_stride = DK;
    t->v = qkv + V_OFFSET;  t->v_token_stride = row_stride;  t->v_head_stride = DV;
    t->beta = ba + B_OFFSET; t->beta_token_stride = BA_WIDTH; t->beta_head_stride = 1;
    t->g = ba + A_OFFSET;    t->g_token_stride = BA_WIDTH;    t->g_head_stride = 1;
    t->z = z;                /* [T][HV][DV], packed: strides 0 */
    t->A_log = A_log;        /* g = -exp(A_log[h]) * softplus(a + dt_bias[h]) */
    t->dt_bias = dt_bias;
    t->norm_weight = norm_weight;
}
/* [/doc:fused] */

static void run(const gdn_caps_t* caps, gdn_problem_t* p, gdn_tensors_t* t, float* out, float* state) {
    t->out = out;
    t->state = state;
    memset(state, 0, (size_t)HV * DK * DV * sizeof(float));
    size_t bytes = 0;
    SNIPPET_CHECK(gdn_workspace_size(caps, p, &bytes) == GDN_SUCCESS, "workspace size");
    void* ws = snippet_workspace(bytes);
    SNIPPET_CHECK(gdn_chunked_recurrence(caps, p, t, ws, bytes, NULL) == GDN_SUCCESS, "run");
    free(ws);
}

int main(void) {
    gdn_caps_t caps;
    gdn_caps_init(&caps);
    SNIPPET_CHECK(gdn_probe(GDN_BACKEND_CPU, 0, &caps) == GDN_SUCCESS, "probe");

    static float A_log[HV], dt_bias[HV], norm_weight[DV];
    snippet_fill(A_log, HV, -2.0f, 0.5f);
    snippet_fill(dt_bias, HV, -0.5f, 0.5f);
    snippet_fill(norm_weight, DV, 0.5f, 1.5f);
    static uint16_t ba[T][BA_WIDTH], z[T][HV][DV];
    for (int t = 0; t < T; ++t) {
        for (int i = 0; i < BA_WIDTH; ++i) ba[t][i] = snippet_to_bf16(4.0f * snippet_rand());
        for (int i = 0; i < HV * DV; ++i) (&z[t][0][0])[i] = snippet_to_bf16(2.0f * snippet_rand());
    }
    /* The packed copies: q/k [T][HK][DK], v [T][HV][DV], b and a [T][HV]. */
    static uint16_t q[T][HK][DK], k[T][HK][DK], v[T][HV][DV], b[T][HV], a[T][HV];
    for (int t = 0; t < T; ++t) {
        for (int i = 0; i < HK * DK; ++i) {
            (&q[t][0][0])[i] = snippet_to_bf16(snippet_rand());
            (&k[t][0][0])[i] = snippet_to_bf16(snippet_rand());
        }
        for (int i = 0; i < HV * DV; ++i) (&v[t][0][0])[i] = snippet_to_bf16(snippet_rand());
        for (int h = 0; h < HV; ++h) {
            b[t][h] = ba[t][B_OFFSET + h];
            a[t][h] = ba[t][A_OFFSET + h];
        }
    }
    static float out_packed[T][HV][DV], state_packed[HV][DK][DV];
    static float out_fused[T][HV][DV], state_fused[HV][DK][DV];

    gdn_problem_t p;
    gdn_problem_init(&p);
    p.num_tokens = T;
    p.num_k_heads = HK;
    p.num_v_heads = HV;
    p.head_dim_k = DK;
    p.head_dim_v = DV;
    gdn_tensors_t packed;
    gdn_tensors_init(&packed);
    view_fused_projection(&p, &packed, &q[0][0][0], QKV_WIDTH, &ba[0][0], &z[0][0][0], A_log,
                          dt_bias, norm_weight);  /* the flags; the views are replaced below */
    packed.q = q;
    packed.q_token_stride = packed.q_head_stride = 0;
    packed.k = k;
    packed.k_token_stride = packed.k_head_stride = 0;
    packed.v = v;
    packed.v_token_stride = packed.v_head_stride = 0;
    packed.beta = b;
    packed.beta_token_stride = packed.beta_head_stride = 0;
    packed.g = a;
    packed.g_token_stride = packed.g_head_stride = 0;
    run(&caps, &p, &packed, &out_packed[0][0][0], &state_packed[0][0][0]);

    const int64_t row_strides[2] = {QKV_WIDTH, QKV_WIDTH + 8};
    for (int r = 0; r < 2; ++r) {
        const int64_t row = row_strides[r];
        uint16_t* qkv = malloc((size_t)T * (size_t)row * sizeof(uint16_t));
        for (size_t i = 0; i < (size_t)T * (size_t)row; ++i) qkv[i] = 0x7FC0; /* NaN padding: must not be read */
        for (int t = 0; t < T; ++t) {
            memcpy(qkv + t * row + Q_OFFSET, q[t], sizeof q[t]);
            memcpy(qkv + t * row + K_OFFSET, k[t], sizeof k[t]);
            memcpy(qkv + t * row + V_OFFSET, v[t], sizeof v[t]);
        }
        gdn_tensors_t fused;
        gdn_tensors_init(&fused);
        view_fused_projection(&p, &fused, qkv, row, &ba[0][0], &z[0][0][0], A_log, dt_bias,
                              norm_weight);
        run(&caps, &p, &fused, &out_fused[0][0][0], &state_fused[0][0][0]);
        const double e_out = snippet_rel_diff(&out_fused[0][0][0], &out_packed[0][0][0], sizeof out_fused / 4);
        const double e_state =
            snippet_rel_diff(&state_fused[0][0][0], &state_packed[0][0][0], sizeof state_fused / 4);
        printf("fused rows of %lld elements: out %.2e, state %.2e vs packed copies\n", (long long)row,
               e_out, e_state);
        SNIPPET_CHECK(e_out <= 1e-6 && e_state <= 1e-6, "row stride %lld", (long long)row);
        free(qkv);
    }
    return 0;
}

/* The header compiles as C99 (-Wall -Wextra -Werror -pedantic) and the API
 * works from C: probe, workspace size, path query, a run on the CPU backend
 * checked against a plain double-precision recurrence, and an error path. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gdn/gdn.h"

#define T 37
#define HK 1
#define HV 2
#define K 8
#define V 4

static int failures = 0;
#define EXPECT(cond)                                                   \
    do {                                                               \
        if (!(cond)) {                                                 \
            fprintf(stderr, "%s:%d: FAILED: %s (last error: %s)\n",   \
                    __FILE__, __LINE__, #cond, gdn_last_error());      \
            ++failures;                                                \
        }                                                              \
    } while (0)

static float frand(unsigned* s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 65536.0f - 0.5f;
}

int main(void) {
    static float q[T][HK][K], k[T][HK][K], v[T][HV][V], g[T][HV], beta[T][HV], out[T][HV][V];
    static float state[HV][K][V];
    static double ref_state[HV][K][V];
    gdn_caps_t caps;
    gdn_problem_t problem;
    gdn_tensors_t tensors;
    gdn_path_info_t info;
    size_t bytes = 0;
    void* workspace = NULL;
    unsigned seed = 7;
    int t, h, i, j;
    double max_diff = 0.0, max_ref = 0.0;
    const double scale = 1.0 / sqrt((double)K);

    EXPECT(gdn_version() / 10000 == GDN_VERSION_MAJOR);
    EXPECT(strcmp(gdn_status_string(GDN_ERROR_WORKSPACE_TOO_SMALL), "workspace too small") == 0);

    for (t = 0; t < T; ++t) {
        for (i = 0; i < K; ++i) {
            q[t][0][i] = frand(&seed);
            k[t][0][i] = frand(&seed) * 0.5f;
        }
        for (h = 0; h < HV; ++h) {
            for (j = 0; j < V; ++j) v[t][h][j] = frand(&seed);
            g[t][h] = -0.05f - 0.2f * (frand(&seed) + 0.5f);
            beta[t][h] = frand(&seed) + 0.5f;
        }
    }
    for (h = 0; h < HV; ++h)
        for (i = 0; i < K; ++i)
            for (j = 0; j < V; ++j) ref_state[h][i][j] = state[h][i][j] = 0.1f * frand(&seed);

    gdn_caps_init(&caps);
    EXPECT(gdn_probe(GDN_BACKEND_CPU, 0, &caps) == GDN_SUCCESS);
    EXPECT(caps.backend == GDN_BACKEND_CPU && caps.multiprocessor_count >= 1);

    gdn_problem_init(&problem);
    problem.num_tokens = T;
    problem.num_k_heads = HK;
    problem.num_v_heads = HV;
    problem.head_dim_k = K;
    problem.head_dim_v = V;
    problem.algorithm = GDN_ALGO_CHUNKED;

    gdn_tensors_init(&tensors);
    tensors.q = q;
    tensors.k = k;
    tensors.v = v;
    tensors.g = g;
    tensors.beta = beta;
    tensors.out = out;
    tensors.state = &state[0][0][0];

    gdn_path_info_init(&info);
    EXPECT(gdn_select_path(&caps, &problem, &tensors, &info) == GDN_SUCCESS);
    EXPECT(info.path == GDN_PATH_CHUNKED_FP32 && info.chunk_size == 32);
    EXPECT(strlen(info.reason) > 0);

    EXPECT(gdn_workspace_size(&caps, &problem, &bytes) == GDN_SUCCESS);
    if (bytes > 0) {
        workspace = malloc(bytes + GDN_WORKSPACE_ALIGNMENT);
        EXPECT(workspace != NULL);
    }
    {
        /* align the workspace as the ABI asks */
        char* base = (char*)workspace;
        size_t pad = base ? (GDN_WORKSPACE_ALIGNMENT - (size_t)((uintptr_t)base % GDN_WORKSPACE_ALIGNMENT)) %
                                GDN_WORKSPACE_ALIGNMENT
                          : 0;
        EXPECT(gdn_chunked_recurrence(&caps, &problem, &tensors, base ? base + pad : NULL, bytes, NULL) ==
               GDN_SUCCESS);
        EXPECT(gdn_last_error()[0] == '\0');
        /* an error path from C: the message names the argument */
        problem.num_k_heads = 2;
        problem.num_v_heads = 3;
        EXPECT(gdn_chunked_recurrence(&caps, &problem, &tensors, base ? base + pad : NULL, bytes, NULL) ==
               GDN_ERROR_INVALID_ARGUMENT);
        EXPECT(strstr(gdn_last_error(), "num_v_heads (3)") != NULL);
    }
    free(workspace);

    /* the recurrence in double precision */
    for (t = 0; t < T; ++t) {
        for (h = 0; h < HV; ++h) {
            const double decay = exp((double)g[t][h]);
            double d[V], o;
            for (j = 0; j < V; ++j) {
                double sk = 0.0;
                for (i = 0; i < K; ++i) sk += ref_state[h][i][j] * k[t][0][i];
                d[j] = beta[t][h] * (v[t][h][j] - decay * sk);
            }
            for (i = 0; i < K; ++i)
                for (j = 0; j < V; ++j) ref_state[h][i][j] = decay * ref_state[h][i][j] + k[t][0][i] * d[j];
            for (j = 0; j < V; ++j) {
                o = 0.0;
                for (i = 0; i < K; ++i) o += ref_state[h][i][j] * scale * q[t][0][i];
                if (fabs(o) > max_ref) max_ref = fabs(o);
                if (fabs(o - out[t][h][j]) > max_diff) max_diff = fabs(o - out[t][h][j]);
            }
        }
    }
    printf("C99 API: chunked vs FP64 max|diff|/max|ref| = %.3g\n", max_diff / max_ref);
    EXPECT(max_diff / max_ref <= 2e-6);
    for (h = 0; h < HV; ++h)
        for (i = 0; i < K; ++i)
            for (j = 0; j < V; ++j) EXPECT(fabs(state[h][i][j] - ref_state[h][i][j]) <= 1e-5);

    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    return 0;
}

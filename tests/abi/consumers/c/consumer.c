/* A C consumer of the installed gdn, built with `pkg-config --cflags --libs
 * gdn` only (scripts/check-install.sh). Two sequences of different lengths
 * (cu_seqlens) in a pool of three state slots, on the CPU backend, checked
 * against a double-precision recurrence; then one rejected call. */
#define _POSIX_C_SOURCE 200112L /* posix_memalign */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gdn/gdn.h>

enum { NSEQ = 2, NTOK = 3 + 70, HK = 1, HV = 2, DK = 64, DV = 64, SLOTS = 3 };
static const int32_t cu_seqlens[NSEQ + 1] = {0, 3, NTOK};
static const int32_t slot_of_seq[NSEQ] = {2, 0};

static float q[NTOK][HK][DK], k[NTOK][HK][DK], v[NTOK][HV][DV], g[NTOK][HV], beta[NTOK][HV];
static float out[NTOK][HV][DV], pool[SLOTS][HV][DK][DV];
static double ref_out[NTOK][HV][DV], ref_pool[SLOTS][HV][DK][DV];

static float frand(unsigned* s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 65536.0f - 0.5f;
}

int main(void) {
    unsigned s = 7u;
    for (int t = 0; t < NTOK; ++t) {
        double n = 0;
        for (int d = 0; d < DK; ++d) {
            q[t][0][d] = frand(&s);
            k[t][0][d] = frand(&s);
            n += (double)k[t][0][d] * k[t][0][d];
        }
        for (int d = 0; d < DK; ++d) k[t][0][d] = (float)(k[t][0][d] / sqrt(n));
        for (int h = 0; h < HV; ++h) {
            for (int d = 0; d < DV; ++d) v[t][h][d] = frand(&s);
            g[t][h] = -0.1f + 0.1f * frand(&s);
            beta[t][h] = 0.5f + frand(&s);
        }
    }
    for (int i = 0; i < SLOTS * HV * DK * DV; ++i) {
        (&pool[0][0][0][0])[i] = 0.05f * frand(&s);
        (&ref_pool[0][0][0][0])[i] = (&pool[0][0][0][0])[i];
    }

    if (gdn_version() / 10000 != GDN_VERSION_MAJOR || gdn_version() < GDN_VERSION) {
        fprintf(stderr, "libgdn %u does not serve gdn.h %d\n", (unsigned)gdn_version(), GDN_VERSION);
        return 1;
    }
    gdn_caps_t caps;
    gdn_caps_init(&caps);
    if (gdn_probe(GDN_BACKEND_CPU, 0, &caps) != GDN_SUCCESS) {
        fprintf(stderr, "gdn_probe: %s\n", gdn_last_error());
        return 1;
    }
    gdn_problem_t problem;
    gdn_problem_init(&problem);
    problem.num_seqs = NSEQ;
    problem.num_tokens = NTOK;
    problem.max_seqlen = 70;
    problem.num_k_heads = HK;
    problem.num_v_heads = HV;
    problem.head_dim_k = DK;
    problem.head_dim_v = DV;
    problem.num_state_slots = SLOTS;

    gdn_tensors_t tensors;
    gdn_tensors_init(&tensors);
    tensors.q = q;
    tensors.k = k;
    tensors.v = v;
    tensors.g = g;
    tensors.beta = beta;
    tensors.out = out;
    tensors.state = &pool[0][0][0][0];
    tensors.cu_seqlens = cu_seqlens;
    tensors.state_indices = slot_of_seq;

    size_t bytes = 0;
    if (gdn_workspace_size(&caps, &problem, &bytes) != GDN_SUCCESS) {
        fprintf(stderr, "gdn_workspace_size: %s\n", gdn_last_error());
        return 1;
    }
    void* workspace = NULL;
    if (bytes && posix_memalign(&workspace, GDN_WORKSPACE_ALIGNMENT, bytes) != 0) return 1;
    gdn_status_t st = gdn_chunked_recurrence(&caps, &problem, &tensors, workspace, bytes, NULL);
    if (st != GDN_SUCCESS) {
        fprintf(stderr, "gdn_chunked_recurrence: %s: %s\n", gdn_status_string(st), gdn_last_error());
        return 1;
    }

    for (int i = 0; i < NSEQ; ++i)
        for (int h = 0; h < HV; ++h) {
            double* S = &ref_pool[slot_of_seq[i]][h][0][0];
            for (int t = cu_seqlens[i]; t < cu_seqlens[i + 1]; ++t) {
                const double decay = exp((double)g[t][h]);
                for (int a = 0; a < DK * DV; ++a) S[a] *= decay;
                for (int b = 0; b < DV; ++b) {
                    double sk = 0;
                    for (int a = 0; a < DK; ++a) sk += S[a * DV + b] * k[t][0][a];
                    const double d = beta[t][h] * (v[t][h][b] - sk);
                    for (int a = 0; a < DK; ++a) S[a * DV + b] += k[t][0][a] * d;
                }
                for (int b = 0; b < DV; ++b) {
                    double o = 0;
                    for (int a = 0; a < DK; ++a) o += S[a * DV + b] * q[t][0][a];
                    ref_out[t][h][b] = o / sqrt((double)DK);
                }
            }
        }
    double max_ref = 0, max_diff = 0;
    for (int i = 0; i < NTOK * HV * DV; ++i) {
        const double r = (&ref_out[0][0][0])[i], d = fabs((&out[0][0][0])[i] - r);
        if (fabs(r) > max_ref) max_ref = fabs(r);
        if (!(d <= max_diff)) max_diff = d;
    }
    for (int i = 0; i < SLOTS * HV * DK * DV; ++i) {
        const double r = (&ref_pool[0][0][0][0])[i], d = fabs((&pool[0][0][0][0])[i] - r);
        if (fabs(r) > max_ref) max_ref = fabs(r);
        if (!(d <= max_diff)) max_diff = d;
    }
    const double rel = max_diff / max_ref;
    printf("C consumer (pkg-config): gdn %u, %d+%d tokens, 3 slots, %s; max|diff|/max|ref| = %.2e\n",
           (unsigned)gdn_version(), 3, 70, caps.arch, rel);
    if (!(rel <= 1e-5)) {
        fprintf(stderr, "FAILED: the result differs from the FP64 recurrence (%.3e)\n", rel);
        return 1;
    }

    /* A rejected call names the argument and writes nothing. */
    static float out_before[NTOK][HV][DV];
    memcpy(out_before, out, sizeof out);
    problem.num_seqs = 0;
    st = gdn_chunked_recurrence(&caps, &problem, &tensors, workspace, bytes, NULL);
    if (st != GDN_ERROR_INVALID_ARGUMENT || !strstr(gdn_last_error(), "num_seqs") ||
        memcmp(out_before, out, sizeof out) != 0) {
        fprintf(stderr, "FAILED: num_seqs = 0 gave %s (\"%s\")\n", gdn_status_string(st),
                gdn_last_error());
        return 1;
    }
    printf("C consumer: num_seqs = 0 rejected: %s: %s\n", gdn_status_string(st), gdn_last_error());
    free(workspace);
    return 0;
}

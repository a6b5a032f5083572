/* Helpers shared by the integration guide's snippets: synthetic inputs, the
 * workspace allocation, a comparison. Not part of the guide's text. */
#ifndef GDN_SNIPPET_UTIL_H
#define GDN_SNIPPET_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gdn/gdn.h"

static unsigned snippet_seed = 1u;

static inline float snippet_rand(void) { /* uniform in [-0.5, 0.5) */
    snippet_seed = snippet_seed * 1664525u + 1013904223u;
    return (float)((snippet_seed >> 8) & 0xffff) / 65536.0f - 0.5f;
}

static inline void snippet_fill(float* x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; ++i) x[i] = lo + (hi - lo) * (snippet_rand() + 0.5f);
}

static inline uint16_t snippet_to_bf16(float x) { /* round to nearest even */
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* Host memory aligned to GDN_WORKSPACE_ALIGNMENT (NULL for 0 bytes). */
static inline void* snippet_workspace(size_t bytes) {
    if (bytes == 0) return NULL;
    bytes = (bytes + GDN_WORKSPACE_ALIGNMENT - 1) / GDN_WORKSPACE_ALIGNMENT * GDN_WORKSPACE_ALIGNMENT;
    void* p = aligned_alloc(GDN_WORKSPACE_ALIGNMENT, bytes);
    if (p == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

/* max|a - b| / max|b|; NaN anywhere makes it NaN. */
static inline double snippet_rel_diff(const float* a, const float* b, size_t n) {
    double max_b = 0, max_d = 0;
    for (size_t i = 0; i < n; ++i) {
        const double d = fabs((double)a[i] - (double)b[i]);
        if (fabs((double)b[i]) > max_b) max_b = fabs((double)b[i]);
        if (!(d <= max_d)) max_d = d;
    }
    return max_b > 0 ? max_d / max_b : max_d;
}

#define SNIPPET_CHECK(cond, ...)                                             \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "%s:%d: FAILED: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                    \
            fprintf(stderr, " (gdn_last_error: \"%s\")\n", gdn_last_error()); \
            exit(1);                                                         \
        }                                                                    \
    } while (0)

#endif

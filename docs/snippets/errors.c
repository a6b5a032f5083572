/* docs/integration.md, "Error handling": every call returns a status; on
 * failure nothing was written and gdn_last_error() (thread-local) names the
 * argument and its value. The engine logs both and decides by the status.
 *
 * The check: each status below is produced by the call shown, with a
 * message naming the argument, and the buffers are untouched. */
#include "snippet_util.h"

enum { HK = 1, HV = 2, DK = 64, DV = 64, T = 8 };

/* [doc:errors] */
/* At start-up: the library loaded must serve the header compiled against. */
static int gdn_version_ok(void) {
    const uint32_t lib = gdn_version();
    if (lib / 10000 != GDN_VERSION_MAJOR || lib < GDN_VERSION) {
        fprintf(stderr, "libgdn %u.%u.%u cannot serve gdn.h %d.%d.%d\n", (unsigned)(lib / 10000),
                (unsigned)(lib / 100 % 100), (unsigned)(lib % 100), GDN_VERSION_MAJOR,
                GDN_VERSION_MINOR, GDN_VERSION_PATCH);
        return 0;
    }
    return 1;
}

/* Every call: on failure log the status and the detail, then decide. */
static gdn_status_t logged(gdn_status_t st, const char* what) {
    if (st != GDN_SUCCESS)
        fprintf(stderr, "gdn: %s: %s: %s\n", what, gdn_status_string(st), gdn_last_error());
    return st;
}

/* Probe the best backend once; fall back to the CPU where a GPU backend is
 * not compiled in or has no device (GDN_ERROR_BACKEND_UNAVAILABLE). */
static gdn_status_t probe_best(gdn_caps_t* caps) {
    const gdn_backend_t order[] = {GDN_BACKEND_CUDA, GDN_BACKEND_HIP, GDN_BACKEND_CPU};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; ++i) {
        gdn_caps_init(caps);
        const gdn_status_t st = gdn_probe(order[i], 0, caps);
        if (st != GDN_ERROR_BACKEND_UNAVAILABLE) return logged(st, "gdn_probe");
    }
    return GDN_ERROR_BACKEND_UNAVAILABLE;
}
/* [/doc:errors] */

/* The statuses: what a caller does about each. */
static gdn_status_t run(const gdn_caps_t* caps, const gdn_problem_t* p, float* out, float* state,
                        void* ws, size_t bytes) {
    static float q[T][HK][DK], k[T][HK][DK], v[T][HV][DV], g[T][HV], beta[T][HV];
    gdn_tensors_t t;
    gdn_tensors_init(&t);
    t.q = q;
    t.k = k;
    t.v = v;
    t.g = g;
    t.beta = beta;
    t.out = out;
    t.state = state;
    return gdn_chunked_recurrence(caps, p, &t, ws, bytes, NULL);
}

int main(void) {
    SNIPPET_CHECK(gdn_version_ok(), "version");
    gdn_caps_t caps;
    SNIPPET_CHECK(probe_best(&caps) == GDN_SUCCESS, "probe");
    printf("probed: backend %d, %s\n", (int)caps.backend, caps.arch);
    if (caps.backend != GDN_BACKEND_CPU) gdn_probe(GDN_BACKEND_CPU, 0, &caps); /* host buffers below */

    gdn_problem_t p;
    gdn_problem_init(&p);
    p.num_tokens = T;
    p.num_k_heads = HK;
    p.num_v_heads = HV;
    p.head_dim_k = DK;
    p.head_dim_v = DV;
    size_t bytes = 0;
    SNIPPET_CHECK(logged(gdn_workspace_size(&caps, &p, &bytes), "size") == GDN_SUCCESS, "size");
    void* ws = snippet_workspace(bytes + GDN_WORKSPACE_ALIGNMENT);
    static float out[T][HV][DV], state[HV][DK][DV], out0[T][HV][DV], state0[HV][DK][DV];
    memset(out, 0x5A, sizeof out);
    memset(state, 0x5A, sizeof state);
    memcpy(out0, out, sizeof out);
    memcpy(state0, state, sizeof state);

    struct {
        const char* what;
        gdn_status_t want;
        const char* names;
    } cases[] = {
        {"Hv not a multiple of Hk", GDN_ERROR_INVALID_ARGUMENT, "num_v_heads"},
        {"head_dim beyond any path", GDN_ERROR_NOT_SUPPORTED, "head_dim_k"},
        {"workspace one byte short", GDN_ERROR_WORKSPACE_TOO_SMALL, "workspace_bytes"},
        {"a struct from a newer gdn.h", GDN_ERROR_INVALID_ARGUMENT, "struct_size"},
    };
    for (int i = 0; i < 4; ++i) {
        gdn_problem_t bad = p;
        size_t have = bytes;
        switch (i) {
            case 0: bad.num_k_heads = 3; bad.num_v_heads = 4; break;
            case 1: bad.head_dim_k = 4096; break;
            case 2: have = bytes - 1; break;
            case 3: bad.struct_size = sizeof bad + 8; break;
        }
        if (i == 2 && bytes == 0) continue; /* nothing to be short of */
        const gdn_status_t st = run(&caps, &bad, &out[0][0][0], &state[0][0][0], ws, have);
        printf("%-28s -> %s: %s\n", cases[i].what, gdn_status_string(st), gdn_last_error());
        SNIPPET_CHECK(st == cases[i].want, "%s: got %s", cases[i].what, gdn_status_string(st));
        SNIPPET_CHECK(strstr(gdn_last_error(), cases[i].names) != NULL, "%s: message", cases[i].what);
        SNIPPET_CHECK(memcmp(out, out0, sizeof out) == 0 && memcmp(state, state0, sizeof state) == 0,
                      "%s: something was written", cases[i].what);
    }
    /* A successful call clears the detail. */
    memset(state, 0, sizeof state);
    SNIPPET_CHECK(run(&caps, &p, &out[0][0][0], &state[0][0][0], ws, bytes) == GDN_SUCCESS, "run");
    SNIPPET_CHECK(gdn_last_error()[0] == '\0', "last error not cleared");
    free(ws);
    return 0;
}

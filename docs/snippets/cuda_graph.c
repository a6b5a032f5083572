/* docs/integration.md, "CUDA graphs and device cu_seqlens": a decode step
 * captured once into a CUDA graph and replayed. Every array gdn reads is
 * device memory (cu_seqlens and slot indices included) and no call
 * allocates, copies to the host or synchronises, so the call is capturable.
 *
 * The check (on a GPU with the CUDA backend): the replayed graph gives the
 * bits of a direct call. Without either it exits 77 (skipped). */
#include <cuda_runtime_api.h>

#include "snippet_util.h"

enum { HK = 16, HV = 32, DK = 128, DV = 128, SLOTS = 64, BATCH = 8 };

#define CUDA_OK(call)                                                                  \
    do {                                                                               \
        cudaError_t e_ = (call);                                                       \
        if (e_ != cudaSuccess) {                                                       \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

typedef struct {
    void *q, *k, *v, *g, *beta, *out;    /* this step's rows, device */
    float* pool;                          /* [SLOTS][HV][DK][DV], device */
    int32_t* slots;                       /* [BATCH], device; -1 = padding row */
    void* workspace;
    size_t workspace_bytes;
} decode_buffers;

static gdn_problem_t decode_problem(void) {
    gdn_problem_t p;
    gdn_problem_init(&p);
    p.num_seqs = BATCH;
    p.num_tokens = BATCH; /* one token per sequence: cu_seqlens NULL */
    p.max_seqlen = 1;
    p.num_k_heads = HK;
    p.num_v_heads = HV;
    p.head_dim_k = DK;
    p.head_dim_v = DV;
    p.input_dtype = GDN_DTYPE_BF16;
    p.gate_dtype = GDN_DTYPE_F32;
    p.output_dtype = GDN_DTYPE_BF16;
    p.num_state_slots = SLOTS;
    return p;
}

static gdn_tensors_t decode_tensors(const decode_buffers* b) {
    gdn_tensors_t t;
    gdn_tensors_init(&t);
    t.q = b->q;
    t.k = b->k;
    t.v = b->v;
    t.g = b->g;
    t.beta = b->beta;
    t.out = b->out;
    t.state = b->pool;
    t.state_indices = b->slots;
    return t;
}

/* [doc:cuda-graph] */
/* Capture one decode step. The graph holds the pointers and shapes of this
 * call: replay it with new contents in the same buffers (the rows written by
 * the previous kernels, the slot of each batch row, -1 for an empty row). */
static cudaGraphExec_t capture_decode_step(const gdn_caps_t* caps, const decode_buffers* b,
                                           cudaStream_t stream) {
    const gdn_problem_t p = decode_problem();
    const gdn_tensors_t t = decode_tensors(b);
    cudaGraph_t graph;
    cudaGraphExec_t exec = NULL;
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    /* Validation is on the host, before anything is enqueued: on an error
     * nothing was captured, so ending the capture is all there is to undo. */
    const gdn_status_t st =
        gdn_chunked_recurrence(caps, &p, &t, b->workspace, b->workspace_bytes, stream);
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    if (st != GDN_SUCCESS) {
        fprintf(stderr, "gdn: %s: %s\n", gdn_status_string(st), gdn_last_error());
        cudaGraphDestroy(graph);
        return NULL;
    }
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    cudaGraphDestroy(graph);
    return exec;
}
/* [/doc:cuda-graph] */

static void* device_random(size_t n, int bf16) {
    void* d = NULL;
    const size_t bytes = n * (bf16 ? 2 : 4);
    void* h = malloc(bytes);
    for (size_t i = 0; i < n; ++i) {
        const float x = snippet_rand();
        if (bf16)
            ((uint16_t*)h)[i] = snippet_to_bf16(x);
        else
            ((float*)h)[i] = x;
    }
    CUDA_OK(cudaMalloc(&d, bytes));
    CUDA_OK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

int main(void) {
    gdn_caps_t caps;
    gdn_caps_init(&caps);
    const gdn_status_t st = gdn_probe(GDN_BACKEND_CUDA, 0, &caps);
    if (st != GDN_SUCCESS) {
        printf("skipped: no CUDA device for gdn (%s: %s)\n", gdn_status_string(st), gdn_last_error());
        return 77;
    }
    decode_buffers b;
    b.q = device_random((size_t)BATCH * HK * DK, 1);
    b.k = device_random((size_t)BATCH * HK * DK, 1);
    b.v = device_random((size_t)BATCH * HV * DV, 1);
    b.g = device_random((size_t)BATCH * HV, 0); /* log decay: made <= 0 below */
    b.beta = device_random((size_t)BATCH * HV, 0);
    {
        float gh[BATCH * HV], bh[BATCH * HV];
        for (int i = 0; i < BATCH * HV; ++i) {
            gh[i] = -0.1f + 0.1f * snippet_rand();
            bh[i] = 0.5f + snippet_rand();
        }
        CUDA_OK(cudaMemcpy(b.g, gh, sizeof gh, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(b.beta, bh, sizeof bh, cudaMemcpyHostToDevice));
    }
    CUDA_OK(cudaMalloc(&b.out, (size_t)BATCH * HV * DV * 2));
    b.pool = device_random((size_t)SLOTS * HV * DK * DV, 0);
    const int32_t slots_h[BATCH] = {7, 3, 60, -1, 12, -1, 0, 33};
    CUDA_OK(cudaMalloc((void**)&b.slots, sizeof slots_h));
    CUDA_OK(cudaMemcpy(b.slots, slots_h, sizeof slots_h, cudaMemcpyHostToDevice));
    const gdn_problem_t p = decode_problem();
    SNIPPET_CHECK(gdn_workspace_size(&caps, &p, &b.workspace_bytes) == GDN_SUCCESS, "size");
    CUDA_OK(cudaMalloc(&b.workspace, b.workspace_bytes ? b.workspace_bytes : 1));

    const size_t pool_bytes = (size_t)SLOTS * HV * DK * DV * 4, out_bytes = (size_t)BATCH * HV * DV * 2;
    float* pool0 = malloc(pool_bytes);
    void* direct_pool = malloc(pool_bytes);
    void* direct_out = malloc(out_bytes);
    void* graph_pool = malloc(pool_bytes);
    void* graph_out = malloc(out_bytes);
    CUDA_OK(cudaMemcpy(pool0, b.pool, pool_bytes, cudaMemcpyDeviceToHost));

    cudaStream_t stream;
    CUDA_OK(cudaStreamCreate(&stream));
    const gdn_tensors_t t = decode_tensors(&b);
    CUDA_OK(cudaMemset(b.out, 0, out_bytes)); /* padding rows keep what they had */
    SNIPPET_CHECK(gdn_chunked_recurrence(&caps, &p, &t, b.workspace, b.workspace_bytes, stream) ==
                      GDN_SUCCESS, "direct call");
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaMemcpy(direct_pool, b.pool, pool_bytes, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(direct_out, b.out, out_bytes, cudaMemcpyDeviceToHost));

    CUDA_OK(cudaMemcpy(b.pool, pool0, pool_bytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(b.out, 0, out_bytes));
    cudaGraphExec_t exec = capture_decode_step(&caps, &b, stream);
    SNIPPET_CHECK(exec != NULL, "capture");
    CUDA_OK(cudaGraphLaunch(exec, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaMemcpy(graph_pool, b.pool, pool_bytes, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(graph_out, b.out, out_bytes, cudaMemcpyDeviceToHost));
    SNIPPET_CHECK(memcmp(direct_out, graph_out, out_bytes) == 0, "graph replay out differs");
    SNIPPET_CHECK(memcmp(direct_pool, graph_pool, pool_bytes) == 0, "graph replay state differs");
    SNIPPET_CHECK(memcmp(pool0 + (size_t)1 * HV * DK * DV, (float*)graph_pool + (size_t)1 * HV * DK * DV,
                         (size_t)HV * DK * DV * 4) == 0, "an unused slot was written");
    printf("cuda_graph: a captured decode step (%d rows, 2 padding) replays the direct call bit for bit on %s\n",
           BATCH, caps.name);
    cudaGraphExecDestroy(exec);
    return 0;
}

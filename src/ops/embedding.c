/* embedding(table, ids): rows of a table picked by i32 ids, and its backward operator
 * embedding_grad (dtable: the rows of dy added into the rows their ids name).
 *
 * table [V, C] (f32 or f16), ids i32 [...] (rank 0 to 3) -> [..., C]. ids are an index input
 * (kf_operator.index_inputs): i32 on the GPU, no gradient, drawn in [0, V) by verification. An
 * id outside [0, V) makes its output row NaN (as cross_entropy's invalid labels do) and adds
 * nothing to dtable; the loads stay in bounds.
 *
 * dtable is deterministic without sorting and without atomics: one invocation per element
 * (v, c) of dtable walks every id in order and adds dy[r, c] where ids[r] == v, so each sum is
 * formed in the same order on every run and device. Its cost: V * C invocations each reading all
 * N ids (V * C * N id reads, served from cache: the ids are a few KiB) and N * C reads of dy in
 * all; for a character model (V = 65, C = 128, N = 4096) 34M id reads, for a 50k-token
 * vocabulary it is the wrong algorithm (a segmented sum over ids sorted once would be). */
#include "ops/ops_internal.h"
#include "ops/rowwise.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct embed_dims {
    uint32_t vocab, cols;
    uint64_t rows; /* ids */
} embed_dims;

static embed_dims dims_of(const kf_shape *in) {
    embed_dims d = {in[0].rank == 2 ? in[0].dims[0] : 1, in[0].rank == 2 ? in[0].dims[1] : 1,
                    kf_shape_elements(&in[1])};
    return d;
}

static uint32_t embedding_classes(const kf_shape *in) {
    return in[0].rank == 2 ? in[0].dims[0] : 1;
}

static kf_status embedding_shape(const kf_shape *in, const kf_op_params *p, kf_shape *out,
                                 char *msg, size_t msg_size) {
    (void)p;
    char a[64], b[64];
    if (!kf__shape_valid(&in[0]) || in[0].rank != 2) {
        return kf__shape_error(msg, msg_size, "embedding: table must be [V, C], got %s",
                               kf_shape_str(&in[0], a, sizeof a));
    }
    if (!kf__shape_valid(&in[1]) || in[1].rank > KF_MAX_DIMS - 1) {
        return kf__shape_error(msg, msg_size,
                               "embedding: ids must be of rank 0 to %d (the output adds C), got %s",
                               KF_MAX_DIMS - 1, kf_shape_str(&in[1], b, sizeof b));
    }
    if (kf_shape_elements(&in[1]) * in[0].dims[1] > UINT32_MAX) {
        return kf__shape_error(msg, msg_size, "embedding: ids %s x C %u is 2^32 elements or more",
                               kf_shape_str(&in[1], b, sizeof b), in[0].dims[1]);
    }
    *out = in[1];
    out->dims[out->rank++] = in[0].dims[1];
    return KF_OK;
}

/* The id as a row of the table, or -1 when it is not an integer in [0, vocab). */
static int64_t spec_row(float id, uint32_t vocab) {
    if (!(id >= 0.0f) || id >= (float)vocab || floorf(id) != id) {
        return -1;
    }
    return (int64_t)id;
}

static kf_status embedding_spec_forward(const kf_tensor *const *in, const kf_op_params *p,
                                        kf_tensor *out) {
    (void)p;
    kf_shape shapes[2] = {in[0]->shape, in[1]->shape};
    embed_dims d = dims_of(shapes);
    for (uint64_t r = 0; r < d.rows; r++) {
        int64_t row = spec_row(in[1]->data[r], d.vocab);
        for (uint32_t c = 0; c < d.cols; c++) {
            out->data[r * d.cols + c] = row < 0 ? NAN : in[0]->data[(uint64_t)row * d.cols + c];
        }
    }
    return KF_OK;
}

/* dtable[v, c] = sum of dy[r, c] over the r with ids[r] == v, in float64. */
static kf_status embedding_spec_backward(const kf_tensor *const *in, const kf_tensor *out,
                                         const kf_tensor *grad_out, const kf_op_params *p,
                                         kf_tensor *const *grad_in) {
    (void)out, (void)p;
    kf_shape shapes[2] = {in[0]->shape, in[1]->shape};
    embed_dims d = dims_of(shapes);
    if (grad_in[1]) {
        memset(grad_in[1]->data, 0, sizeof(float) * kf_tensor_size(grad_in[1]));
    }
    if (!grad_in[0]) {
        return KF_OK;
    }
    uint64_t n = (uint64_t)d.vocab * d.cols;
    double *acc = calloc(n, sizeof *acc);
    if (!acc) {
        return KF_ERROR_OUT_OF_MEMORY;
    }
    for (uint64_t r = 0; r < d.rows; r++) {
        int64_t row = spec_row(in[1]->data[r], d.vocab);
        for (uint32_t c = 0; row >= 0 && c < d.cols; c++) {
            acc[(uint64_t)row * d.cols + c] += grad_out->data[r * d.cols + c];
        }
    }
    for (uint64_t i = 0; i < n; i++) {
        grad_in[0]->data[i] = (float)acc[i];
    }
    free(acc);
    return KF_OK;
}

static kf_kernel *embedding_kernel_forward(const kf_shape *in, const kf_op_params *p,
                                           kf_dtype dtype) {
    kf_shape out;
    if (embedding_shape(in, p, &out, NULL, 0) != KF_OK) {
        return NULL;
    }
    embed_dims d = dims_of(in);
    kf_kernel *k = kf__kernel_1d("embedding", kf__dtype_type(dtype), kf_shape_elements(&out));
    if (!k) {
        return NULL;
    }
    kf_binding table = kf__bind(k, "table", dtype, KF_ACCESS_READ);
    kf_binding ids = kf__bind(k, "ids", KF_DTYPE_I32, KF_ACCESS_READ);
    kf_val e = kf__each_element(k, "e", kf_shape_elements(&out));
    kf_val row = kf_div(k, e, kf__u32(k, d.cols));
    kf_val col = kf_binary(k, KF_OP_MOD, e, kf__u32(k, d.cols));
    kf_val id = kf_let(k, "id", kf_load(k, ids, row));
    kf_val lo = kf_binary(k, KF_OP_GE, id, kf_lit_i32(k, 0));
    kf_val hi = kf_binary(k, KF_OP_LT, id, kf_lit_i32(k, (int32_t)d.vocab));
    kf_val ok = kf_binary(k, KF_OP_AND, lo, hi);
    kf_val at = kf_cast(
        k, kf_type_scalar(KF_SCALAR_U32),
        kf_call3(k, KF_FN_CLAMP, id, kf_lit_i32(k, 0), kf_lit_i32(k, (int32_t)d.vocab - 1)));
    kf_val src = kf_add(k, kf_mul(k, at, kf__u32(k, d.cols)), col);
    kf_val v = kf__load_f32(k, table, src, dtype);
    kf_val nan = kf__nan(k, kf_bitcast(k, kf_type_scalar(KF_SCALAR_U32), id));
    kf__yield_f32(k, kf_select(k, nan, v, ok), e, dtype);
    kf_end(k);
    return k;
}

/* dtable: one invocation per (v, c), the ids walked in order (deterministic; header comment).
 * backward: the kernel_backward bindings (table, ids, out, grad_out, grad_in); else the backward
 * operator's (table, ids, dy), yielding. */
static kf_kernel *embedding_grad_kernel(const kf_shape *in, kf_dtype dtype, bool backward) {
    embed_dims d = dims_of(in);
    uint64_t n = (uint64_t)d.vocab * d.cols;
    kf_kernel *k =
        kf__kernel_1d(backward ? "embedding_backward" : "embedding_grad",
                      backward ? kf_type_scalar(KF_SCALAR_VOID) : kf__dtype_type(dtype), n);
    if (!k) {
        return NULL;
    }
    kf__bind(k, "table", dtype, KF_ACCESS_READ);
    kf_binding ids = kf__bind(k, "ids", KF_DTYPE_I32, KF_ACCESS_READ);
    kf_binding grad_in = {0};
    kf_binding dy;
    if (backward) {
        kf__bind(k, "out", dtype, KF_ACCESS_READ);
        dy = kf__bind(k, "grad_out", dtype, KF_ACCESS_READ);
        grad_in = kf__bind(k, "grad_in", dtype, KF_ACCESS_READ_WRITE);
    } else {
        dy = kf__bind(k, "dy", dtype, KF_ACCESS_READ);
    }
    kf_val e = kf__each_element(k, "e", n);
    kf_val v =
        kf_let(k, "v", kf_cast(k, kf_type_scalar(KF_SCALAR_I32), kf_div(k, e, kf__u32(k, d.cols))));
    kf_val c = kf_let(k, "c", kf_binary(k, KF_OP_MOD, e, kf__u32(k, d.cols)));
    kf_var acc = kf_declare(k, "acc", kf_type_scalar(KF_SCALAR_F32), kf_lit_f32(k, 0.0f));
    kf_val r = kf_for(k, "r", kf__u32(k, 0), kf__u32(k, d.rows), kf__u32(k, 1));
    kf_if(k, kf_binary(k, KF_OP_EQ, kf_load(k, ids, r), v));
    kf_val g = kf__load_f32(k, dy, kf_add(k, kf_mul(k, r, kf__u32(k, d.cols)), c), dtype);
    kf_assign(k, acc, kf_add(k, kf_read(k, acc), g));
    kf_end(k);
    kf_end(k);
    kf__store_or_yield(k, grad_in, e, kf_read(k, acc), dtype);
    kf_end(k);
    return k;
}

static kf_kernel *embedding_kernel_backward(const kf_shape *in, const kf_op_params *p,
                                            kf_dtype dtype, uint32_t which) {
    kf_shape out;
    if (which != 0 || embedding_shape(in, p, &out, NULL, 0) != KF_OK) {
        return NULL; /* ids have no gradient */
    }
    return embedding_grad_kernel(in, dtype, true);
}

static void embedding_grid(const kf_shape *in, const kf_op_params *p, int32_t which,
                           uint32_t groups[3]) {
    (void)p;
    embed_dims d = dims_of(in);
    uint64_t n = which < 0 ? d.rows * d.cols : (uint64_t)d.vocab * d.cols;
    kf__grid_1d(n, KF__WORKGROUP, groups);
}

/* ---- embedding_grad (table, ids, dy) -> dtable ---- */

static kf_status embedding_grad_shape(const kf_shape *in, const kf_op_params *p, kf_shape *out,
                                      char *msg, size_t msg_size) {
    return kf__grad_shape(&kf__op_embedding_grad, in, p, out, msg, msg_size);
}

static kf_status embedding_grad_spec(const kf_tensor *const *in, const kf_op_params *p,
                                     kf_tensor *out) {
    return kf__grad_spec_forward(&kf__op_embedding_grad, in, p, out);
}

static kf_kernel *embedding_grad_kernel_forward(const kf_shape *in, const kf_op_params *p,
                                                kf_dtype dtype) {
    kf_shape out;
    if (embedding_grad_shape(in, p, &out, NULL, 0) != KF_OK) {
        return NULL;
    }
    return embedding_grad_kernel(in, dtype, false);
}

static void embedding_grad_grid(const kf_shape *in, const kf_op_params *p, int32_t which,
                                uint32_t groups[3]) {
    (void)p, (void)which;
    kf__grid_1d(kf_shape_elements(&in[0]), KF__WORKGROUP, groups);
}

#define CASES(table) .cases = table, .case_count = sizeof table / sizeof table[0]

static const kf_op_case embedding_cases[] = {
    {{SHAPE2(1, 1), SHAPE0}, {.alpha = 0}, "one row, a scalar id"},
    {{SHAPE2(7, 13), SHAPE1(5)}, {.alpha = 0}, "primes"},
    {{SHAPE2(3, 5), SHAPE2(7, 11)}, {.alpha = 0}, "ids of rank 2, many repeats"},
    {{SHAPE2(13, 1), SHAPE3(2, 3, 5)}, {.alpha = 0}, "one column, ids of rank 3"},
    {{SHAPE2(65, 128), SHAPE2(8, 64)}, {.alpha = 0}, "moderate: a character model"},
    {{SHAPE2(1024, 4096), SHAPE1(7)}, {.alpha = 0}, "large table"},
};
static const kf_op_case embedding_grad_cases[] = {
    {{SHAPE2(1, 1), SHAPE0, SHAPE1(1)}, {.alpha = 0}, "one row"},
    {{SHAPE2(7, 13), SHAPE1(5), SHAPE2(5, 13)}, {.alpha = 0}, "primes"},
    {{SHAPE2(3, 5), SHAPE2(7, 11), SHAPE3(7, 11, 5)}, {.alpha = 0}, "many repeats"},
    {{SHAPE2(65, 128), SHAPE2(8, 64), SHAPE3(8, 64, 128)}, {.alpha = 0}, "moderate"},
    {{SHAPE2(1024, 4096), SHAPE1(3), SHAPE2(3, 4096)}, {.alpha = 0}, "large table"},
};

static const kf__input embedding_inputs[] = {{.name = "table"}, {.name = "ids"}};
static const kf__input embedding_grad_inputs[] = {
    {.name = "table"}, {.name = "ids"}, {.name = "dy"}};

/* Forward: a copy (exact, f16 too). dtable: an f32 sum of the rows sharing an id, in id order
 * (up to N terms): sum's 1e-4 against the floor. */
const kf_operator kf__op_embedding = {
    .name = "embedding",
    .about = "rows of table [V, C] picked by i32 ids [...] -> [..., C] (NaN rows for bad ids)",
    .op_class = KF_OP_CLASS_LAYOUT,
    .arity = 2,
    KF__INPUTS(embedding_inputs),
    .shape = embedding_shape,
    .spec_forward = embedding_spec_forward,
    .spec_backward = embedding_spec_backward,
    .kernel_forward = embedding_kernel_forward,
    .kernel_backward = embedding_kernel_backward,
    .tolerance_f32 = 1e-4,
    .tolerance_f16 = 2e-3,
    .input_lo = -1.0f,
    .input_hi = 1.0f,
    .grid = embedding_grid,
    .index_inputs = 1u << 1,
    .index_classes = embedding_classes,
    CASES(embedding_cases)};

const kf_operator kf__op_embedding_grad = {
    .name = "embedding_grad",
    .about = "embedding's gradient for the table: dy's rows added into the rows their ids name",
    .op_class = KF_OP_CLASS_LAYOUT,
    .arity = 3,
    KF__INPUTS(embedding_grad_inputs),
    .shape = embedding_grad_shape,
    .spec_forward = embedding_grad_spec,
    .kernel_forward = embedding_grad_kernel_forward,
    .tolerance_f32 = 1e-4,
    .tolerance_f16 = 2e-3,
    .input_lo = -1.0f,
    .input_hi = 1.0f,
    .grid = embedding_grad_grid,
    .index_inputs = 1u << 1,
    .index_classes = embedding_classes,
    CASES(embedding_grad_cases),
    .grad_of = &kf__op_embedding,
    .grad_input = 0};

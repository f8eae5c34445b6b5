/* embedding(table, ids): rows of a table picked by i32 ids, and its backward operator
 * embedding_grad (dtable: the rows of dy added into the rows their ids name).
 *
 * table [V, C] (f32 or f16), ids i32 [...] (rank 0 to 3) -> [..., C]. ids are an index input
 * (kf_operator.index_inputs): i32 on the GPU, no gradient, drawn in [0, V) by verification. An
 * id outside [0, V) makes its output row NaN (as cross_entropy's invalid labels do) and adds
 * nothing to dtable; the loads stay in bounds.
 *
 * dtable is deterministic without sorting and without atomics: each dtable[v, c] adds the
 * dy[r, c] with ids[r] == v in a fixed order (partial sums over the matches in increasing r,
 * added in a fixed order at the end), the same on every run and device. A workgroup per (row v,
 * chunk of columns) reads the ids a tile at a time and lists the tile's matches in id order, so
 * the ids are read V * chunks * N times (chunks = 1 for C <= 256) and each row of dy once per
 * match: for the character GPT's batch (V = 65, C = 128, N = 4096) 0.27M id reads, where the
 * V * C * N kernel it replaced read 34M. For a 50k-token vocabulary that is still V reads of
 * every id; a sort of the ids once would do better (not built). */
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

/* dtable's kernel (header comment): a workgroup of `lanes` lanes per (table row v, chunk of
 * cpl * EMB_COLS columns); lane = slice * EMB_COLS + x, slices = lanes / EMB_COLS, and the lane
 * adds columns x + EMB_COLS * i (i < cpl) of its chunk. Per tile of lanes * per_lane ids, each
 * lane tests per_lane consecutive ids against v and writes its count; after a barrier every lane
 * reads all the counts (its place in the tile's list: the matches of the lanes before it) and
 * lists its matches, in id order; after a second barrier each lane adds dy at its columns for
 * the listed rows j = slice + slices * t, into `unroll` partial sums per column (t mod unroll:
 * that many loads in flight). At the end the partial sums are added in order, then the slices'
 * in slice order: a fixed order, the same on every run and device. backward: the
 * kernel_backward bindings (table, ids, out, grad_out, grad_in); else the backward operator's
 * (table, ids, dy), yielding.
 *
 * Every value read from workgroup memory is used before the next barrier. Mesa's GLSL compiler
 * (Dawn's GLES path) moves a shared read whose value is read once, later in the same block, down
 * to that use, past a barrier() between (tree grafting, src/compiler/glsl/opt_tree_grafting.cpp:
 * it stops at loops and at the invocation's own writes to what the read reads, not at barriers).
 * e31370d's scan read scan[lane - off], passed a barrier, then added it into scan[lane]: moved
 * past the barrier, the read saw another lane's next value (llvmpipe runs a workgroup as batches
 * of 8 lanes), one match counted 6 times. So the counts are read by every lane after one barrier
 * and used before the next, the tile's total is handed on through found_cell (written before the
 * list's barrier, read after it). Two barriers a tile suffice: the next tile rewrites the counts
 * only after every lane has passed this tile's list barrier (their reads of the counts are done),
 * and the list and found_cell only after its own count barrier (this tile's walk is done). */
#define EMB_COLS 64u       /* lanes of a slice: each adds one column per 64 */
#define EMB_LIST_MAX 2048u /* ids per tile at most (8 KiB of list) */
#define EMB_CPL_MAX 4u
#define EMB_UNROLL_MAX 8u

/* The kernel's shape: lanes (a multiple of EMB_COLS: lanes / EMB_COLS slices share a column),
 * ids each lane tests per tile, columns per lane (a workgroup adds cpl * EMB_COLS columns) and
 * partial sums per column (loads in flight). */
typedef struct emb_config {
    uint32_t lanes, per_lane, cpl, unroll;
    bool walk; /* the V * C * N kernel instead (measuring only) */
} emb_config;

/* The shapes the kernel runs with: on a CPU (llvmpipe runs a workgroup as batches of 8 lanes and
 * pays for each barrier and each workgroup, so few of both), and on a GPU (more lanes share a
 * row's matches: a text's space takes 1/6 of the ids, and its row's sums are the longest chain). */
static const emb_config emb_cpu = {64, 32, 4, 4, false};
static const emb_config emb_gpu = {256, 8, 2, 4, false};

/* The shape for a CPU or a GPU. $KF_EMBGRAD_CONFIG=lanes,per_lane,cpl,unroll picks another one,
 * =cpu or =gpu that device's, =walk the V * C * N kernel, for measuring them on one device
 * (bench/embedding_grad.sh) and testing them on another (tests/ops/test_ops_view.c); a shape that
 * does not fit is ignored. */
static emb_config emb_config_of(const embed_dims *d, bool gpu) {
    emb_config cfg = gpu ? emb_gpu : emb_cpu;
    const char *env = getenv("KF_EMBGRAD_CONFIG");
    unsigned l, pl, cpl, u;
    if (env && !strcmp(env, "walk")) {
        cfg.walk = true;
        return cfg;
    } else if (env && (!strcmp(env, "cpu") || !strcmp(env, "gpu"))) {
        cfg = env[0] == 'g' ? emb_gpu : emb_cpu;
    } else if (env && sscanf(env, "%u,%u,%u,%u", &l, &pl, &cpl, &u) == 4 && l >= EMB_COLS &&
               l <= 256 && l % EMB_COLS == 0 && pl >= 1 && pl <= 32 && l * pl <= EMB_LIST_MAX &&
               cpl >= 1 && cpl <= EMB_CPL_MAX && u >= 1 && u <= EMB_UNROLL_MAX) {
        cfg = (emb_config){l, pl, cpl, u, false};
    }
    uint32_t need = (d->cols + EMB_COLS - 1) / EMB_COLS;
    cfg.cpl = need < cfg.cpl ? need : cfg.cpl;
    return cfg;
}

static uint32_t emb_chunks(const embed_dims *d, const emb_config *cfg) {
    uint32_t width = cfg->cpl * EMB_COLS;
    return (d->cols + width - 1) / width;
}

/* The grid of embedding_grad_kernel: a workgroup per (row, chunk of columns). */
static void emb_grid(const embed_dims *d, uint32_t groups[3]) {
    emb_config cfg = emb_config_of(d, false);
    if (cfg.walk) {
        kf__grid_1d((uint64_t)d->vocab * d->cols, KF__WORKGROUP, groups);
    } else {
        kf__grid_1d((uint64_t)d->vocab * emb_chunks(d, &cfg), 1, groups);
    }
}

/* The kernel this file had before the tiled one (kept for measuring against it,
 * $KF_EMBGRAD_CONFIG=walk): one invocation per (v, c) walking every id in order. */
static kf_kernel *embedding_grad_walk_kernel(const kf_shape *in, kf_dtype dtype, bool backward) {
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

static kf_kernel *embedding_grad_kernel(const kf_shape *in, kf_dtype dtype, bool backward,
                                        bool gpu) {
    embed_dims d = dims_of(in);
    emb_config cfg = emb_config_of(&d, gpu);
    if (cfg.walk) {
        return embedding_grad_walk_kernel(in, dtype, backward);
    }
    uint32_t slices = cfg.lanes / EMB_COLS, tile = cfg.lanes * cfg.per_lane;
    kf_kernel_desc desc = {0};
    desc.name = backward ? "embedding_backward" : "embedding_grad";
    desc.workgroup_size[0] = cfg.lanes;
    desc.output = backward ? kf_type_scalar(KF_SCALAR_VOID) : kf__dtype_type(dtype);
    kf_kernel *k = kf_kernel_create(&desc);
    if (!k) {
        return NULL;
    }
    uint32_t chunks = emb_chunks(&d, &cfg);
    uint64_t workgroups = (uint64_t)d.vocab * chunks;
    uint32_t groups[3];
    kf__grid_1d(workgroups, 1, groups);
    kf_kernel_set_grid(k, groups);
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
    kf_type u32 = kf_type_scalar(KF_SCALAR_U32);
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32);
    kf_shared counts =
        kf_kernel_workgroup(k, "counts", kf_type_vec(KF_SCALAR_U32, 4), cfg.lanes / 4);
    kf_shared found_cell = kf_kernel_workgroup(k, "found_cell", u32, 1);
    kf_shared list = kf_kernel_workgroup(k, "list", u32, tile);
    kf_shared parts =
        slices > 1 ? kf_kernel_workgroup(k, "parts", f32, cfg.lanes * cfg.cpl) : (kf_shared){0};
    kf_val wg = kf_let(k, "wg", kf_workgroup_linear(k));
    kf_val lane = kf_let(k, "lane", kf_builtin_get(k, KF_BUILTIN_LOCAL_INDEX));
    kf_val slice = kf_let(k, "slice", kf_div(k, lane, kf__u32(k, EMB_COLS)));
    /* wg is uniform over the workgroup: the barriers below stay in uniform control flow */
    kf_if(k, kf_binary(k, KF_OP_LT, wg, kf__u32(k, workgroups)));
    kf_val vu = kf_let(k, "vu", kf_div(k, wg, kf__u32(k, chunks)));
    kf_val v = kf_let(k, "v", kf_cast(k, kf_type_scalar(KF_SCALAR_I32), vu));
    kf_val c0 = kf_let(k, "c0",
                       kf_add(k,
                              kf_mul(k, kf_binary(k, KF_OP_MOD, wg, kf__u32(k, chunks)),
                                     kf__u32(k, cfg.cpl * EMB_COLS)),
                              kf_binary(k, KF_OP_MOD, lane, kf__u32(k, EMB_COLS))));
    kf_val c[EMB_CPL_MAX], col[EMB_CPL_MAX];
    kf_var acc[EMB_CPL_MAX][EMB_UNROLL_MAX];
    for (uint32_t x = 0; x < cfg.cpl; x++) {
        char name[32];
        c[x] = kf_add(k, c0, kf__u32(k, x * EMB_COLS));
        snprintf(name, sizeof name, "col%u", x);
        col[x] = kf_let(k, name, kf_call2(k, KF_FN_MIN, c[x], kf__u32(k, d.cols - 1)));
        for (uint32_t u = 0; u < cfg.unroll; u++) {
            snprintf(name, sizeof name, "acc%u_%u", x, u);
            acc[x][u] = kf_declare(k, name, f32, kf_lit_f32(k, 0.0f));
        }
    }
    kf_val base = kf_for(k, "base", kf__u32(k, 0), kf__u32(k, d.rows), kf__u32(k, tile));
    /* this lane's ids: base + lane * per_lane + q, matched against v */
    kf_val first = kf_let(k, "first", kf_add(k, base, kf_mul(k, lane, kf__u32(k, cfg.per_lane))));
    /* loops, not unrolled: 32 unrolled id tests took llvmpipe 5 s to compile (each kernel) */
    kf_var bits = kf_declare(k, "bits", u32, kf__u32(k, 0));
    kf_var mine = kf_declare(k, "mine", u32, kf__u32(k, 0));
    /* the lane's ids that exist; a bound the compiler cannot unroll (compile time) */
    kf_val have = kf_let(k, "have",
                         kf_select(k, kf__u32(k, 0),
                                   kf_call2(k, KF_FN_MIN, kf_sub(k, kf__u32(k, d.rows), first),
                                            kf__u32(k, cfg.per_lane)),
                                   kf_binary(k, KF_OP_LT, first, kf__u32(k, d.rows))));
    kf_val qi = kf_for(k, "q", kf__u32(k, 0), have, kf__u32(k, 1));
    kf_val r = kf_add(k, first, qi);
    kf_val id = kf_load(k, ids, kf_call2(k, KF_FN_MIN, r, kf__u32(k, d.rows - 1)));
    kf_val one = kf_select(k, kf__u32(k, 0), kf__u32(k, 1), kf_binary(k, KF_OP_EQ, id, v));
    kf_assign(k, bits,
              kf_binary(k, KF_OP_BIT_OR, kf_read(k, bits), kf_binary(k, KF_OP_SHL, one, qi)));
    kf_assign(k, mine, kf_add(k, kf_read(k, mine), one));
    kf_end(k);
    kf_shared_store_lane(k, counts, kf_div(k, lane, kf__u32(k, 4)),
                         kf_binary(k, KF_OP_MOD, lane, kf__u32(k, 4)), kf_read(k, mine));
    kf_barrier(k);
    /* every lane reads all the counts: the matches of the lanes before it (its place in the
     * list) and the tile's total, which the last lane hands on in found_cell */
    kf_type u32x4 = kf_type_vec(KF_SCALAR_U32, 4);
    kf_val zero4 = kf_splat(k, u32x4, kf__u32(k, 0));
    kf_var sums[2] = {kf_declare(k, "before4", u32x4, zero4),
                      kf_declare(k, "total4", u32x4, zero4)};
    kf_val lane4 = kf_splat(k, u32x4, lane);
    kf_val quad[4] = {kf__u32(k, 0), kf__u32(k, 1), kf__u32(k, 2), kf__u32(k, 3)};
    kf_val offs = kf_vec(k, u32x4, quad, 4);
    /* a loop: unrolled, 256 lanes' selects took llvmpipe seconds to compile */
    kf_val i = kf_for(k, "i", kf__u32(k, 0), kf__u32(k, cfg.lanes / 4), kf__u32(k, 1));
    kf_val w = kf_let(k, "w", kf_shared_load(k, counts, i));
    kf_val at4 = kf_add(k, kf_splat(k, u32x4, kf_mul(k, i, kf__u32(k, 4))), offs);
    kf_assign(
        k, sums[0],
        kf_add(k, kf_read(k, sums[0]), kf_select(k, zero4, w, kf_binary(k, KF_OP_LT, at4, lane4))));
    kf_assign(k, sums[1], kf_add(k, kf_read(k, sums[1]), w));
    kf_end(k);
    kf_val before = kf__u32(k, 0), total = kf__u32(k, 0);
    kf_val b4 = kf_read(k, sums[0]), t4 = kf_read(k, sums[1]);
    for (uint32_t x = 0; x < 4; x++) {
        before = kf_add(k, before, kf_extract(k, b4, x));
        total = kf_add(k, total, kf_extract(k, t4, x));
    }
    kf_var at = kf_declare(k, "at", u32, before);
    kf_if(k, kf_binary(k, KF_OP_EQ, lane, kf__u32(k, cfg.lanes - 1)));
    kf_shared_store(k, found_cell, kf__u32(k, 0), total);
    kf_end(k);
    kf_val q2 = kf_for(k, "q", kf__u32(k, 0), have, kf__u32(k, 1));
    kf_if(k, kf_binary(k, KF_OP_NE,
                       kf_binary(k, KF_OP_BIT_AND, kf_binary(k, KF_OP_SHR, kf_read(k, bits), q2),
                                 kf__u32(k, 1)),
                       kf__u32(k, 0)));
    kf_shared_store(k, list, kf_read(k, at), kf_add(k, first, q2));
    kf_assign(k, at, kf_add(k, kf_read(k, at), kf__u32(k, 1)));
    kf_end(k);
    kf_end(k);
    kf_barrier(k);
    kf_val found = kf_let(k, "found", kf_shared_load(k, found_cell, kf__u32(k, 0)));
    /* the listed rows in id order, unroll of them in flight per lane; a row past found adds
     * +0.0 (exact: no partial sum is ever -0.0) */
    kf_val j = kf_for(k, "j", slice, found, kf__u32(k, slices * cfg.unroll));
    for (uint32_t u = 0; u < cfg.unroll; u++) {
        kf_val jj = kf_add(k, j, kf__u32(k, u * slices));
        kf_val row = kf_shared_load(k, list, kf_call2(k, KF_FN_MIN, jj, kf__u32(k, tile - 1)));
        kf_val at_row = kf_mul(k, row, kf__u32(k, d.cols));
        kf_val keep = kf_binary(k, KF_OP_LT, jj, found);
        for (uint32_t x = 0; x < cfg.cpl; x++) {
            kf_val g = kf__load_f32(k, dy, kf_add(k, at_row, col[x]), dtype);
            kf_assign(k, acc[x][u],
                      kf_add(k, kf_read(k, acc[x][u]), kf_select(k, kf_lit_f32(k, 0.0f), g, keep)));
        }
    }
    kf_end(k);
    kf_end(k);
    kf_val sum[EMB_CPL_MAX];
    for (uint32_t x = 0; x < cfg.cpl; x++) {
        sum[x] = kf_read(k, acc[x][0]);
        for (uint32_t u = 1; u < cfg.unroll; u++) {
            sum[x] = kf_add(k, sum[x], kf_read(k, acc[x][u]));
        }
        if (slices > 1) {
            kf_shared_store(k, parts, kf_add(k, lane, kf__u32(k, x * cfg.lanes)), sum[x]);
        }
    }
    if (slices > 1) {
        kf_barrier(k);
    }
    /* the slices' sums in slice order */
    kf_if(k, kf_binary(k, KF_OP_EQ, slice, kf__u32(k, 0)));
    for (uint32_t x = 0; x < cfg.cpl; x++) {
        kf_val whole = sum[x];
        for (uint32_t s = 1; s < slices; s++) {
            whole =
                kf_add(k, whole,
                       kf_shared_load(k, parts,
                                      kf_add(k, lane, kf__u32(k, x * cfg.lanes + s * EMB_COLS))));
        }
        kf_if(k, kf_binary(k, KF_OP_LT, c[x], kf__u32(k, d.cols)));
        kf__store_or_yield(k, grad_in, kf_add(k, kf_mul(k, vu, kf__u32(k, d.cols)), c[x]), whole,
                           dtype);
        kf_end(k);
    }
    kf_end(k);
    kf_end(k);
    return k;
}

static kf_kernel *embedding_kernel_backward(const kf_shape *in, const kf_op_params *p,
                                            kf_dtype dtype, uint32_t which) {
    kf_shape out;
    if (which != 0 || embedding_shape(in, p, &out, NULL, 0) != KF_OK) {
        return NULL; /* ids have no gradient */
    }
    return embedding_grad_kernel(in, dtype, true, false);
}

static void embedding_grid(const kf_shape *in, const kf_op_params *p, int32_t which,
                           uint32_t groups[3]) {
    (void)p;
    embed_dims d = dims_of(in);
    if (which < 0) {
        kf__grid_1d(d.rows * d.cols, KF__WORKGROUP, groups);
    } else {
        emb_grid(&d, groups);
    }
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
    return embedding_grad_kernel(in, dtype, false, false);
}

/* The CPU or the GPU shape, by the adapter (kernel_forward, with no device, takes the CPU's). */
static kf_kernel *embedding_grad_choose(kf_context *ctx, const kf_shape *in, const kf_op_params *p,
                                        kf_dtype dtype) {
    kf_shape out;
    kf_adapter_info info;
    if (embedding_grad_shape(in, p, &out, NULL, 0) != KF_OK) {
        return NULL;
    }
    bool gpu = kf_context_adapter_info(ctx, &info) == KF_OK && strcmp(info.adapter_type, "CPU");
    return embedding_grad_kernel(in, dtype, false, gpu);
}

static void embedding_grad_grid(const kf_shape *in, const kf_op_params *p, int32_t which,
                                uint32_t groups[3]) {
    (void)p, (void)which;
    embed_dims d = dims_of(in);
    emb_grid(&d, groups);
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
    {{SHAPE2(1, 3), SHAPE1(4099), SHAPE2(4099, 3)}, {.alpha = 0}, "every id matches, 3 tiles"},
    {{SHAPE2(5, 67), SHAPE2(3, 701), SHAPE3(3, 701, 67)}, {.alpha = 0}, "2 tiles, 67 columns"},
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
    .kernel_choose = embedding_grad_choose,
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

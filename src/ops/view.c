/* View operators: reshape, permute, slice, concat (and slice's backward operator, slice_grad).
 *
 * A view moves values without changing them: output element e is element view_index(e) of one
 * of its inputs. That one mapping, in IR (kf_operator.view_index), is what their own gather
 * kernels run and what the planner composes into a consumer's loads so that the view costs no
 * pass of its own (src/fuse/emit.c; docs/fusion.md). The float64 specs use the same mapping
 * written in C (view_source), so a spec and a kernel that disagree on it are told apart by
 * verification only through their independent index arithmetic: the C one walks coordinates,
 * the IR one divides and takes remainders.
 *
 * Tolerances are 0: values are copied, bit for bit (f16 survives f16 -> f32 -> f16). */
#include "ops/ops_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------- */
/* Shapes and coordinates                                                                   */
/* ---------------------------------------------------------------------------------------- */

/* axis in [-rank, rank) as 0..rank-1, or -1 when out of range. */
static int32_t norm_axis(int32_t axis, uint32_t rank) {
    int32_t r = (int32_t)rank;
    if (axis < -r || axis >= r) {
        return -1;
    }
    return axis < 0 ? axis + r : axis;
}

/* Elements after axis (the stride of axis). */
static uint64_t inner_of(const kf_shape *s, uint32_t axis) {
    uint64_t n = 1;
    for (uint32_t d = axis + 1; d < s->rank; d++) {
        n *= s->dims[d];
    }
    return n;
}

/* The axes of a permute on a tensor of `rank` dims, normalised; false when they are not a
 * permutation of 0..rank-1. */
static bool permute_axes(const kf_op_params *p, uint32_t rank, uint32_t axes[KF_MAX_DIMS]) {
    if (p->list_count != rank) {
        return false;
    }
    bool seen[KF_MAX_DIMS] = {false};
    for (uint32_t d = 0; d < rank; d++) {
        int32_t a = norm_axis(p->list[d], rank);
        if (a < 0 || seen[a]) {
            return false;
        }
        seen[a] = true;
        axes[d] = (uint32_t)a;
    }
    return true;
}

static const char *list_str(const kf_op_params *p, char *buf, size_t size) {
    size_t used = (size_t)snprintf(buf, size, "[");
    for (uint32_t i = 0; i < p->list_count && i < KF_MAX_DIMS && used < size; i++) {
        used += (size_t)snprintf(buf + used, size - used, "%s%d", i ? ", " : "", (int)p->list[i]);
    }
    if (used < size) {
        snprintf(buf + used, size - used, "]");
    }
    return buf;
}

/* ---------------------------------------------------------------------------------------- */
/* Parameters                                                                               */
/* ---------------------------------------------------------------------------------------- */

static const kf__param reshape_params[] = {
    {.name = "shape",
     .about = "the new shape; one entry may be -1 (inferred from the element count)",
     .type = KF_PARAM_TYPE_INT_LIST,
     KF__FIELD(list, LIST),
     .min = -1,
     .max = 2147483647},
};
static const kf__param permute_params[] = {
    {.name = "axes",
     .about = "output dim d is input dim axes[d] (negative counts from the end)",
     .type = KF_PARAM_TYPE_INT_LIST,
     KF__FIELD(list, LIST),
     .min = -KF_MAX_DIMS,
     .max = KF_MAX_DIMS - 1},
};
#define AXIS_PARAM(ABOUT)                                                                          \
    {                                                                                              \
        .name = "axis", .about = ABOUT, .type = KF_PARAM_TYPE_INT, KF__FIELD(axis, AXIS),          \
        .min = -KF_MAX_DIMS, .max = KF_MAX_DIMS - 1                                                \
    }
static const kf__param slice_params[] = {
    AXIS_PARAM("the axis sliced (negative counts from the end)"),
    {.name = "start",
     .about = "the first index taken",
     .type = KF_PARAM_TYPE_INT,
     KF__FIELD(start, START),
     .min = 0,
     .max = 2147483647},
    {.name = "length",
     .about = "how many indices are taken (0: the rest of the axis)",
     .type = KF_PARAM_TYPE_INT,
     KF__FIELD(length, LENGTH),
     .min = 0,
     .max = 2147483647},
};
static const kf__param concat_params[] = {
    AXIS_PARAM("the axis joined along (negative counts from the end)"),
};

static int32_t slice_axis(const kf_op_params *p) {
    return (int32_t)kf__param_value(p, &slice_params[0]);
}
static uint32_t slice_start(const kf_op_params *p) {
    return (uint32_t)kf__param_value(p, &slice_params[1]);
}
/* The length taken from an axis of `dim`: the given one, or 0 for the rest of the axis. */
static uint32_t slice_length(const kf_op_params *p, uint32_t dim) {
    uint32_t length = (uint32_t)kf__param_value(p, &slice_params[2]);
    uint32_t start = slice_start(p);
    return length ? length : start < dim ? dim - start : 0;
}
static int32_t concat_axis(const kf_op_params *p) {
    return (int32_t)kf__param_value(p, &concat_params[0]);
}

bool kf__op_swaps_last_two(const kf_operator *op, const kf_op_params *p, uint32_t rank) {
    uint32_t axes[KF_MAX_DIMS];
    if (op != &kf__op_permute || rank < 2 || !permute_axes(p, rank, axes)) {
        return false;
    }
    for (uint32_t d = 0; d + 2 < rank; d++) {
        if (axes[d] != d) {
            return false;
        }
    }
    return axes[rank - 2] == rank - 1 && axes[rank - 1] == rank - 2;
}

/* ---------------------------------------------------------------------------------------- */
/* Shape rules                                                                              */
/* ---------------------------------------------------------------------------------------- */

static kf_status reshape_shape(const kf_shape *in, const kf_op_params *p, kf_shape *out, char *msg,
                               size_t msg_size) {
    char a[64], l[96];
    if (!kf__shape_valid(&in[0])) {
        return kf__shape_error(msg, msg_size, "reshape: invalid input shape %s",
                               kf_shape_str(&in[0], a, sizeof a));
    }
    if (!(p->given & KF_PARAM_LIST) && p->list_count == 0) {
        return kf__shape_error(msg, msg_size,
                               "reshape: shape=[...] is required (the new dims; one may be -1)");
    }
    uint64_t elements = kf_shape_elements(&in[0]), known = 1;
    int32_t infer = -1;
    for (uint32_t d = 0; d < p->list_count; d++) {
        if (p->list[d] == -1 && infer < 0) {
            infer = (int32_t)d;
        } else if (p->list[d] < 1) {
            return kf__shape_error(msg, msg_size,
                                   "reshape: shape=%s: dims are at least 1, with at most one -1",
                                   list_str(p, l, sizeof l));
        } else {
            known *= (uint64_t)p->list[d];
        }
    }
    bool fits = infer >= 0 ? known && elements % known == 0 && elements / known <= UINT32_MAX
                           : known == elements;
    if (!fits) {
        return kf__shape_error(msg, msg_size,
                               "reshape: cannot reshape %s (%llu elements) into shape=%s",
                               kf_shape_str(&in[0], a, sizeof a), (unsigned long long)elements,
                               list_str(p, l, sizeof l));
    }
    out->rank = p->list_count;
    memset(out->dims, 0, sizeof out->dims);
    for (uint32_t d = 0; d < p->list_count; d++) {
        out->dims[d] = (int32_t)d == infer ? (uint32_t)(elements / known) : (uint32_t)p->list[d];
    }
    return KF_OK;
}

static kf_status permute_shape(const kf_shape *in, const kf_op_params *p, kf_shape *out, char *msg,
                               size_t msg_size) {
    char a[64], l[96];
    uint32_t axes[KF_MAX_DIMS];
    if (!kf__shape_valid(&in[0]) || !permute_axes(p, in[0].rank, axes)) {
        return kf__shape_error(
            msg, msg_size, "permute: axes=%s is not a permutation of the %u axes of %s",
            list_str(p, l, sizeof l), in[0].rank, kf_shape_str(&in[0], a, sizeof a));
    }
    *out = in[0];
    for (uint32_t d = 0; d < in[0].rank; d++) {
        out->dims[d] = in[0].dims[axes[d]];
    }
    return KF_OK;
}

static kf_status slice_shape(const kf_shape *in, const kf_op_params *p, kf_shape *out, char *msg,
                             size_t msg_size) {
    char a[64];
    int32_t axis = kf__shape_valid(&in[0]) ? norm_axis(slice_axis(p), in[0].rank) : -1;
    if (axis < 0) {
        return kf__shape_error(msg, msg_size, "slice: axis %d is not an axis of %s",
                               (int)slice_axis(p), kf_shape_str(&in[0], a, sizeof a));
    }
    uint32_t dim = in[0].dims[axis], start = slice_start(p), length = slice_length(p, dim);
    if (length == 0 || (uint64_t)start + length > dim) {
        return kf__shape_error(msg, msg_size,
                               "slice: start %u + length %u runs past axis %d of %s (%u long)",
                               start, length, (int)axis, kf_shape_str(&in[0], a, sizeof a), dim);
    }
    *out = in[0];
    out->dims[axis] = length;
    return KF_OK;
}

static kf_status concat_shape(const kf_shape *in, const kf_op_params *p, kf_shape *out, char *msg,
                              size_t msg_size) {
    char a[64], b[64];
    int32_t axis = kf__shape_valid(&in[0]) && kf__shape_valid(&in[1]) && in[0].rank == in[1].rank
                       ? norm_axis(concat_axis(p), in[0].rank)
                       : -1;
    bool fits = axis >= 0;
    for (uint32_t d = 0; fits && d < in[0].rank; d++) {
        fits = (int32_t)d == axis || in[0].dims[d] == in[1].dims[d];
    }
    if (fits && (uint64_t)in[0].dims[axis] + in[1].dims[axis] > UINT32_MAX) {
        fits = false;
    }
    if (!fits || kf_shape_elements(&in[0]) + kf_shape_elements(&in[1]) > UINT32_MAX) {
        return kf__shape_error(msg, msg_size,
                               "concat: a %s and b %s do not join along axis %d (same rank, the "
                               "same dims but that one)",
                               kf_shape_str(&in[0], a, sizeof a), kf_shape_str(&in[1], b, sizeof b),
                               (int)concat_axis(p));
    }
    *out = in[0];
    out->dims[axis] = in[0].dims[axis] + in[1].dims[axis];
    return KF_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* The mapping in C: output element e is element *at of input *which                         */
/* ---------------------------------------------------------------------------------------- */

typedef enum view_kind { VIEW_RESHAPE = 1, VIEW_PERMUTE, VIEW_SLICE, VIEW_CONCAT } view_kind;

typedef struct view_map {
    view_kind kind;
    kf_shape in0, out;
    uint32_t axes[KF_MAX_DIMS];
    uint64_t inner;         /* slice, concat: elements after the axis */
    uint32_t in_len[2];     /* slice: the input's axis; concat: a's and b's */
    uint32_t start, length; /* slice */
} view_map;

static kf_status view_map_make(view_kind kind, const kf_shape *in, const kf_op_params *p,
                               view_map *m) {
    memset(m, 0, sizeof *m);
    m->kind = kind;
    m->in0 = in[0];
    kf_status st = kind == VIEW_RESHAPE   ? reshape_shape(in, p, &m->out, NULL, 0)
                   : kind == VIEW_PERMUTE ? permute_shape(in, p, &m->out, NULL, 0)
                   : kind == VIEW_SLICE   ? slice_shape(in, p, &m->out, NULL, 0)
                                          : concat_shape(in, p, &m->out, NULL, 0);
    if (st != KF_OK) {
        return st;
    }
    if (kind == VIEW_PERMUTE) {
        permute_axes(p, in[0].rank, m->axes);
    } else if (kind == VIEW_SLICE || kind == VIEW_CONCAT) {
        int32_t raw = kind == VIEW_SLICE ? slice_axis(p) : concat_axis(p);
        uint32_t axis = (uint32_t)norm_axis(raw, in[0].rank);
        m->axes[0] = axis;
        m->inner = inner_of(&in[0], axis);
        m->in_len[0] = in[0].dims[axis];
        m->in_len[1] = kind == VIEW_CONCAT ? in[1].dims[axis] : 0;
        m->start = kind == VIEW_SLICE ? slice_start(p) : 0;
        m->length = m->out.dims[axis];
    }
    return KF_OK;
}

static void view_source(const view_map *m, uint64_t e, uint32_t *which, uint64_t *at) {
    *which = 0;
    if (m->kind == VIEW_RESHAPE) {
        *at = e;
        return;
    }
    if (m->kind == VIEW_PERMUTE) {
        /* the output's coordinates, last first; input dim axes[d] holds output coordinate d */
        uint64_t coord[KF_MAX_DIMS] = {0}, rest = e;
        for (uint32_t d = m->out.rank; d-- > 0;) {
            coord[d] = rest % m->out.dims[d];
            rest /= m->out.dims[d];
        }
        uint64_t in_coord[KF_MAX_DIMS] = {0};
        for (uint32_t d = 0; d < m->out.rank; d++) {
            in_coord[m->axes[d]] = coord[d];
        }
        uint64_t idx = 0;
        for (uint32_t d = 0; d < m->in0.rank; d++) {
            idx = idx * m->in0.dims[d] + in_coord[d];
        }
        *at = idx;
        return;
    }
    uint64_t r = e % m->inner, c = (e / m->inner) % m->length, o = e / (m->inner * m->length);
    if (m->kind == VIEW_SLICE) {
        *at = (o * m->in_len[0] + m->start + c) * m->inner + r;
        return;
    }
    *which = c < m->in_len[0] ? 0u : 1u;
    uint64_t cw = *which ? c - m->in_len[0] : c;
    *at = (o * m->in_len[*which] + cw) * m->inner + r;
}

static kf_status view_spec_forward(view_kind kind, const kf_tensor *const *in,
                                   const kf_op_params *p, kf_tensor *out) {
    kf_shape shapes[2] = {in[0]->shape, kind == VIEW_CONCAT ? in[1]->shape : in[0]->shape};
    view_map m;
    kf_status st = view_map_make(kind, shapes, p, &m);
    if (st != KF_OK || !kf_shape_eq(&m.out, &out->shape)) {
        return st != KF_OK ? st : KF_ERROR_SHAPE;
    }
    uint64_t n = kf_shape_elements(&m.out);
    for (uint64_t e = 0; e < n; e++) {
        uint32_t which;
        uint64_t at;
        view_source(&m, e, &which, &at);
        out->data[e] = in[which]->data[at];
    }
    return KF_OK;
}

/* Each input element is read by at most one output element, so its gradient is that element's
 * dy, or 0 (a slice's elements outside the slice). */
static kf_status view_spec_backward(view_kind kind, const kf_tensor *const *in,
                                    const kf_tensor *grad_out, const kf_op_params *p,
                                    kf_tensor *const *grad_in) {
    kf_shape shapes[2] = {in[0]->shape, kind == VIEW_CONCAT ? in[1]->shape : in[0]->shape};
    view_map m;
    kf_status st = view_map_make(kind, shapes, p, &m);
    if (st != KF_OK) {
        return st;
    }
    uint32_t arity = kind == VIEW_CONCAT ? 2u : 1u;
    for (uint32_t i = 0; i < arity; i++) {
        if (grad_in[i]) {
            memset(grad_in[i]->data, 0, sizeof(float) * kf_tensor_size(grad_in[i]));
        }
    }
    uint64_t n = kf_shape_elements(&m.out);
    for (uint64_t e = 0; e < n; e++) {
        uint32_t which;
        uint64_t at;
        view_source(&m, e, &which, &at);
        if (grad_in[which]) {
            grad_in[which]->data[at] = grad_out->data[e];
        }
    }
    return KF_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* The mapping in IR                                                                        */
/* ---------------------------------------------------------------------------------------- */

static kf_val u32(kf_kernel *k, uint64_t v) {
    return kf__u32(k, v);
}

/* (e / stride) % dim, skipping what is the identity. */
static kf_val coord_of(kf_kernel *k, kf_val e, uint64_t stride, uint32_t dim, uint64_t total) {
    kf_val c = stride == 1 ? e : kf_div(k, e, u32(k, stride));
    return stride * dim >= total ? c : kf_binary(k, KF_OP_MOD, c, u32(k, dim));
}

static kf_val reshape_view(kf_kernel *k, const kf_shape *in, const kf_op_params *p, kf_val e,
                           uint32_t which, kf_val *take) {
    (void)k, (void)in, (void)p, (void)which;
    if (take) {
        *take = (kf_val){0};
    }
    return e;
}

static kf_val permute_view(kf_kernel *k, const kf_shape *in, const kf_op_params *p, kf_val e,
                           uint32_t which, kf_val *take) {
    (void)which;
    if (take) {
        *take = (kf_val){0};
    }
    view_map m;
    if (view_map_make(VIEW_PERMUTE, in, p, &m) != KF_OK) {
        return u32(k, 0);
    }
    uint64_t in_stride[KF_MAX_DIMS], total = kf_shape_elements(&m.out), s = 1;
    for (uint32_t d = m.in0.rank; d-- > 0;) {
        in_stride[d] = s;
        s *= m.in0.dims[d];
    }
    kf_val idx = {0};
    uint64_t out_stride = 1;
    for (uint32_t d = m.out.rank; d-- > 0;) {
        if (m.out.dims[d] != 1) {
            kf_val c = coord_of(k, e, out_stride, m.out.dims[d], total);
            uint64_t st = in_stride[m.axes[d]];
            kf_val term = st == 1 ? c : kf_mul(k, c, u32(k, st));
            idx = idx.id ? kf_add(k, idx, term) : term;
        }
        out_stride *= m.out.dims[d];
    }
    return idx.id ? idx : u32(k, 0);
}

/* Output element e of a [outer, length, inner] view as (outer, coordinate, inner) pieces. */
static void split_axis(kf_kernel *k, const view_map *m, kf_val e, kf_val *o, kf_val *c, kf_val *r) {
    uint64_t total = kf_shape_elements(&m->out);
    *r = m->inner == 1 ? u32(k, 0) : kf_binary(k, KF_OP_MOD, e, u32(k, m->inner));
    *c = coord_of(k, e, m->inner, m->length, total);
    uint64_t plane = m->inner * m->length;
    *o = plane >= total ? u32(k, 0) : kf_div(k, e, u32(k, plane));
}

/* ((o * len + c) * inner + r) */
static kf_val join_axis(kf_kernel *k, const view_map *m, kf_val o, kf_val c, kf_val r,
                        uint32_t len) {
    kf_val row = kf_add(k, kf_mul(k, o, u32(k, len)), c);
    kf_val idx = m->inner == 1 ? row : kf_mul(k, row, u32(k, m->inner));
    return m->inner == 1 ? idx : kf_add(k, idx, r);
}

static kf_val slice_view(kf_kernel *k, const kf_shape *in, const kf_op_params *p, kf_val e,
                         uint32_t which, kf_val *take) {
    (void)which;
    if (take) {
        *take = (kf_val){0};
    }
    view_map m;
    if (view_map_make(VIEW_SLICE, in, p, &m) != KF_OK) {
        return u32(k, 0);
    }
    kf_val o, c, r;
    split_axis(k, &m, e, &o, &c, &r);
    kf_val at = m.start ? kf_add(k, c, u32(k, m.start)) : c;
    return join_axis(k, &m, o, at, r, m.in_len[0]);
}

static kf_val concat_view(kf_kernel *k, const kf_shape *in, const kf_op_params *p, kf_val e,
                          uint32_t which, kf_val *take) {
    view_map m;
    if (view_map_make(VIEW_CONCAT, in, p, &m) != KF_OK) {
        if (take) {
            *take = kf_lit_bool(k, which == 0);
        }
        return u32(k, 0);
    }
    kf_val o, c, r;
    split_axis(k, &m, e, &o, &c, &r);
    kf_val in_a = kf_binary(k, KF_OP_LT, c, u32(k, m.in_len[0]));
    if (take) {
        *take = which == 0 ? in_a : kf_unary(k, KF_OP_NOT, in_a);
    }
    /* clamped into the input's own range, so the load that is not taken stays in bounds */
    kf_val cw =
        which == 0 ? kf_call2(k, KF_FN_MIN, c, u32(k, m.in_len[0] - 1))
                   : kf_sub(k, kf_call2(k, KF_FN_MAX, c, u32(k, m.in_len[0])), u32(k, m.in_len[0]));
    return join_axis(k, &m, o, cw, r, m.in_len[which]);
}

/* ---------------------------------------------------------------------------------------- */
/* Kernels: one invocation per element, gathering through the mapping                       */
/* ---------------------------------------------------------------------------------------- */

static kf_kernel *gather_kernel(const kf_operator *op, const kf_shape *in, const kf_op_params *p,
                                kf_dtype dtype) {
    kf_shape out;
    if (op->shape(in, p, &out, NULL, 0) != KF_OK) {
        return NULL;
    }
    uint32_t arity = op->arity;
    kf_kernel *k = kf__kernel_1d(op->name, kf__dtype_type(dtype), kf_shape_elements(&out));
    if (!k) {
        return NULL;
    }
    kf_binding b[2];
    for (uint32_t i = 0; i < arity; i++) {
        b[i] = kf__bind(k, i ? "b" : "a", dtype, KF_ACCESS_READ);
    }
    kf_val e = kf__each_element(k, "e", kf_shape_elements(&out));
    kf_val v = {0};
    for (uint32_t i = 0; i < arity; i++) {
        kf_val take = {0};
        kf_val at = op->view_index(k, in, p, e, i, &take);
        kf_val vi = kf__load_f32(k, b[i], at, dtype);
        v = !take.id ? vi : kf_select(k, v.id ? v : kf_lit_f32(k, 0.0f), vi, take);
    }
    kf__yield_f32(k, v, e, dtype);
    kf_end(k);
    return k;
}

/* The backward kernels of the views, gathering too: grad_in element e reads the one dy element
 * that holds it (a view's inverse mapping), or is 0 (outside a slice). `src` maps grad_in's
 * element to dy's, `inside` (may be {0}) says whether it has one. */
typedef struct grad_gather {
    kf_kernel *k;
    kf_binding grad_out, grad_in;
    kf_val e;
} grad_gather;

static bool grad_begin(grad_gather *g, const char *name, uint32_t arity, const kf_shape *target,
                       kf_dtype dtype) {
    g->k = kf__kernel_1d(name, kf_type_scalar(KF_SCALAR_VOID), kf_shape_elements(target));
    if (!g->k) {
        return false;
    }
    for (uint32_t i = 0; i < arity; i++) {
        kf__bind(g->k, i ? "b" : "a", dtype, KF_ACCESS_READ);
    }
    kf__bind(g->k, "out", dtype, KF_ACCESS_READ);
    g->grad_out = kf__bind(g->k, "grad_out", dtype, KF_ACCESS_READ);
    g->grad_in = kf__bind(g->k, "grad_in", dtype, KF_ACCESS_READ_WRITE);
    g->e = kf__each_element(g->k, "e", kf_shape_elements(target));
    return true;
}

static kf_kernel *grad_finish(grad_gather *g, kf_val src, kf_val inside, kf_dtype dtype) {
    kf_kernel *k = g->k;
    kf_val v = kf__load_f32(k, g->grad_out, src, dtype);
    if (inside.id) {
        v = kf_select(k, kf_lit_f32(k, 0.0f), v, inside);
    }
    kf__store_or_yield(k, g->grad_in, g->e, v, dtype);
    kf_end(k);
    return k;
}

/* For slice: grad_in element e (of x's shape) is dy's element when inside the slice, else 0;
 * shared by slice's kernel_backward and slice_grad's kernel (grad_in {0}: yielded). */
static kf_val slice_inverse(kf_kernel *k, const view_map *m, kf_val e, kf_val *inside) {
    view_map over = *m;
    over.length = m->in_len[0]; /* split x's elements: x's axis is in_len[0] long */
    over.out = m->in0;
    kf_val o, c, r;
    split_axis(k, &over, e, &o, &c, &r);
    kf_val lo = kf_binary(k, KF_OP_GE, c, u32(k, m->start));
    kf_val hi = kf_binary(k, KF_OP_LT, c, u32(k, (uint64_t)m->start + m->length));
    *inside = m->start ? kf_binary(k, KF_OP_AND, lo, hi) : hi;
    kf_val cs =
        kf_call3(k, KF_FN_CLAMP, c, u32(k, m->start), u32(k, (uint64_t)m->start + m->length - 1));
    kf_val rel = m->start ? kf_sub(k, cs, u32(k, m->start)) : cs;
    return join_axis(k, m, o, rel, r, m->length);
}

static kf_kernel *view_kernel_backward(view_kind kind, const kf_shape *in, const kf_op_params *p,
                                       kf_dtype dtype, uint32_t which) {
    view_map m;
    uint32_t arity = kind == VIEW_CONCAT ? 2u : 1u;
    if (which >= arity || view_map_make(kind, in, p, &m) != KF_OK) {
        return NULL;
    }
    static const char *const names[] = {"", "reshape_backward", "permute_backward",
                                        "slice_backward", "concat_backward"};
    grad_gather g;
    if (!grad_begin(&g, names[kind], arity, &in[which], dtype)) {
        return NULL;
    }
    kf_kernel *k = g.k;
    kf_val src = g.e, inside = {0};
    if (kind == VIEW_PERMUTE) {
        /* dx = permute(dy, inverse axes): dy has the output's shape */
        kf_op_params inv = {0};
        inv.list_count = in[0].rank;
        inv.given = KF_PARAM_LIST;
        for (uint32_t d = 0; d < in[0].rank; d++) {
            inv.list[m.axes[d]] = (int32_t)d;
        }
        src = permute_view(k, &m.out, &inv, g.e, 0, NULL);
    } else if (kind == VIEW_SLICE) {
        src = slice_inverse(k, &m, g.e, &inside);
    } else if (kind == VIEW_CONCAT) {
        /* dx_which = slice of dy along the axis: [0, A) or [A, A + B) */
        view_map s = m;
        s.kind = VIEW_SLICE;
        s.in0 = m.out;
        s.out = in[which];
        s.in_len[0] = m.length;
        s.start = which ? m.in_len[0] : 0;
        s.length = m.in_len[which];
        kf_val o, c, r;
        split_axis(k, &s, g.e, &o, &c, &r);
        kf_val at = s.start ? kf_add(k, c, u32(k, s.start)) : c;
        src = join_axis(k, &s, o, at, r, s.in_len[0]);
    }
    return grad_finish(&g, src, inside, dtype);
}

static void view_grid(const kf_shape *in, const kf_op_params *p, int32_t which, uint32_t groups[3],
                      const kf_operator *op) {
    kf_shape out = {0};
    if (which >= 0) {
        out = in[which];
    } else if (op->shape(in, p, &out, NULL, 0) != KF_OK) {
        out = in[0];
    }
    kf__grid_1d(kf_shape_elements(&out), KF__WORKGROUP, groups);
}

#define VIEW_GLUE(NAME, KIND)                                                                      \
    static kf_status NAME##_spec_forward(const kf_tensor *const *in, const kf_op_params *p,        \
                                         kf_tensor *out) {                                         \
        return view_spec_forward(KIND, in, p, out);                                                \
    }                                                                                              \
    static kf_status NAME##_spec_backward(const kf_tensor *const *in, const kf_tensor *out,        \
                                          const kf_tensor *grad_out, const kf_op_params *p,        \
                                          kf_tensor *const *grad_in) {                             \
        (void)out;                                                                                 \
        return view_spec_backward(KIND, in, grad_out, p, grad_in);                                 \
    }                                                                                              \
    static kf_kernel *NAME##_kernel_forward(const kf_shape *in, const kf_op_params *p,             \
                                            kf_dtype dtype) {                                      \
        return gather_kernel(&kf__op_##NAME, in, p, dtype);                                        \
    }                                                                                              \
    static kf_kernel *NAME##_kernel_backward(const kf_shape *in, const kf_op_params *p,            \
                                             kf_dtype dtype, uint32_t which) {                     \
        return view_kernel_backward(KIND, in, p, dtype, which);                                    \
    }                                                                                              \
    static void NAME##_grid(const kf_shape *in, const kf_op_params *p, int32_t which,              \
                            uint32_t groups[3]) {                                                  \
        view_grid(in, p, which, groups, &kf__op_##NAME);                                           \
    }

VIEW_GLUE(reshape, VIEW_RESHAPE)
VIEW_GLUE(permute, VIEW_PERMUTE)
VIEW_GLUE(slice, VIEW_SLICE)
VIEW_GLUE(concat, VIEW_CONCAT)

#define VIEW_FIELDS(NAME)                                                                          \
    .op_class = KF_OP_CLASS_LAYOUT, .shape = NAME##_shape, .spec_forward = NAME##_spec_forward,    \
    .spec_backward = NAME##_spec_backward, .kernel_forward = NAME##_kernel_forward,                \
    .kernel_backward = NAME##_kernel_backward, .grid = NAME##_grid, .view_index = NAME##_view,     \
    .tolerance_f32 = 0.0, .tolerance_f16 = 0.0, .input_lo = -4.0f, .input_hi = 4.0f

/* ---------------------------------------------------------------------------------------- */
/* slice_grad: slice's backward operator (x, dy) -> x's shape, dy zero-padded                */
/* ---------------------------------------------------------------------------------------- */

KF__GRAD_GLUE(slice_grad)

static kf_kernel *slice_grad_kernel(const kf_shape *in, const kf_op_params *p, kf_dtype dtype) {
    view_map m;
    kf_shape out;
    if (slice_grad_shape(in, p, &out, NULL, 0) != KF_OK ||
        view_map_make(VIEW_SLICE, in, p, &m) != KF_OK) {
        return NULL;
    }
    kf_kernel *k = kf__kernel_1d("slice_grad", kf__dtype_type(dtype), kf_shape_elements(&out));
    if (!k) {
        return NULL;
    }
    kf__bind(k, "a", dtype, KF_ACCESS_READ);
    kf_binding dy = kf__bind(k, "dy", dtype, KF_ACCESS_READ);
    kf_val e = kf__each_element(k, "e", kf_shape_elements(&out));
    kf_val inside;
    kf_val src = slice_inverse(k, &m, e, &inside);
    kf_val v = kf_select(k, kf_lit_f32(k, 0.0f), kf__load_f32(k, dy, src, dtype), inside);
    kf__yield_f32(k, v, e, dtype);
    kf_end(k);
    return k;
}

/* slice_grad as a view: dy where x's element is inside the slice, else 0; x supplies nothing. */
static kf_val slice_grad_view(kf_kernel *k, const kf_shape *in, const kf_op_params *p, kf_val e,
                              uint32_t which, kf_val *take) {
    view_map m;
    if (which == 0 || view_map_make(VIEW_SLICE, in, p, &m) != KF_OK) {
        if (take) {
            *take = (kf_val){0};
        }
        return (kf_val){0};
    }
    kf_val inside;
    kf_val src = slice_inverse(k, &m, e, &inside);
    if (take) {
        *take = inside;
    }
    return src;
}

static void slice_grad_grid(const kf_shape *in, const kf_op_params *p, int32_t which,
                            uint32_t groups[3]) {
    (void)p, (void)which;
    kf__grid_1d(kf_shape_elements(&in[0]), KF__WORKGROUP, groups);
}

/* ---------------------------------------------------------------------------------------- */
/* Verification tables and operator objects                                                 */
/* ---------------------------------------------------------------------------------------- */

#define CASES(table) .cases = table, .case_count = sizeof table / sizeof table[0]
#define LIST(...)                                                                                  \
    .list = {__VA_ARGS__}, .list_count = sizeof((int32_t[]){__VA_ARGS__}) / sizeof(int32_t),       \
    .given = KF_PARAM_LIST

static const kf_op_case reshape_cases[] = {
    {{SHAPE2(1, 1)}, {LIST(1)}, "1x1 to one element"},
    {{SHAPE2(7, 13)}, {LIST(13, 7)}, "primes"},
    {{SHAPE4(3, 5, 7, 11)}, {LIST(15, -1)}, "rank 4 to 2, inferred"},
    {{SHAPE1(30)}, {LIST(2, 3, 5)}, "rank 1 to 3"},
    {{SHAPE2(64, 384)}, {LIST(64, 3, 4, 32)}, "moderate: split heads"},
    {{SHAPE2(2048, 2049)}, {LIST(2049, -1)}, "large"},
};
static const kf_op_case permute_cases[] = {
    {{SHAPE2(1, 1)}, {LIST(1, 0)}, "1x1"},
    {{SHAPE2(7, 13)}, {LIST(1, 0)}, "primes, a transpose"},
    {{SHAPE3(2, 3, 5)}, {LIST(2, 0, 1)}, "rank 3 rotation"},
    {{SHAPE4(3, 5, 7, 11)}, {LIST(0, 2, 1, 3)}, "rank 4, heads"},
    {{SHAPE4(2, 3, 1, 5)}, {LIST(-1, 2, 0, 1)}, "negative axis, a dim of 1"},
    {{SHAPE4(4, 64, 4, 32)}, {LIST(0, 2, 1, 3)}, "moderate: [B, T, H, D] to [B, H, T, D]"},
    {{SHAPE4(16, 256, 8, 128)}, {LIST(0, 2, 1, 3)}, "large"},
};
static const kf_op_case slice_cases[] = {
    {{SHAPE2(1, 1)}, {.length = 1}, "1x1"},
    {{SHAPE2(7, 13)}, {.axis = 1, .start = 3, .length = 5}, "primes"},
    {{SHAPE2(7, 13)}, {.start = 6, .length = 1}, "last row"},
    {{SHAPE4(3, 5, 7, 11)}, {.axis = 2, .start = 2, .length = 4}, "rank 4, a middle axis"},
    {{SHAPE3(2, 5, 9)}, {.axis = -1, .start = 3, .length = 3}, "negative axis: the last"},
    {{SHAPE2(64, 384)}, {.axis = -1, .start = 128, .length = 128}, "moderate: k of qkv"},
    {{SHAPE2(1024, 4096)}, {.axis = -1, .start = 1024, .length = 2048}, "large"},
};
static const kf_op_case concat_cases[] = {
    {{SHAPE2(1, 1), SHAPE2(1, 1)}, {.axis = 0}, "1x1"},
    {{SHAPE2(7, 5), SHAPE2(7, 8)}, {.axis = 1}, "primes, columns"},
    {{SHAPE2(3, 5), SHAPE2(4, 5)}, {.axis = 0}, "rows"},
    {{SHAPE4(3, 5, 7, 11), SHAPE4(3, 2, 7, 11)}, {.axis = 1}, "rank 4, a middle axis"},
    {{SHAPE3(2, 3, 4), SHAPE3(2, 3, 1)}, {.axis = -1}, "negative axis, one column"},
    {{SHAPE2(64, 128), SHAPE2(64, 256)}, {.axis = -1}, "moderate"},
    {{SHAPE2(1024, 2048), SHAPE2(1024, 2049)}, {.axis = 1}, "large"},
};
static const kf_op_case slice_grad_cases[] = {
    {{SHAPE2(1, 1), SHAPE2(1, 1)}, {.length = 1}, "1x1"},
    {{SHAPE2(7, 13), SHAPE2(7, 5)}, {.axis = 1, .start = 3, .length = 5}, "primes"},
    {{SHAPE4(3, 5, 7, 11), SHAPE4(3, 5, 4, 11)}, {.axis = 2, .start = 2, .length = 4}, "rank 4"},
    {{SHAPE2(64, 384), SHAPE2(64, 128)}, {.axis = -1, .start = 256, .length = 128}, "moderate"},
    {{SHAPE2(1024, 4096), SHAPE2(1024, 2048)}, {.axis = 1, .start = 7, .length = 2048}, "large"},
};

static const kf__input reshape_inputs[] = {{.name = "x"}};
static const kf__input concat_inputs[] = {{.name = "a"}, {.name = "b"}};

const kf_operator kf__op_reshape = {
    .name = "reshape",
    .about = "the same elements in another shape (row-major order kept; one dim may be -1)",
    .arity = 1,
    KF__INPUTS(reshape_inputs),
    KF__PARAMS(reshape_params),
    VIEW_FIELDS(reshape),
    .view_linear = true,
    CASES(reshape_cases)};

const kf_operator kf__op_permute = {.name = "permute",
                                    .about = "reorder the axes: output dim d is input dim axes[d]",
                                    .arity = 1,
                                    KF__INPUTS(reshape_inputs),
                                    KF__PARAMS(permute_params),
                                    VIEW_FIELDS(permute),
                                    CASES(permute_cases)};

const kf_operator kf__op_slice = {.name = "slice",
                                  .about = "indices start .. start+length-1 along an axis",
                                  .arity = 1,
                                  KF__INPUTS(reshape_inputs),
                                  KF__PARAMS(slice_params),
                                  VIEW_FIELDS(slice),
                                  CASES(slice_cases)};

const kf_operator kf__op_concat = {.name = "concat",
                                   .about = "a then b along an axis",
                                   .arity = 2,
                                   KF__INPUTS(concat_inputs),
                                   KF__PARAMS(concat_params),
                                   VIEW_FIELDS(concat),
                                   CASES(concat_cases)};

static const kf__input slice_grad_inputs[] = {{.name = "x"}, {.name = "dy"}};

const kf_operator kf__op_slice_grad = {
    .name = "slice_grad",
    .about = "slice's gradient: dy in x's shape, zeros outside the slice",
    .op_class = KF_OP_CLASS_LAYOUT,
    .arity = 2,
    KF__INPUTS(slice_grad_inputs),
    KF__PARAMS(slice_params),
    .shape = slice_grad_shape,
    .spec_forward = slice_grad_spec,
    .kernel_forward = slice_grad_kernel,
    .tolerance_f32 = 0.0,
    .tolerance_f16 = 0.0,
    .input_lo = -4.0f,
    .input_hi = 4.0f,
    .grid = slice_grad_grid,
    .view_index = slice_grad_view,
    CASES(slice_grad_cases),
    .grad_of = &kf__op_slice,
    .grad_input = 0};
void kf__strided_contiguous(const kf_shape *s, kf__strided *l) {
    memset(l, 0, sizeof *l);
    l->rank = s->rank;
    uint64_t stride = 1;
    for (uint32_t d = s->rank; d-- > 0;) {
        l->dims[d] = s->dims[d];
        l->strides[d] = stride;
        stride *= s->dims[d];
    }
}

/* A reshape of a strided layout without moving elements (numpy's no-copy reshape): each run of
 * old dims whose product is a run of new dims must be contiguous among itself; the new dims
 * then split its innermost stride. Dims of length 1 take stride 0. */
static bool reshape_strided(const kf__strided *l, const kf_shape *to, kf__strided *out) {
    uint32_t od[KF_MAX_DIMS], on = 0;
    uint64_t os[KF_MAX_DIMS];
    for (uint32_t d = 0; d < l->rank; d++) {
        if (l->dims[d] != 1) {
            od[on] = l->dims[d];
            os[on++] = l->strides[d];
        }
    }
    kf__strided r = {.rank = to->rank, .offset = l->offset};
    for (uint32_t d = 0; d < to->rank; d++) {
        r.dims[d] = to->dims[d];
    }
    uint32_t oi = 0, ni = 0;
    while (ni < to->rank && oi < on) {
        if (to->dims[ni] == 1) {
            ni++; /* stride 0 */
            continue;
        }
        uint32_t oj = oi + 1, nj = ni + 1;
        uint64_t np = to->dims[ni], op = od[oi];
        while (np != op) {
            if (np < op) {
                if (nj >= to->rank) {
                    return false;
                }
                np *= to->dims[nj++];
            } else {
                if (oj >= on) {
                    return false;
                }
                op *= od[oj++];
            }
        }
        for (uint32_t k = oi; k + 1 < oj; k++) {
            if (os[k] != od[k + 1] * os[k + 1]) {
                return false; /* the run is not contiguous: a copy would be needed */
            }
        }
        uint64_t stride = os[oj - 1];
        for (uint32_t k = nj; k-- > ni;) {
            r.strides[k] = to->dims[k] == 1 ? 0 : stride;
            stride *= to->dims[k];
        }
        ni = nj;
        oi = oj;
    }
    if (oi < on) {
        return false;
    }
    *out = r;
    return true;
}

bool kf__view_strided(const kf_operator *op, const kf_shape *in, const kf_op_params *p,
                      kf__strided *l) {
    if (!l->rank || l->rank != in[0].rank) {
        return false;
    }
    if (op == &kf__op_reshape) {
        kf_shape to;
        return reshape_shape(in, p, &to, NULL, 0) == KF_OK && to.rank > 0 &&
               reshape_strided(l, &to, l);
    }
    view_kind kind = op == &kf__op_permute ? VIEW_PERMUTE : op == &kf__op_slice ? VIEW_SLICE : 0;
    view_map m;
    if (!kind || view_map_make(kind, in, p, &m) != KF_OK) {
        return false; /* concat reads two tensors; slice_grad writes zeros */
    }
    kf__strided r = *l;
    if (kind == VIEW_PERMUTE) {
        for (uint32_t d = 0; d < m.out.rank; d++) {
            r.dims[d] = l->dims[m.axes[d]];
            r.strides[d] = l->strides[m.axes[d]];
        }
    } else {
        r.offset += (uint64_t)m.start * l->strides[m.axes[0]];
        r.dims[m.axes[0]] = m.length;
    }
    *l = r;
    return true;
}

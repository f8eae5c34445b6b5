/* CPU tensors (the seeds' TensorData), shapes, broadcasting rules, the relative error every check
 * in kfuse reports, and random fills. */
#include "core/core.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------- */
/* dtypes                                                                                   */
/* ---------------------------------------------------------------------------------------- */

const char *kf_dtype_str(kf_dtype dtype) {
    switch (dtype) {
    case KF_DTYPE_F32:
        return "f32";
    case KF_DTYPE_F16:
        return "f16";
    case KF_DTYPE_I32:
        return "i32";
    }
    return "?";
}

uint32_t kf_dtype_size(kf_dtype dtype) {
    return dtype == KF_DTYPE_F16 ? 2u : 4u;
}

/* ---------------------------------------------------------------------------------------- */
/* Shapes                                                                                   */
/* ---------------------------------------------------------------------------------------- */

kf_shape kf_shape_1d(uint32_t n) {
    kf_shape s = {1, {n, 0, 0, 0}};
    return s;
}

kf_shape kf_shape_2d(uint32_t rows, uint32_t cols) {
    kf_shape s = {2, {rows, cols, 0, 0}};
    return s;
}

uint64_t kf_shape_elements(const kf_shape *s) {
    if (!s) {
        return 0;
    }
    uint64_t n = 1;
    for (uint32_t i = 0; i < s->rank && i < KF_MAX_DIMS; i++) {
        /* 65536^4 would wrap to 0 and pass every size check: saturate instead */
        if (__builtin_mul_overflow(n, (uint64_t)s->dims[i], &n)) {
            return UINT64_MAX;
        }
    }
    return n;
}

bool kf_shape_eq(const kf_shape *a, const kf_shape *b) {
    if (!a || !b || a->rank != b->rank) {
        return false;
    }
    for (uint32_t i = 0; i < a->rank && i < KF_MAX_DIMS; i++) {
        if (a->dims[i] != b->dims[i]) {
            return false;
        }
    }
    return true;
}

const char *kf_shape_str(const kf_shape *s, char *buf, size_t size) {
    if (!buf || size == 0) {
        return buf;
    }
    buf[0] = '\0';
    if (!s) {
        return buf;
    }
    if (s->rank == 0) {
        snprintf(buf, size, "scalar");
        return buf;
    }
    size_t used = 0;
    for (uint32_t i = 0; i < s->rank && i < KF_MAX_DIMS && used < size; i++) {
        int n = snprintf(buf + used, size - used, i ? "x%u" : "%u", s->dims[i]);
        if (n < 0) {
            break;
        }
        used += (size_t)n;
    }
    return buf;
}

bool kf__shape_valid(const kf_shape *s) {
    if (!s || s->rank > KF_MAX_DIMS) {
        return false;
    }
    for (uint32_t i = 0; i < s->rank; i++) {
        if (s->dims[i] == 0) {
            return false;
        }
    }
    /* kernels index elements with u32 */
    return kf_shape_elements(s) <= UINT32_MAX;
}

kf_status kf__shape_error(char *msg, size_t msg_size, const char *fmt, ...) {
    if (msg && msg_size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, msg_size, fmt, ap);
        va_end(ap);
    }
    return KF_ERROR_SHAPE;
}

void kf__shape_rows_cols(const kf_shape *s, uint64_t *rows, uint32_t *cols) {
    uint32_t c = s->rank ? s->dims[s->rank - 1] : 1;
    uint64_t n = kf_shape_elements(s);
    if (cols) {
        *cols = c;
    }
    if (rows) {
        *rows = c ? n / c : 0;
    }
}

kf_shape kf__shape_drop_last(const kf_shape *s) {
    kf_shape r = *s;
    if (r.rank > 0) {
        r.dims[--r.rank] = 0;
    }
    return r;
}

kf__bcast kf__broadcast_kind(const kf_shape *in, const kf_shape *out) {
    if (kf_shape_eq(in, out)) {
        return KF__BCAST_FULL;
    }
    uint64_t n = kf_shape_elements(in);
    if (n == 1) {
        return KF__BCAST_SCALAR;
    }
    uint64_t rows;
    uint32_t cols;
    kf__shape_rows_cols(out, &rows, &cols);
    /* a row: [cols] or [1, ..., 1, cols] with rank <= out's rank */
    if (in->rank >= 1 && in->rank <= out->rank && in->dims[in->rank - 1] == cols && n == cols) {
        return KF__BCAST_ROW;
    }
    /* a column: out's leading dims then 1 */
    if (out->rank >= 2 && in->rank == out->rank && in->dims[in->rank - 1] == 1) {
        bool lead = true;
        for (uint32_t i = 0; i + 1 < out->rank; i++) {
            lead = lead && in->dims[i] == out->dims[i];
        }
        if (lead) {
            return KF__BCAST_COL;
        }
    }
    return KF__BCAST_NONE;
}

kf_status kf__broadcast_shape(const kf_shape *in, uint32_t arity, const char *op_name,
                              kf_shape *out, char *msg, size_t msg_size) {
    if (arity == 0) {
        return kf__shape_error(msg, msg_size, "%s: no inputs", op_name);
    }
    uint32_t largest = 0;
    for (uint32_t i = 0; i < arity; i++) {
        if (!kf__shape_valid(&in[i])) {
            char b[64];
            return kf__shape_error(msg, msg_size,
                                   "%s: input %u has an invalid shape %s (rank <= 4, dims >= 1, "
                                   "fewer than 2^32 elements)",
                                   op_name, i, kf_shape_str(&in[i], b, sizeof b));
        }
        /* ties go to the higher rank, so [7] against [1,7] gives [1,7] */
        uint64_t n = kf_shape_elements(&in[i]), m = kf_shape_elements(&in[largest]);
        if (n > m || (n == m && in[i].rank > in[largest].rank)) {
            largest = i;
        }
    }
    for (uint32_t i = 0; i < arity; i++) {
        if (kf__broadcast_kind(&in[i], &in[largest]) == KF__BCAST_NONE) {
            char a[64], b[64];
            return kf__shape_error(msg, msg_size,
                                   "%s: input %u (%s) does not broadcast onto input %u (%s): it "
                                   "must be the same shape, one element, a row [%u] or a column "
                                   "[..., 1]",
                                   op_name, i, kf_shape_str(&in[i], a, sizeof a), largest,
                                   kf_shape_str(&in[largest], b, sizeof b),
                                   in[largest].rank ? in[largest].dims[in[largest].rank - 1] : 1);
        }
    }
    *out = in[largest];
    return KF_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Tensors                                                                                  */
/* ---------------------------------------------------------------------------------------- */

kf_status kf_tensor_create(const kf_shape *shape, kf_tensor **out) {
    if (!out) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    *out = NULL;
    if (!kf__shape_valid(shape)) {
        return KF_ERROR_SHAPE;
    }
    kf_tensor *t = calloc(1, sizeof *t);
    if (!t) {
        return KF_ERROR_OUT_OF_MEMORY;
    }
    t->shape = *shape;
    for (uint32_t i = shape->rank; i < KF_MAX_DIMS; i++) {
        t->shape.dims[i] = 0;
    }
    t->data = calloc((size_t)kf_shape_elements(shape), sizeof(float));
    if (!t->data) {
        free(t);
        return KF_ERROR_OUT_OF_MEMORY;
    }
    *out = t;
    return KF_OK;
}

kf_status kf_tensor_constant(const kf_shape *shape, float value, kf_tensor **out) {
    kf_status st = kf_tensor_create(shape, out);
    if (st == KF_OK) {
        uint64_t n = kf_tensor_size(*out);
        for (uint64_t i = 0; i < n; i++) {
            (*out)->data[i] = value;
        }
    }
    return st;
}

void kf_tensor_destroy(kf_tensor *t) {
    if (t) {
        free(t->data);
        free(t);
    }
}

uint64_t kf_tensor_size(const kf_tensor *t) {
    return t ? kf_shape_elements(&t->shape) : 0;
}

float kf_tensor_get(const kf_tensor *t, uint64_t index) {
    if (!t || index >= kf_tensor_size(t)) {
        return NAN;
    }
    return t->data[index];
}

kf_status kf_tensor_set(kf_tensor *t, uint64_t index, float value) {
    if (!t || index >= kf_tensor_size(t)) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    t->data[index] = value;
    return KF_OK;
}

uint64_t kf__splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

double kf__rand_unit(uint64_t *state) {
    return (double)(kf__splitmix64(state) >> 11) * (1.0 / 9007199254740992.0);
}

void kf_tensor_fill_random(kf_tensor *t, uint64_t seed, float lo, float hi) {
    uint64_t n = kf_tensor_size(t);
    uint64_t state = seed;
    for (uint64_t i = 0; i < n; i++) {
        float v = (float)(lo + ((double)hi - lo) * kf__rand_unit(&state));
        /* rounding to float can land on hi itself */
        t->data[i] = v < hi || lo == hi ? v : lo;
    }
}

double kf__rel_error(float a, float b, double floor) {
    double x = a, y = b;
    if (isnan(x) || isnan(y)) {
        return isnan(x) == isnan(y) ? 0.0 : INFINITY;
    }
    if (isinf(x) || isinf(y)) {
        return x == y ? 0.0 : INFINITY;
    }
    return fabs(x - y) / fmax(fabs(y), floor);
}

double kf_max_rel_error(const float *a, const float *b, uint64_t n, double floor) {
    if (floor <= 0) {
        floor = 1e-6;
    }
    double worst = 0;
    for (uint64_t i = 0; i < n && !isinf(worst); i++) {
        double d = kf__rel_error(a[i], b[i], floor);
        worst = d > worst ? d : worst;
    }
    return worst;
}

bool kf_tensor_approx_eq(const kf_tensor *a, const kf_tensor *b, double tolerance) {
    if (!a || !b || !kf_shape_eq(&a->shape, &b->shape)) {
        return false;
    }
    return kf_max_rel_error(a->data, b->data, kf_tensor_size(a), 0) <= tolerance;
}

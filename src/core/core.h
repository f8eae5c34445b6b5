/* Core types every layer may use (src/core): status strings, dtypes, shapes and their broadcast
 * rules, host tensors, the relative error every check reports, and the random stream of every
 * fill. The public part is in kfuse.h; these are the internal helpers beside it. Nothing here
 * calls a folder above core. */
#ifndef KF_CORE_CORE_H
#define KF_CORE_CORE_H

#include "core/half.h"
#include "kfuse.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- shapes (tensor.c) ---- */

/* snprintf into msg (msg may be NULL or msg_size 0); returns KF_ERROR_SHAPE for `return ...`. */
kf_status kf__shape_error(char *msg, size_t msg_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The rows x cols view: cols = last dim (1 for rank 0), rows = product of the others. */
void kf__shape_rows_cols(const kf_shape *s, uint64_t *rows, uint32_t *cols);
/* The shape with its last dim dropped (rank 0 stays rank 0): a row reduction's output. */
kf_shape kf__shape_drop_last(const kf_shape *s);
/* A valid shape: rank <= KF_MAX_DIMS, every dim >= 1, elements < 2^32 (kernels index in u32). */
bool kf__shape_valid(const kf_shape *s);

/* The greatest common divisor of a and b (gcd(a, 0) = a). */
static inline uint64_t kf__gcd_u64(uint64_t a, uint64_t b) {
    while (b) {
        uint64_t r = a % b;
        a = b;
        b = r;
    }
    return a;
}

/* How an input maps onto an output's elements (element-wise ops; checked in this order). */
typedef enum kf__bcast {
    KF__BCAST_FULL = 0, /* same shape: in[i] */
    KF__BCAST_SCALAR,   /* one element: in[0] */
    KF__BCAST_ROW,      /* [cols] or [1, ..., cols] against rows x cols: in[i % cols] (a bias) */
    KF__BCAST_COL,      /* [..., 1] with the out's leading dims: in[i / cols] */
    KF__BCAST_NONE      /* does not broadcast onto out */
} kf__bcast;

kf__bcast kf__broadcast_kind(const kf_shape *in, const kf_shape *out);
/* Output shape of an element-wise op: the inputs' common shape, where each input is the output's
 * shape, a scalar, a row or a column of it; the largest input gives the output shape. */
kf_status kf__broadcast_shape(const kf_shape *in, uint32_t arity, const char *op_name,
                              kf_shape *out, char *msg, size_t msg_size);

/* ---- tensors and numbers (tensor.c) ---- */

/* The error of one element as kf_max_rel_error counts it: |a - b| / max(|b|, floor); NaN against
 * a number and unequal infinities are infinite, NaN against NaN and equal infinities zero. */
double kf__rel_error(float a, float b, double floor);
/* splitmix64 step (the stream every kfuse random fill uses). */
uint64_t kf__splitmix64(uint64_t *state);
/* A uniform double in [0, 1) from the stream. */
double kf__rand_unit(uint64_t *state);

#endif

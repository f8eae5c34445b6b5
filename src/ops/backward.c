/* What every backward operator shares (kf_operator.grad_of; docs/training.md): the shape rule, the
 * spec built from the forward operator's float64 spec_backward, and the store-or-yield of the
 * backward kernels, whose builders serve both the forward operators' kernel_backward (stored into
 * grad_in) and the backward operators' kernel_forward (yielded: a store phase epilogues fuse
 * into).
 *
 * A backward operator's inputs are its forward operator's inputs followed by dy, so one rule
 * checks them all: the forward's own shape rule on the inputs, and dy shaped as its output. */
#include "ops/ops_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kf__store_or_yield(kf_kernel *k, kf_binding grad_in, kf_val index, kf_val value,
                        kf_dtype dtype) {
    if (grad_in.id) {
        kf__store_f32(k, grad_in, index, value, dtype);
    } else {
        kf__yield_f32(k, value, index, dtype);
    }
}

const kf_operator *kf_op_grad_of(const kf_operator *op, uint32_t *input) {
    if (input) {
        *input = op && op->grad_of ? op->grad_input : 0;
    }
    return op ? op->grad_of : NULL;
}

bool kf_op_has_backward(const kf_operator *op) {
    return op && op->kernel_backward && op->spec_backward;
}

bool kf_op_has_gradient_check(const kf_operator *op) {
    return op && (op->spec_backward || op->grad_of);
}

uint32_t kf__grad_arity(const kf_operator *op, const kf_op_params *p) {
    return kf_op_arity(op->grad_of, p) + 1;
}

kf_status kf__grad_shape(const kf_operator *op, const kf_shape *in, const kf_op_params *p,
                         kf_shape *out, char *msg, size_t msg_size) {
    const kf_operator *fwd = op->grad_of;
    uint32_t n = kf_op_arity(fwd, p);
    kf_shape y;
    char inner[200] = {0};
    kf_status st = fwd->shape(in, p, &y, inner, sizeof inner);
    if (st != KF_OK) {
        return kf__shape_error(msg, msg_size, "%s: %s", op->name, inner[0] ? inner : "bad shapes");
    }
    if (!kf_shape_eq(&in[n], &y)) {
        char a[64], b[64];
        return kf__shape_error(
            msg, msg_size, "%s: dy must be %s (the shape of %s's output), got %s", op->name,
            kf_shape_str(&y, a, sizeof a), fwd->name, kf_shape_str(&in[n], b, sizeof b));
    }
    *out = fwd->op_class == KF_OP_CLASS_ELEMENTWISE ? y : in[op->grad_input];
    return KF_OK;
}

/* x broadcast onto `shape` as the element-wise operators read it. */
static kf_status expand(const kf_tensor *x, const kf_shape *shape, kf_tensor **out) {
    kf_status st = kf_tensor_create(shape, out);
    if (st != KF_OK) {
        return st;
    }
    kf__bcast kind = kf__broadcast_kind(&x->shape, shape);
    uint64_t n = kf_shape_elements(shape);
    uint32_t cols;
    kf__shape_rows_cols(shape, NULL, &cols);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t at = kind == KF__BCAST_SCALAR ? 0
                      : kind == KF__BCAST_ROW  ? i % cols
                      : kind == KF__BCAST_COL  ? i / cols
                                               : i;
        (*out)->data[i] = x->data[at];
    }
    return KF_OK;
}

kf_status kf__grad_spec_forward(const kf_operator *op, const kf_tensor *const *in,
                                const kf_op_params *p, kf_tensor *out) {
    const kf_operator *fwd = op->grad_of;
    uint32_t n = kf_op_arity(fwd, p);
    if (!in || !out || n > 4) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    kf_shape shapes[5], want;
    for (uint32_t i = 0; i <= n; i++) {
        if (!in[i]) {
            return KF_ERROR_INVALID_ARGUMENT;
        }
        shapes[i] = in[i]->shape;
    }
    kf_status st = kf__grad_shape(op, shapes, p, &want, NULL, 0);
    if (st != KF_OK || !kf_shape_eq(&want, &out->shape)) {
        return st != KF_OK ? st : KF_ERROR_SHAPE;
    }
    const kf_tensor *x[4] = {0};
    kf_tensor *expanded[4] = {0};
    bool elementwise = fwd->op_class == KF_OP_CLASS_ELEMENTWISE;
    for (uint32_t i = 0; i < n && st == KF_OK; i++) {
        x[i] = in[i];
        if (elementwise && !kf_shape_eq(&in[i]->shape, &in[n]->shape)) {
            st = expand(in[i], &in[n]->shape, &expanded[i]);
            x[i] = expanded[i];
        }
    }
    kf_tensor *y = NULL;
    if (st == KF_OK) {
        st = kf_tensor_create(&in[n]->shape, &y);
    }
    if (st == KF_OK) {
        st = fwd->spec_forward(x, p, y);
    }
    if (st == KF_OK) {
        kf_tensor *grads[4] = {0};
        grads[op->grad_input] = out;
        st = fwd->spec_backward(x, y, in[n], p, grads);
    }
    kf_tensor_destroy(y);
    for (uint32_t i = 0; i < 4; i++) {
        kf_tensor_destroy(expanded[i]);
    }
    return st;
}

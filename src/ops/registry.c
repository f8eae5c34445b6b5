/* The operator table: every verified operator, in the order `kfuse verify` lists them. */
#include "ops/ops_internal.h"

#include <string.h>

static const kf_operator *const table[] = {
    /* element-wise unary */
    &kf__op_relu,
    &kf__op_leaky_relu,
    &kf__op_sigmoid,
    &kf__op_tanh,
    &kf__op_gelu,
    &kf__op_gelu_exact,
    &kf__op_silu,
    &kf__op_exp,
    &kf__op_log,
    &kf__op_neg,
    &kf__op_abs,
    &kf__op_sqrt,
    &kf__op_square,
    &kf__op_reciprocal,
    /* element-wise binary */
    &kf__op_add,
    &kf__op_sub,
    &kf__op_mul,
    &kf__op_div,
    &kf__op_maximum,
    /* scale, affine, copy, layout */
    &kf__op_scale,
    &kf__op_affine,
    &kf__op_copy,
    &kf__op_transpose,
    /* matmul, row reductions, norms, loss */
    &kf__op_matmul,
    &kf__op_sum,
    &kf__op_mean,
    &kf__op_max,
    &kf__op_softmax,
    &kf__op_log_softmax,
    &kf__op_rmsnorm,
    &kf__op_layernorm,
    &kf__op_cross_entropy,
};
#define TABLE_SIZE (sizeof table / sizeof table[0])

uint32_t kf_op_count(void) {
    return (uint32_t)TABLE_SIZE;
}

const kf_operator *kf_op_at(uint32_t index) {
    return index < TABLE_SIZE ? table[index] : NULL;
}

const kf_operator *kf_op_find(const char *name) {
    for (size_t i = 0; name && i < TABLE_SIZE; i++) {
        if (!strcmp(table[i]->name, name)) {
            return table[i];
        }
    }
    return NULL;
}

uint32_t kf_op_arity(const kf_operator *op, const kf_op_params *p) {
    if (!op) {
        return 0;
    }
    if (op->arity_for) {
        kf_op_params zero = {0};
        return op->arity_for(p ? p : &zero);
    }
    return op->arity;
}

kf_status kf_op_shape(const kf_operator *op, const kf_shape *in, const kf_op_params *p,
                      kf_shape *out, char *msg, size_t msg_size) {
    if (msg && msg_size) {
        msg[0] = '\0';
    }
    if (!op || !in || !out) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    kf_op_params zero = {0};
    return op->shape(in, p ? p : &zero, out, msg, msg_size);
}

const char *kf_op_name(const kf_operator *op) {
    return op ? op->name : NULL;
}

const char *kf_op_about(const kf_operator *op) {
    return op ? op->about : NULL;
}

kf_op_class kf_op_class_of(const kf_operator *op) {
    return op ? op->op_class : (kf_op_class)0;
}

uint32_t kf_op_case_count(const kf_operator *op) {
    return op ? op->case_count : 0;
}

const kf_op_case *kf_op_case_at(const kf_operator *op, uint32_t index) {
    return op && index < op->case_count ? &op->cases[index] : NULL;
}

double kf_op_tolerance(const kf_operator *op, kf_dtype dtype) {
    if (!op) {
        return 0.0;
    }
    return dtype == KF_DTYPE_F16 ? op->tolerance_f16 : op->tolerance_f32;
}

kf_kernel *kf_op_kernel_forward(const kf_operator *op, const kf_shape *in, const kf_op_params *p,
                                kf_dtype dtype) {
    if (!op || !in || !op->kernel_forward) {
        return NULL;
    }
    kf_op_params zero = {0};
    return op->kernel_forward(in, p ? p : &zero, dtype);
}

kf_status kf_op_spec_forward(const kf_operator *op, const kf_tensor *const *in,
                             const kf_op_params *p, kf_tensor *out) {
    if (!op || !in || !out || !op->spec_forward) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    kf_op_params zero = {0};
    return op->spec_forward(in, p ? p : &zero, out);
}

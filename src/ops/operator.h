/* The operator object (internal: the public header sees kf_operator as opaque and reads it
 * through kf_op_name, kf_op_class_of, kf_op_case_at, ...). Each operator file defines one
 * `const kf_operator kf__op_NAME` and registry.c lists it; a new field here (with zero meaning
 * "not provided") needs no edit in operators that do not use it.
 */
#ifndef KF_OPS_OPERATOR_H
#define KF_OPS_OPERATOR_H

#include "kfuse.h"

/* Element-wise ops express themselves as IR so any fused kernel can inline them:
 * inputs[i] is the value of input i at this element; returns the output value. */
typedef kf_val (*kf_op_expr_fn)(kf_kernel *k, const kf_val *inputs, const kf_op_params *p);
/* The gradient of the output w.r.t. input `which`, times grad_out, at this element. */
typedef kf_val (*kf_op_expr_backward_fn)(kf_kernel *k, const kf_val *inputs, kf_val out,
                                         kf_val grad_out, uint32_t which, const kf_op_params *p);

struct kf_operator {
    const char *name;  /* "matmul", "gelu", ... */
    const char *about; /* one line for --help and tables */
    kf_op_class op_class;
    uint32_t arity; /* tensor inputs (inputs a norm takes depend on params: see arity_for) */
    uint32_t (*arity_for)(const kf_op_params *p); /* NULL: arity */
    /* Output shape from input shapes; KF_ERROR_SHAPE with a message naming the shapes. */
    kf_status (*shape)(const kf_shape *in, const kf_op_params *p, kf_shape *out, char *msg,
                       size_t msg_size);
    /* The specification: plain loops, float64 accumulation, readable first. */
    kf_status (*spec_forward)(const kf_tensor *const *in, const kf_op_params *p, kf_tensor *out);
    /* grad_in[i] (shaped as in[i], allocated by the caller) from inputs, output and grad_out. */
    kf_status (*spec_backward)(const kf_tensor *const *in, const kf_tensor *out,
                               const kf_tensor *grad_out, const kf_op_params *p,
                               kf_tensor *const *grad_in);
    /* Forward kernel for these shapes; bindings: the inputs in order, then "out". Every op hands
     * each output element to kf_kernel_yield (its store phase), and records its grid on the
     * kernel. NULL when the shapes do not fit (check them with `shape` first) or out of memory. */
    kf_kernel *(*kernel_forward)(const kf_shape *in, const kf_op_params *p, kf_dtype dtype);
    /* Backward kernel producing grad of input `which`; bindings: the inputs in order, "out"
     * (the forward output), "grad_out", then "grad_in". */
    kf_kernel *(*kernel_backward)(const kf_shape *in, const kf_op_params *p, kf_dtype dtype,
                                  uint32_t which);
    kf_op_expr_fn expr;                   /* element-wise ops only */
    kf_op_expr_backward_fn expr_backward; /* element-wise ops only */
    double tolerance_f32;                 /* max relative error accepted, documented at the op */
    double tolerance_f16;
    float input_lo, input_hi; /* the range verification draws inputs from (log: positive) */
    /* Workgroups to dispatch kernel_forward (which < 0) or kernel_backward(which) with. */
    void (*grid)(const kf_shape *in, const kf_op_params *p, int32_t which, uint32_t groups[3]);
    /* Bit i set: input i holds integer class indices (cross_entropy labels): KF_DTYPE_I32 on the
     * GPU whatever the dtype, drawn in [0, last dim of input 0) by verification, no gradient. */
    uint32_t index_inputs;
    /* Bit i set: input i is drawn away from zero (div's denominator): |x| in [m/4, m) with a
     * random sign, m = max(|input_lo|, |input_hi|), instead of uniformly in [input_lo, input_hi).
     */
    uint32_t nonzero_inputs;
    const kf_op_case *cases; /* the verification table: edge shapes, primes, a large case */
    uint32_t case_count;
};

#endif

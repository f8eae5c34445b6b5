/* Running operators and checking them: the seeds' verify_consistency, for real.
 *
 * kf_op_verify runs an op's GPU kernel on fresh random inputs and compares every element with the
 * CPU spec. The kernel writes into buffers poisoned with NaN and followed by a guard band of the
 * same poison, so an element the kernel forgot shows as NaN against a number, and a write past
 * the end shows as a changed guard. For f16 the inputs are rounded to f16 before the spec sees
 * them, so both sides compute from identical values and the tolerance only has to cover the
 * output's rounding.
 *
 * kf_op_check_gradient checks the spec's backward against central finite differences of its
 * forward, in float64, so a wrong derivative in a spec cannot hide behind a kernel that copies it.
 *
 * Errors are relative: |got - expected| / max(|expected|, floor), floor = 1% of the rms of the
 * expected tensor (docs/operators.md says why). */
#include "ops/ops_internal.h"
#include "runtime/runtime.h"
#include "core/half.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD_ELEMENTS 64u
#define POISON_F32 0x7fc00000u
#define POISON_F16 0x7e007e00u /* two f16 quiet NaNs */
#define FLOOR_FRACTION 1e-2

/* The gradient check: relative error allowed between spec_backward and central differences
 * beyond the error bound of the differences themselves (see central_difference). */
#define GRADIENT_TOLERANCE 1e-2

static void result_fail(kf_verify_result *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void result_fail(kf_verify_result *r, const char *fmt, ...) {
    r->passed = false;
    if (r->message[0]) {
        return; /* keep the first failure: later ones are usually its echoes */
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->message, sizeof r->message, fmt, ap);
    va_end(ap);
}

static bool is_index_input(const kf_operator *op, uint32_t i) {
    return (op->index_inputs >> i) & 1u;
}

static float round_to(kf_dtype dtype, float v) {
    return dtype == KF_DTYPE_F16 ? kf__half_to_float(kf__half_from_float(v)) : v;
}

static void round_tensor(kf_tensor *t, kf_dtype dtype) {
    uint64_t n = kf_tensor_size(t);
    for (uint64_t i = 0; dtype == KF_DTYPE_F16 && i < n; i++) {
        t->data[i] = round_to(dtype, t->data[i]);
    }
}

static uint64_t input_seed(uint64_t seed, uint32_t i) {
    uint64_t s = seed ^ (0x51afd7ed558ccd0dULL * (i + 1));
    return kf__splitmix64(&s);
}

static void destroy_all(kf_tensor **t, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) {
        kf_tensor_destroy(t[i]);
        t[i] = NULL;
    }
}

/* Fresh inputs for a case: uniform in the op's range, away from zero where the op asks, class
 * indices for index inputs; rounded to the dtype so the spec sees what the kernel sees. */
static kf_status make_inputs(const kf_verify_case *c, uint32_t arity, kf_dtype dtype,
                             kf_tensor **in) {
    const kf_operator *op = c->op;
    for (uint32_t i = 0; i < arity; i++) {
        kf_status st = kf_tensor_create(&c->shapes[i], &in[i]);
        if (st != KF_OK) {
            destroy_all(in, i);
            return st;
        }
        uint64_t n = kf_tensor_size(in[i]);
        uint64_t state = input_seed(c->seed, i);
        if (is_index_input(op, i)) {
            uint32_t classes = kf__op_index_classes(op, c->shapes);
            for (uint64_t e = 0; e < n; e++) {
                in[i]->data[e] = (float)(uint32_t)(kf__rand_unit(&state) * classes);
            }
            continue;
        }
        if ((op->nonzero_inputs >> i) & 1u) {
            double m = fmax(fabs((double)op->input_lo), fabs((double)op->input_hi));
            for (uint64_t e = 0; e < n; e++) {
                double mag = m * (0.25 + 0.75 * kf__rand_unit(&state));
                in[i]->data[e] = (float)(kf__splitmix64(&state) & 1u ? -mag : mag);
            }
        } else {
            kf_tensor_fill_random(in[i], kf__splitmix64(&state), op->input_lo, op->input_hi);
        }
        round_tensor(in[i], kf__op_input_dtype(op, i, dtype));
    }
    return KF_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Comparison                                                                               */
/* ---------------------------------------------------------------------------------------- */

double kf__verify_floor(const float *expected, uint64_t n) {
    double sum = 0;
    uint64_t count = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (isfinite(expected[i])) {
            sum += (double)expected[i] * expected[i];
            count++;
        }
    }
    double rms = count ? sqrt(sum / (double)count) : 0;
    return rms > 0 ? FLOOR_FRACTION * rms : 1e-6;
}

/* 1% of the rms of t: the floor of a gradient's errors from the dy it was computed from. The
 * gradient of a broadcast input (a row, a scalar) sums `terms` elements of dy times a derivative
 * each: with random signs its size is sqrt(terms) of one term's, and it cancels to near zero as
 * often as one term does, so its floor is sqrt(terms) times one element's (a scalar up of
 * swiglu over 91 elements failed at 2.6e-4 on f32 rounding alone, seed 1796189002). */
static double dy_floor(const kf_tensor *t, uint64_t terms) {
    return kf__verify_floor(t->data, kf_tensor_size(t)) * sqrt((double)(terms ? terms : 1));
}

/* Compares got with expected element by element and folds the worst error into r; `what` names
 * the comparison in the message ("forward", "grad of input 1"). Below f16's normal range
 * (2^-14) the format itself only has absolute precision, so f16 results are floored there.
 * A gradient is dy times a derivative whose terms are O(1) and cancel where it crosses zero, so
 * it is floored at least at 1% of dy's rms (grad_floor; 0 for forward results): without that a
 * 1x1 case drawn next to the crossing (gelu' at x = -0.75) fails on f32 rounding alone. */
static void compare(const float *got, const float *expected, uint64_t n, kf_dtype dtype,
                    double tolerance, double grad_floor, const char *what, kf_verify_result *r) {
    double floor = fmax(kf__verify_floor(expected, n), grad_floor);
    if (dtype == KF_DTYPE_F16 && floor < 0x1p-14) {
        floor = 0x1p-14;
    }
    double worst = 0;
    uint64_t worst_at = 0;
    for (uint64_t i = 0; i < n; i++) {
        double e = kf__rel_error(got[i], expected[i], floor);
        if (e > worst || isnan(e)) {
            worst = e;
            worst_at = i;
            if (isinf(e)) {
                break;
            }
        }
    }
    if (worst > r->max_rel_error) {
        r->max_rel_error = worst;
    }
    if (worst > tolerance) {
        float g = got[worst_at];
        if (isnan(g) && !isnan(expected[worst_at])) {
            result_fail(r, "%s: element %llu is NaN where the spec has %.9g (not written?)", what,
                        (unsigned long long)worst_at, (double)expected[worst_at]);
        } else {
            result_fail(r, "%s: element %llu is %.9g, the spec says %.9g (rel error %.3g > %.3g)",
                        what, (unsigned long long)worst_at, (double)g, (double)expected[worst_at],
                        worst, tolerance);
        }
    }
}

/* ---------------------------------------------------------------------------------------- */
/* GPU side                                                                                 */
/* ---------------------------------------------------------------------------------------- */

typedef struct gpu_output {
    kf_buffer *buffer;
    uint64_t n;
    kf_dtype dtype;
} gpu_output;

/* An output buffer of n elements plus a guard band, all poisoned with NaN. */
static kf_status output_create(kf_context *ctx, uint64_t n, kf_dtype dtype, gpu_output *o) {
    o->n = n;
    o->dtype = dtype;
    o->buffer = NULL;
    uint64_t bytes = (n + GUARD_ELEMENTS) * kf_dtype_size(dtype);
    kf_status st = kf_buffer_create(ctx, bytes, &o->buffer);
    if (st == KF_OK) {
        st = kf_buffer_fill_u32(o->buffer, dtype == KF_DTYPE_F16 ? POISON_F16 : POISON_F32);
    }
    return st;
}

/* Downloads the n elements as f32 into out, and checks the guard band kept its poison. */
static kf_status output_read(const gpu_output *o, float *out, bool *guard_ok) {
    uint32_t size = kf_dtype_size(o->dtype);
    uint64_t total = o->n + GUARD_ELEMENTS;
    unsigned char *bytes = malloc((size_t)(total * size));
    if (!bytes) {
        return KF_ERROR_OUT_OF_MEMORY;
    }
    kf_status st = kf_buffer_download(o->buffer, 0, bytes, total * size);
    if (st == KF_OK) {
        *guard_ok = true;
        if (o->dtype == KF_DTYPE_F16) {
            const uint16_t *h = (const uint16_t *)bytes;
            for (uint64_t i = 0; i < o->n; i++) {
                out[i] = kf__half_to_float(h[i]);
            }
            for (uint64_t i = o->n; i < total; i++) {
                *guard_ok = *guard_ok && h[i] == (uint16_t)(POISON_F16 & 0xffffu);
            }
        } else {
            const uint32_t *w = (const uint32_t *)bytes;
            memcpy(out, bytes, (size_t)(o->n * sizeof(float)));
            for (uint64_t i = o->n; i < total; i++) {
                *guard_ok = *guard_ok && w[i] == POISON_F32;
            }
        }
    }
    free(bytes);
    return st;
}

/* Uploads CPU tensors as GPU tensors of the dtype (index inputs as i32, f32 inputs as f32). */
static kf_status upload_inputs(kf_context *ctx, const kf_operator *op, kf_tensor *const *in,
                               uint32_t arity, kf_dtype dtype, kf_gpu_tensor **g) {
    for (uint32_t i = 0; i < arity; i++) {
        kf_status st = kf_gpu_tensor_from(ctx, in[i], kf__op_input_dtype(op, i, dtype), &g[i]);
        if (st != KF_OK) {
            for (uint32_t j = 0; j < i; j++) {
                kf_gpu_tensor_destroy(g[j]);
                g[j] = NULL;
            }
            return st;
        }
    }
    return KF_OK;
}

/* Runs a kernel an op's builder made, with its recorded grid (or the op's grid function). */
static kf_status run_kernel(kf_context *ctx, const kf_operator *op, const kf_shape *shapes,
                            const kf_op_params *p, int32_t which, kf_kernel *k,
                            kf_buffer *const *buffers, uint32_t count, char *msg, size_t msg_size) {
    if (!k) {
        snprintf(msg, msg_size, "%s: the kernel builder returned nothing for these shapes",
                 op->name);
        return KF_ERROR_INTERNAL;
    }
    if (kf_kernel_status(k) != KF_OK) {
        snprintf(msg, msg_size, "%s: kernel build failed: %s", op->name, kf_kernel_error(k));
        return kf_kernel_status(k);
    }
    kf_kernel_launch launch = {0};
    launch.buffers = buffers;
    launch.buffer_count = count;
    kf_kernel_grid(k, launch.groups);
    if (!launch.groups[0] && !launch.groups[1] && !launch.groups[2] && op->grid) {
        op->grid(shapes, p, which, launch.groups);
    }
    kf_status st = kf_kernel_run(ctx, k, &launch);
    if (st != KF_OK) {
        snprintf(msg, msg_size, "%s: %s", op->name, kf_context_last_error(ctx));
    }
    return st;
}

kf_status kf_op_run_forward(kf_context *ctx, const kf_operator *op, const kf_op_params *p,
                            const kf_gpu_tensor *const *in, kf_gpu_tensor *out) {
    if (!ctx) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    if (!op || !in || !out) {
        kf__context_set_error(ctx, KF_ERROR_INVALID_ARGUMENT,
                              "kf_op_run_forward: operator, inputs and output are required");
        return KF_ERROR_INVALID_ARGUMENT;
    }
    kf_op_params zero = {0};
    p = p ? p : &zero;
    uint32_t arity = kf_op_arity(op, p);
    if (arity > 4) {
        kf__context_set_error(ctx, KF_ERROR_INTERNAL, "%s: arity %u above 4", op->name, arity);
        return KF_ERROR_INTERNAL;
    }
    kf_shape shapes[4] = {0};
    kf_buffer *buffers[5];
    if (out->dtype == KF_DTYPE_I32) {
        kf__context_set_error(ctx, KF_ERROR_TYPE, "%s: the output must be f32 or f16, not i32",
                              op->name);
        return KF_ERROR_TYPE;
    }
    /* the dtype the kernel takes: the output's, or (an f32 output whatever the inputs) the
     * inputs' */
    kf_dtype dtype = out->dtype;
    for (uint32_t i = 0; op->f32_output && i < arity; i++) {
        if (in[i] && !((op->index_inputs | op->f32_inputs) >> i & 1u)) {
            dtype = in[i]->dtype;
            break;
        }
    }
    if (out->dtype != kf__op_output_dtype(op, dtype)) {
        kf__context_set_error(ctx, KF_ERROR_TYPE, "%s: the output is %s, expected %s", op->name,
                              kf_dtype_str(out->dtype),
                              kf_dtype_str(kf__op_output_dtype(op, dtype)));
        return KF_ERROR_TYPE;
    }
    for (uint32_t i = 0; i < arity; i++) {
        if (!in[i]) {
            kf__context_set_error(ctx, KF_ERROR_INVALID_ARGUMENT, "%s: input %u is missing",
                                  op->name, i);
            return KF_ERROR_INVALID_ARGUMENT;
        }
        kf_dtype want = kf__op_input_dtype(op, i, dtype);
        if (in[i]->dtype != want) {
            kf__context_set_error(ctx, KF_ERROR_TYPE, "%s: input %u is %s, expected %s", op->name,
                                  i, kf_dtype_str(in[i]->dtype), kf_dtype_str(want));
            return KF_ERROR_TYPE;
        }
        shapes[i] = in[i]->shape;
        buffers[i] = in[i]->buffer;
    }
    buffers[arity] = out->buffer;
    kf_shape expect;
    char msg[256];
    kf_status st = op->shape(shapes, p, &expect, msg, sizeof msg);
    if (st != KF_OK) {
        kf__context_set_error(ctx, st, "%s", msg);
        return st;
    }
    if (!kf_shape_eq(&expect, &out->shape)) {
        char a[64], b[64];
        kf__context_set_error(ctx, KF_ERROR_SHAPE, "%s: the output is %s, the op makes %s",
                              op->name, kf_shape_str(&out->shape, a, sizeof a),
                              kf_shape_str(&expect, b, sizeof b));
        return KF_ERROR_SHAPE;
    }
    kf_kernel *k = kf__op_kernel_for(ctx, op, shapes, p, dtype);
    st = run_kernel(ctx, op, shapes, p, -1, k, buffers, arity + 1, msg, sizeof msg);
    kf_kernel_destroy(k);
    if (st != KF_OK) {
        kf__context_set_error(ctx, st, "%s", msg);
    }
    return st;
}

/* ---------------------------------------------------------------------------------------- */
/* kf_op_verify                                                                             */
/* ---------------------------------------------------------------------------------------- */

typedef struct verify_state {
    const kf_verify_case *c;
    const kf_operator *op;
    uint32_t arity;
    kf_shape out_shape;
    kf_tensor *in[4];
    kf_tensor *out; /* the spec's output (rounded to the dtype) */
    kf_gpu_tensor *g_in[4];
    char label[128]; /* "relu forward 7x13 f32" */
} verify_state;

static void state_destroy(verify_state *s) {
    destroy_all(s->in, 4);
    kf_tensor_destroy(s->out);
    for (uint32_t i = 0; i < 4; i++) {
        kf_gpu_tensor_destroy(s->g_in[i]);
    }
}

static kf_status verify_forward(kf_context *ctx, verify_state *s, kf_verify_result *r) {
    const kf_verify_case *c = s->c;
    uint64_t n = kf_tensor_size(s->out);
    float *got = malloc((size_t)n * sizeof *got);
    gpu_output o = {0};
    kf_dtype out_dtype = kf__op_output_dtype(s->op, c->dtype);
    kf_status st = got ? output_create(ctx, n, out_dtype, &o) : KF_ERROR_OUT_OF_MEMORY;
    if (st == KF_OK) {
        kf_buffer *buffers[5];
        for (uint32_t i = 0; i < s->arity; i++) {
            buffers[i] = s->g_in[i]->buffer;
        }
        buffers[s->arity] = o.buffer;
        kf_kernel *k = kf__op_kernel_for(ctx, s->op, c->shapes, &c->params, c->dtype);
        st = run_kernel(ctx, s->op, c->shapes, &c->params, -1, k, buffers, s->arity + 1, r->message,
                        sizeof r->message);
        kf_kernel_destroy(k);
    }
    bool guard_ok = false;
    if (st == KF_OK) {
        st = output_read(&o, got, &guard_ok);
    }
    if (st == KF_OK) {
        r->passed = true;
        /* a backward operator's output is a gradient of its last input, dy */
        double grad_floor = s->op->grad_of ? dy_floor(s->in[s->arity - 1], 1) : 0.0;
        compare(got, s->out->data, n, out_dtype, r->tolerance, grad_floor, "forward", r);
        if (!guard_ok) {
            result_fail(r, "forward: the kernel wrote past the end of out");
        }
    }
    kf_buffer_destroy(o.buffer);
    free(got);
    return st;
}

static kf_status verify_backward(kf_context *ctx, verify_state *s, kf_verify_result *r) {
    const kf_verify_case *c = s->c;
    const kf_operator *op = s->op;
    if (!op->kernel_backward || !op->spec_backward) {
        snprintf(r->message, sizeof r->message,
                 "%s has no backward kernel (a backward operator, or sum_to: docs/training.md)",
                 op->name);
        return KF_ERROR_UNSUPPORTED;
    }
    /* grad_out from its own stream; grad_in for every input from the spec */
    kf_tensor *grad_out = NULL, *grad_in[4] = {0};
    kf_gpu_tensor *g_out = NULL, *g_grad_out = NULL;
    kf_status st = kf_tensor_create(&s->out_shape, &grad_out);
    if (st == KF_OK) {
        kf_tensor_fill_random(grad_out, input_seed(c->seed, 7), -1.0f, 1.0f);
        round_tensor(grad_out, c->dtype);
    }
    for (uint32_t i = 0; i < s->arity && st == KF_OK; i++) {
        st = kf_tensor_create(&c->shapes[i], &grad_in[i]);
    }
    if (st == KF_OK) {
        st = op->spec_backward((const kf_tensor *const *)s->in, s->out, grad_out, &c->params,
                               grad_in);
        if (st != KF_OK) {
            snprintf(r->message, sizeof r->message, "%s: spec_backward failed: %s", op->name,
                     kf_status_str(st));
        }
    }
    if (st == KF_OK) {
        st = kf_gpu_tensor_from(ctx, s->out, kf__op_output_dtype(op, c->dtype), &g_out);
    }
    if (st == KF_OK) {
        st = kf_gpu_tensor_from(ctx, grad_out, c->dtype, &g_grad_out);
    }
    r->passed = st == KF_OK;
    for (uint32_t i = 0; i < s->arity && st == KF_OK; i++) {
        if (is_index_input(op, i)) {
            continue; /* class indices have no gradient */
        }
        uint64_t n = kf_tensor_size(grad_in[i]);
        float *got = malloc((size_t)n * sizeof *got);
        gpu_output o = {0};
        st = got ? output_create(ctx, n, c->dtype, &o) : KF_ERROR_OUT_OF_MEMORY;
        if (st == KF_OK) {
            kf_buffer *buffers[7];
            for (uint32_t j = 0; j < s->arity; j++) {
                buffers[j] = s->g_in[j]->buffer;
            }
            buffers[s->arity] = g_out->buffer;
            buffers[s->arity + 1] = g_grad_out->buffer;
            buffers[s->arity + 2] = o.buffer;
            kf_kernel *k = op->kernel_backward(c->shapes, &c->params, c->dtype, i);
            st = run_kernel(ctx, op, c->shapes, &c->params, (int32_t)i, k, buffers, s->arity + 3,
                            r->message, sizeof r->message);
            kf_kernel_destroy(k);
        }
        bool guard_ok = false;
        if (st == KF_OK) {
            st = output_read(&o, got, &guard_ok);
        }
        if (st == KF_OK) {
            char what[64];
            snprintf(what, sizeof what, "grad of input %u", i);
            uint64_t terms = n ? kf_tensor_size(grad_out) / n : 1; /* > 1: broadcast input */
            compare(got, grad_in[i]->data, n, c->dtype, r->tolerance, dy_floor(grad_out, terms),
                    what, r);
            if (!guard_ok) {
                result_fail(r, "%s: the kernel wrote past the end of grad_in", what);
            }
        }
        kf_buffer_destroy(o.buffer);
        free(got);
    }
    kf_gpu_tensor_destroy(g_out);
    kf_gpu_tensor_destroy(g_grad_out);
    kf_tensor_destroy(grad_out);
    destroy_all(grad_in, 4);
    return st;
}

kf_status kf_op_verify(kf_context *ctx, const kf_verify_case *c, kf_verify_result *out) {
    if (!out) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    memset(out, 0, sizeof *out);
    if (!ctx || !c || !c->op) {
        snprintf(out->message, sizeof out->message, "no context, case or operator");
        return KF_ERROR_INVALID_ARGUMENT;
    }
    verify_state s = {0};
    s.c = c;
    s.op = c->op;
    s.arity = kf_op_arity(c->op, &c->params);
    out->tolerance = c->dtype == KF_DTYPE_F16 ? c->op->tolerance_f16 : c->op->tolerance_f32;
    if (c->dtype != KF_DTYPE_F32 && c->dtype != KF_DTYPE_F16) {
        snprintf(out->message, sizeof out->message, "verification runs f32 or f16, not %s",
                 kf_dtype_str(c->dtype));
        return KF_ERROR_INVALID_ARGUMENT;
    }
    if (s.arity > 4) {
        return KF_ERROR_INTERNAL;
    }
    kf_status st =
        c->op->shape(c->shapes, &c->params, &s.out_shape, out->message, sizeof out->message);
    if (st == KF_OK) {
        st = make_inputs(c, s.arity, c->dtype, s.in);
    }
    if (st == KF_OK) {
        st = kf_tensor_create(&s.out_shape, &s.out);
    }
    if (st == KF_OK) {
        st = c->op->spec_forward((const kf_tensor *const *)s.in, &c->params, s.out);
        if (st != KF_OK) {
            snprintf(out->message, sizeof out->message, "%s: spec_forward failed: %s", c->op->name,
                     kf_status_str(st));
        }
    }
    if (st == KF_OK) {
        /* the backward kernel reads out as stored in the dtype; so does the spec */
        round_tensor(s.out, kf__op_output_dtype(c->op, c->dtype));
        st = upload_inputs(ctx, c->op, s.in, s.arity, c->dtype, s.g_in);
        if (st == KF_ERROR_UNSUPPORTED) {
            snprintf(out->message, sizeof out->message, "the device has no shader-f16");
        }
    }
    if (st == KF_OK) {
        st = c->backward ? verify_backward(ctx, &s, out) : verify_forward(ctx, &s, out);
    }
    state_destroy(&s);
    if (st != KF_OK) {
        out->passed = false;
        if (!out->message[0]) {
            snprintf(out->message, sizeof out->message, "%s: %s", c->op->name, kf_status_str(st));
        }
        return st;
    }
    return out->passed ? KF_OK : KF_ERROR_MISMATCH;
}

/* ---------------------------------------------------------------------------------------- */
/* kf_op_check_gradient                                                                      */
/* ---------------------------------------------------------------------------------------- */

/* Enough sampled elements to catch a wrong formula, few enough that the large cases stay quick:
 * each sample costs two forward passes over the whole case. */
static uint32_t gradient_samples(uint64_t input_elements, uint64_t work_per_pass) {
    uint64_t budget = 16000000u / (2 * (work_per_pass ? work_per_pass : 1));
    uint64_t n = budget < 4 ? 4 : budget > 256 ? 256 : budget;
    return (uint32_t)(n < input_elements ? n : input_elements);
}

typedef struct gradient_state {
    const kf_verify_case *c;
    uint32_t arity;
    kf_tensor *in[4];
    kf_tensor *base;   /* spec_forward at the inputs */
    kf_tensor *up;     /* spec_forward with one input element stepped up */
    kf_tensor *down;   /* ... and down */
    kf_tensor *weight; /* the loss is sum(weight * out) */
    double resolution; /* max |weight * base| * 2^-23: the loss change an f32 output can hide */
} gradient_state;

/* One central difference d(loss)/dx at element `at` of input `which`, and how far it can be from
 * the true derivative without the spec being wrong:
 *   - rounding: every output is f32, half an ulp each side, divided by the step;
 *   - resolution: a change smaller than an output's ulp does not show at all;
 *   - curvature and kinks: the central difference of f is off from f' by at most the second
 *     difference |f(x+h) - 2 f(x) + f(x-h)| / 2h, exactly so for a kink (relu at 0, a max changing
 *     hands) inside the step, and by f'' h / 2 for smooth f. Summed per output, never cancelled.
 * The step is 1e-3 relative (at least 1e-3 absolute): small against the scale of every op's
 * curvature, large against f32 rounding. */
static kf_status central_difference(gradient_state *g, uint32_t which, uint64_t at,
                                    double *derivative, double *slack, double *curvature) {
    kf_tensor *x = g->in[which];
    const kf_operator *op = g->c->op;
    float x0 = x->data[at];
    double h = 1e-3 * fmax(1.0, fabs((double)x0));
    float xp = (float)(x0 + h), xm = (float)(x0 - h);
    x->data[at] = xp;
    kf_status st = op->spec_forward((const kf_tensor *const *)g->in, &g->c->params, g->up);
    x->data[at] = xm;
    if (st == KF_OK) {
        st = op->spec_forward((const kf_tensor *const *)g->in, &g->c->params, g->down);
    }
    x->data[at] = x0;
    if (st != KF_OK) {
        return st;
    }
    uint64_t n = kf_tensor_size(g->base);
    double delta = 0, rounding = 0, second = 0;
    for (uint64_t i = 0; i < n; i++) {
        double u = g->up->data[i], d = g->down->data[i], b = g->base->data[i];
        if (u == b && d == b) {
            continue;
        }
        double w = g->weight->data[i];
        delta += w * (u - d);
        rounding += fabs(w) * (fabs(u) + fabs(d)) * 0x1p-24;
        second += fabs(w * (u - 2.0 * b + d));
    }
    double step = (double)xp - (double)xm;
    *derivative = delta / step;
    *slack = (rounding + g->resolution + second) / step;
    *curvature = second / step;
    return KF_OK;
}

static kf_status check_one_input(gradient_state *g, uint32_t which, const kf_tensor *analytic,
                                 uint64_t work_per_pass, kf_verify_result *r) {
    uint64_t n = kf_tensor_size(g->in[which]);
    uint32_t samples = gradient_samples(n, work_per_pass);
    uint64_t state = input_seed(g->c->seed, 100 + which);
    double *numeric = malloc(samples * sizeof *numeric);
    double *slack = malloc(samples * sizeof *slack);
    double *curvature = malloc(samples * sizeof *curvature);
    uint64_t *at = malloc(samples * sizeof *at);
    kf_status st = numeric && slack && curvature && at ? KF_OK : KF_ERROR_OUT_OF_MEMORY;
    double sum_sq = 0;
    for (uint32_t s = 0; s < samples && st == KF_OK; s++) {
        at[s] = samples == n ? s : kf__splitmix64(&state) % n;
        st = central_difference(g, which, at[s], &numeric[s], &slack[s], &curvature[s]);
        sum_sq += numeric[s] * numeric[s];
    }
    if (st == KF_OK) {
        double floor = sqrt(sum_sq / samples) * FLOOR_FRACTION;
        floor = floor > 0 ? floor : 1e-6;
        /* a sample whose step straddles a kink (or strong curvature) checks little: most must not
         */
        uint32_t informative = 0;
        for (uint32_t s = 0; s < samples; s++) {
            double scale = fmax(fabs(numeric[s]), floor);
            /* a second difference of a few output ulps is rounding, not a kink */
            double noise = slack[s] - curvature[s];
            informative += curvature[s] < fmax(0.5 * scale, 4.0 * noise);
            double a = analytic->data[at[s]];
            double err = fmax(0.0, fabs(a - numeric[s]) - slack[s]) / scale;
            if (isnan(a) != isnan(numeric[s])) {
                err = INFINITY;
            }
            if (err > r->max_rel_error) {
                r->max_rel_error = err;
            }
            if (err > r->tolerance) {
                result_fail(r,
                            "grad of input %u, element %llu: spec_backward says %.9g, central "
                            "differences %.9g +- %.3g (rel error %.3g)",
                            which, (unsigned long long)at[s], a, numeric[s], slack[s], err);
            }
        }
        if (2 * informative < samples) {
            result_fail(r,
                        "grad of input %u: %u of %u samples straddle kinks or strong curvature; "
                        "the check saw too little",
                        which, samples - informative, samples);
        }
    }
    free(numeric);
    free(slack);
    free(curvature);
    free(at);
    return st;
}

/* A backward operator B (op->grad_of = F, for input w): B(inputs, dy) must be the derivative of
 * sum(dy * F(inputs)) with respect to input w, so its spec is checked against central
 * differences of F's spec with dy as the weights. An element-wise B yields the unsummed
 * gradient (a broadcast input's sum is another operator's), so it is summed here first. */
static kf_status check_backward_operator(const kf_verify_case *c, kf_verify_result *out) {
    const kf_operator *op = c->op, *fwd = op->grad_of;
    uint32_t arity = kf_op_arity(op, &c->params), n = kf_op_arity(fwd, &c->params);
    uint32_t which = op->grad_input;
    if (arity > 4 || n + 1 != arity || which >= n) {
        snprintf(out->message, sizeof out->message, "%s: inputs do not follow %s's", op->name,
                 fwd->name);
        return KF_ERROR_INTERNAL;
    }
    kf_verify_case fc = *c;
    fc.op = fwd;
    gradient_state g = {0};
    g.c = &fc;
    g.arity = n;
    kf_tensor *drawn[4] = {0}, *analytic = NULL, *summed = NULL;
    kf_shape grad_shape, y_shape;
    kf_status st = op->shape(c->shapes, &c->params, &grad_shape, out->message, sizeof out->message);
    if (st == KF_OK) {
        st = fwd->shape(c->shapes, &c->params, &y_shape, out->message, sizeof out->message);
    }
    if (st == KF_OK) {
        st = make_inputs(c, arity, KF_DTYPE_F32, drawn);
    }
    if (st == KF_OK) {
        st = kf_tensor_create(&grad_shape, &analytic);
    }
    if (st == KF_OK) {
        st = op->spec_forward((const kf_tensor *const *)drawn, &c->params, analytic);
    }
    if (st == KF_OK) {
        st = kf_tensor_create(&c->shapes[which], &summed);
    }
    if (st == KF_OK) {
        kf__bcast kind = kf__broadcast_kind(&c->shapes[which], &grad_shape);
        uint32_t cols;
        kf__shape_rows_cols(&grad_shape, NULL, &cols);
        uint64_t m = kf_tensor_size(analytic);
        double *acc = calloc((size_t)kf_tensor_size(summed), sizeof *acc);
        st = acc ? KF_OK : KF_ERROR_OUT_OF_MEMORY;
        for (uint64_t i = 0; acc && i < m; i++) {
            uint64_t at = kind == KF__BCAST_SCALAR ? 0
                          : kind == KF__BCAST_ROW  ? i % cols
                          : kind == KF__BCAST_COL  ? i / cols
                                                   : i;
            acc[at] += analytic->data[i];
        }
        for (uint64_t j = 0; acc && j < kf_tensor_size(summed); j++) {
            summed->data[j] = (float)acc[j];
        }
        free(acc);
    }
    for (uint32_t i = 0; i < n; i++) {
        g.in[i] = drawn[i];
    }
    g.weight = drawn[n];
    if (st == KF_OK) {
        st = kf_tensor_create(&y_shape, &g.base);
    }
    if (st == KF_OK) {
        st = kf_tensor_create(&y_shape, &g.up);
    }
    if (st == KF_OK) {
        st = kf_tensor_create(&y_shape, &g.down);
    }
    if (st == KF_OK) {
        st = fwd->spec_forward((const kf_tensor *const *)g.in, &c->params, g.base);
    }
    if (st == KF_OK) {
        uint64_t m = kf_tensor_size(g.base);
        for (uint64_t i = 0; i < m; i++) {
            double v = fabs((double)g.weight->data[i] * g.base->data[i]);
            g.resolution = v > g.resolution ? v : g.resolution;
        }
        g.resolution *= 0x1p-23;
        uint64_t work = kf_shape_elements(&y_shape);
        for (uint32_t i = 0; i < n; i++) {
            work += kf_tensor_size(g.in[i]);
        }
        out->passed = true;
        st = check_one_input(&g, which, summed, work, out);
    }
    destroy_all(drawn, 4);
    kf_tensor_destroy(analytic);
    kf_tensor_destroy(summed);
    kf_tensor_destroy(g.base);
    kf_tensor_destroy(g.up);
    kf_tensor_destroy(g.down);
    if (st != KF_OK) {
        out->passed = false;
        if (!out->message[0]) {
            snprintf(out->message, sizeof out->message, "%s: %s", op->name, kf_status_str(st));
        }
        return st;
    }
    return out->passed ? KF_OK : KF_ERROR_MISMATCH;
}

kf_status kf_op_check_gradient(const kf_verify_case *c, kf_verify_result *out) {
    if (!out) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    memset(out, 0, sizeof *out);
    out->tolerance = GRADIENT_TOLERANCE;
    if (!c || !c->op) {
        snprintf(out->message, sizeof out->message, "kf_op_check_gradient: %s is NULL",
                 c ? "the case's op" : "the case");
        return KF_ERROR_INVALID_ARGUMENT;
    }
    const kf_operator *op = c->op;
    if (op->grad_of) {
        return check_backward_operator(c, out);
    }
    if (!op->spec_backward) {
        snprintf(out->message, sizeof out->message, "%s has no spec_backward", op->name);
        return KF_ERROR_UNSUPPORTED;
    }
    gradient_state g = {0};
    g.c = c;
    g.arity = kf_op_arity(op, &c->params);
    if (g.arity > 4) {
        return KF_ERROR_INTERNAL;
    }
    kf_shape out_shape;
    kf_tensor *grad_in[4] = {0};
    kf_status st = op->shape(c->shapes, &c->params, &out_shape, out->message, sizeof out->message);
    if (st == KF_OK) {
        st = make_inputs(c, g.arity, KF_DTYPE_F32, g.in);
    }
    if (st == KF_OK) {
        st = kf_tensor_create(&out_shape, &g.base);
    }
    if (st == KF_OK) {
        st = kf_tensor_create(&out_shape, &g.up);
    }
    if (st == KF_OK) {
        st = kf_tensor_create(&out_shape, &g.down);
    }
    if (st == KF_OK) {
        st = kf_tensor_create(&out_shape, &g.weight);
    }
    if (st == KF_OK) {
        kf_tensor_fill_random(g.weight, input_seed(c->seed, 7), -1.0f, 1.0f);
        st = op->spec_forward((const kf_tensor *const *)g.in, &c->params, g.base);
    }
    if (st == KF_OK) {
        uint64_t n = kf_tensor_size(g.base);
        for (uint64_t i = 0; i < n; i++) {
            double v = fabs((double)g.weight->data[i] * g.base->data[i]);
            g.resolution = v > g.resolution ? v : g.resolution;
        }
        g.resolution *= 0x1p-23;
    }
    for (uint32_t i = 0; i < g.arity && st == KF_OK; i++) {
        st = kf_tensor_create(&c->shapes[i], &grad_in[i]);
    }
    if (st == KF_OK) {
        st = op->spec_backward((const kf_tensor *const *)g.in, g.base, g.weight, &c->params,
                               grad_in);
    }
    if (st == KF_OK) {
        out->passed = true;
        uint64_t work = kf_shape_elements(&out_shape);
        for (uint32_t i = 0; i < g.arity; i++) {
            work += kf_tensor_size(g.in[i]);
        }
        for (uint32_t i = 0; i < g.arity && st == KF_OK; i++) {
            if (!is_index_input(op, i)) {
                st = check_one_input(&g, i, grad_in[i], work, out);
            }
        }
    }
    destroy_all(g.in, 4);
    destroy_all(grad_in, 4);
    kf_tensor_destroy(g.base);
    kf_tensor_destroy(g.up);
    kf_tensor_destroy(g.down);
    kf_tensor_destroy(g.weight);
    if (st != KF_OK) {
        out->passed = false;
        if (!out->message[0]) {
            snprintf(out->message, sizeof out->message, "%s: %s", op->name, kf_status_str(st));
        }
        return st;
    }
    return out->passed ? KF_OK : KF_ERROR_MISMATCH;
}

/* Optimizers on the GPU: SGD (momentum, Nesterov, weight decay) and AdamW (bias-corrected,
 * decoupled weight decay), PyTorch's rules, in place, every parameter in one dispatch.
 *
 * The kernel is a multi-tensor apply (the seeds' multi-buffer fusion carried to parameters):
 * one linear index space covers every parameter of a batch end to end, and invocation idx
 * updates element idx - offset_i of the parameter whose range holds it. A batch binds 2 buffers
 * per parameter (value, gradient) and one state buffer laid out as
 *     [c1, c2 | c1, c2 | momentum or m (E) | v (E)]     (E: the batch's elements)
 * so that a storage-buffer limit of 10 (lavapipe's) takes a 4-tensor model in one dispatch.
 * AdamW's bias corrections c = 1 - b^t live in the two header slots, used in turn: update t
 * reads c_{t-1} from slot (t-1) % 2, computes c_t = (1 - b) + b c_{t-1} (every invocation the
 * same value) and invocation 0 writes it to the other slot; the two kernels (one per parity)
 * alternate. So an update uploads nothing. */
#include "ops/ops_internal.h"
#include "runtime/runtime.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OPT_WORKGROUP 256u

#define OPT_HEADER 4u /* floats before the state: two slots of (c1, c2) */

typedef struct opt_batch {
    uint32_t first, count; /* parameters [first, first + count) */
    uint64_t elements;     /* their total */
    kf_buffer *state;      /* header and momentum, or m and v (NULL for plain SGD) */
    kf_buffer **buffers;   /* the bindings */
} opt_batch;

struct kf_optimizer {
    kf_context *ctx;
    kf_optimizer_desc desc;
    uint32_t count;
    kf_buffer **params;
    kf_buffer **grads;
    kf_shape *shapes;
    uint32_t states; /* state tensors per parameter: 0, 1 or 2 */
    opt_batch *batches;
    uint32_t batch_count;
    kf_dispatch *dispatches[2];
    uint64_t steps;
};

static kf_optimizer_desc with_defaults(const kf_optimizer_desc *d) {
    kf_optimizer_desc r = *d;
    bool adamw = r.kind == KF_OPTIMIZER_ADAMW;
    if (r.lr == 0.0f) {
        r.lr = adamw ? 1e-3f : 1e-2f;
    }
    if (adamw) {
        r.beta1 = r.beta1 == 0.0f ? 0.9f : r.beta1;
        r.beta2 = r.beta2 == 0.0f ? 0.999f : r.beta2;
        r.eps = r.eps == 0.0f ? 1e-8f : r.eps;
    }
    return r;
}

static const char *check_desc(const kf_optimizer_desc *d) {
    if (d->kind != KF_OPTIMIZER_SGD && d->kind != KF_OPTIMIZER_ADAMW) {
        return "kind is neither KF_OPTIMIZER_SGD nor KF_OPTIMIZER_ADAMW";
    }
    if (!(d->lr > 0.0f) || !isfinite(d->lr)) {
        return "lr must be a finite number above 0";
    }
    if (!(d->weight_decay >= 0.0f) || !isfinite(d->weight_decay)) {
        return "weight_decay must be a finite number, at least 0";
    }
    if (d->kind == KF_OPTIMIZER_SGD) {
        if (!(d->momentum >= 0.0f && d->momentum < 1.0f)) {
            return "momentum must be in [0, 1)";
        }
        if (d->nesterov && d->momentum == 0.0f) {
            return "nesterov needs momentum above 0";
        }
    } else {
        if (!(d->beta1 > 0.0f && d->beta1 < 1.0f) || !(d->beta2 > 0.0f && d->beta2 < 1.0f)) {
            return "beta1 and beta2 must be in (0, 1)";
        }
        if (!(d->eps > 0.0f) || !isfinite(d->eps)) {
            return "eps must be a finite number above 0";
        }
    }
    return NULL;
}

static uint32_t state_count(const kf_optimizer_desc *d) {
    if (d->kind == KF_OPTIMIZER_ADAMW) {
        return 2;
    }
    return d->momentum > 0.0f ? 1 : 0;
}

/* ---- the kernel ---- */

/* One element (or vec4) of the update: the rule of the header, in f32, in torch's order. */
static void update(kf_kernel *k, const kf_optimizer_desc *d, kf_binding pb, kf_binding gb,
                   kf_binding sb, kf_val at, const kf_val *sat, kf_val c1, kf_val c2) {
    kf_val p = kf_load(k, pb, at);
    kf_val g = kf_load(k, gb, at);
    if (d->kind == KF_OPTIMIZER_SGD) {
        kf_val dp = g;
        if (d->weight_decay != 0.0f) {
            dp = kf_add(k, g, kf_mul(k, p, kf_lit_f32(k, d->weight_decay)));
        }
        if (d->momentum > 0.0f) {
            kf_val mom = kf_lit_f32(k, d->momentum);
            kf_val buf = kf_add(k, kf_mul(k, kf_load(k, sb, sat[0]), mom), dp);
            kf_store(k, sb, sat[0], buf);
            dp = d->nesterov ? kf_add(k, dp, kf_mul(k, buf, mom)) : buf;
        }
        kf_store(k, pb, at, kf_sub(k, p, kf_mul(k, dp, kf_lit_f32(k, d->lr))));
        return;
    }
    if (d->weight_decay != 0.0f) {
        p = kf_mul(k, p, kf_lit_f32(k, (float)(1.0 - (double)d->lr * d->weight_decay)));
    }
    kf_val m = kf_add(k, kf_mul(k, kf_load(k, sb, sat[0]), kf_lit_f32(k, d->beta1)),
                      kf_mul(k, g, kf_lit_f32(k, (float)(1.0 - (double)d->beta1))));
    kf_val v = kf_add(k, kf_mul(k, kf_load(k, sb, sat[1]), kf_lit_f32(k, d->beta2)),
                      kf_mul(k, kf_mul(k, g, g), kf_lit_f32(k, (float)(1.0 - (double)d->beta2))));
    kf_store(k, sb, sat[0], m);
    kf_store(k, sb, sat[1], v);
    kf_val denom = kf_add(k, kf_div(k, kf_call1(k, KF_FN_SQRT, v), kf_call1(k, KF_FN_SQRT, c2)),
                          kf_lit_f32(k, d->eps));
    kf_val step_size = kf_div(k, kf_lit_f32(k, d->lr), c1);
    kf_store(k, pb, at, kf_sub(k, p, kf_mul(k, kf_div(k, m, denom), step_size)));
}

static kf_kernel *batch_kernel(const kf_optimizer *o, const opt_batch *b, uint32_t parity) {
    const kf_optimizer_desc *d = &o->desc;
    bool adamw = d->kind == KF_OPTIMIZER_ADAMW;
    kf_kernel_desc kd = {.name = adamw ? "adamw" : "sgd", .workgroup_size = {OPT_WORKGROUP, 1, 1}};
    kf_kernel *k = kf_kernel_create(&kd);
    if (!k) {
        return NULL;
    }
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32);
    kf_binding pb[64], gb[64];
    for (uint32_t i = 0; i < b->count; i++) {
        char name[32];
        snprintf(name, sizeof name, "param%u", b->first + i);
        pb[i] = kf_kernel_storage(k, name, f32, KF_ACCESS_READ_WRITE);
        snprintf(name, sizeof name, "grad%u", b->first + i);
        gb[i] = kf_kernel_storage(k, name, f32, KF_ACCESS_READ);
    }
    kf_binding sb = {0};
    if (o->states) {
        sb = kf_kernel_storage(k, "state", f32, KF_ACCESS_READ_WRITE);
    }
    kf_val idx = kf_let(k, "idx", kf_global_linear(k));
    kf_val c1 = {0}, c2 = {0};
    if (adamw) {
        /* c_t = (1 - b) + b c_{t-1}: 1 - b^t without the cancellation of 1 - pow(b, t) */
        uint32_t from = 2 * parity, to = 2 * (1 - parity);
        c1 =
            kf_let(k, "c1",
                   kf_add(k, kf_lit_f32(k, (float)(1.0 - (double)d->beta1)),
                          kf_mul(k, kf_lit_f32(k, d->beta1), kf_load(k, sb, kf_lit_u32(k, from)))));
        c2 = kf_let(
            k, "c2",
            kf_add(k, kf_lit_f32(k, (float)(1.0 - (double)d->beta2)),
                   kf_mul(k, kf_lit_f32(k, d->beta2), kf_load(k, sb, kf_lit_u32(k, from + 1)))));
        kf_if(k, kf_binary(k, KF_OP_EQ, idx, kf_lit_u32(k, 0)));
        kf_store(k, sb, kf_lit_u32(k, to), c1);
        kf_store(k, sb, kf_lit_u32(k, to + 1), c2);
        kf_end(k);
    }
    uint32_t header = adamw ? OPT_HEADER : 0;
    uint64_t offset = 0;
    for (uint32_t i = 0; i < b->count; i++) {
        uint64_t n = kf_shape_elements(&o->shapes[b->first + i]);
        kf_val lo = kf_lit_u32(k, (uint32_t)offset);
        kf_val hi = kf_lit_u32(k, (uint32_t)(offset + n));
        kf_if(k, kf_binary(k, KF_OP_AND, kf_binary(k, KF_OP_GE, idx, lo),
                           kf_binary(k, KF_OP_LT, idx, hi)));
        kf_val at = offset ? kf_sub(k, idx, lo) : idx;
        kf_val sat[2] = {kf_add(k, idx, kf_lit_u32(k, header)),
                         kf_add(k, idx, kf_lit_u32(k, header + (uint32_t)b->elements))};
        update(k, d, pb[i], gb[i], sb, at, sat, c1, c2);
        kf_end(k);
        offset += n;
    }
    return k;
}

/* ---- create, record, run ---- */

static kf_status fail(kf_context *ctx, kf_status st, const char *what) {
    kf__context_set_error(ctx, st, "optimizer: %s", what);
    return st;
}

void kf_optimizer_destroy(kf_optimizer *o) {
    if (!o) {
        return;
    }
    for (uint32_t b = 0; o->batches && b < o->batch_count; b++) {
        kf_buffer_destroy(o->batches[b].state);
        free(o->batches[b].buffers);
    }
    for (uint32_t i = 0; i < o->count; i++) {
        kf__buffer_drop(o->params ? o->params[i] : NULL);
        kf__buffer_drop(o->grads ? o->grads[i] : NULL);
    }
    free(o->batches);
    free(o->dispatches[0]);
    free(o->dispatches[1]);
    free(o->params);
    free(o->grads);
    free(o->shapes);
    free(o);
}

static kf_status check_tensors(kf_context *ctx, kf_gpu_tensor *const *params,
                               kf_gpu_tensor *const *grads, uint32_t count) {
    char msg[256];
    for (uint32_t i = 0; i < count; i++) {
        const kf_gpu_tensor *p = params[i], *g = grads[i];
        if (!p || !g || p->ctx != ctx || g->ctx != ctx) {
            snprintf(msg, sizeof msg, "parameter %u or its gradient is NULL or of another context",
                     i);
            return fail(ctx, KF_ERROR_INVALID_ARGUMENT, msg);
        }
        if (p->dtype != KF_DTYPE_F32 || g->dtype != KF_DTYPE_F32) {
            snprintf(msg, sizeof msg, "parameter %u: f32 only (got %s and %s)", i,
                     kf_dtype_str(p->dtype), kf_dtype_str(g->dtype));
            return fail(ctx, KF_ERROR_TYPE, msg);
        }
        if (!kf_shape_eq(&p->shape, &g->shape)) {
            char a[64], b[64];
            snprintf(msg, sizeof msg, "parameter %u is %s but its gradient %s", i,
                     kf_shape_str(&p->shape, a, sizeof a), kf_shape_str(&g->shape, b, sizeof b));
            return fail(ctx, KF_ERROR_INVALID_ARGUMENT, msg);
        }
        for (uint32_t j = 0; j < count; j++) {
            if ((j != i && params[j]->buffer == p->buffer) || grads[j]->buffer == p->buffer) {
                snprintf(msg, sizeof msg,
                         "parameter %u's tensor is also parameter or gradient %u: each "
                         "parameter and gradient needs a tensor of its own",
                         i, j);
                return fail(ctx, KF_ERROR_INVALID_ARGUMENT, msg);
            }
        }
    }
    return KF_OK;
}

/* Parameters per dispatch: 2 bindings each, plus the batch's state. */
static uint32_t per_batch(kf_context *ctx, uint32_t states) {
    kf_adapter_info info;
    uint32_t limit = 8;
    if (kf_context_adapter_info(ctx, &info) == KF_OK && info.max_storage_buffers_per_stage) {
        limit = info.max_storage_buffers_per_stage;
    }
    uint32_t extra = states ? 1u : 0u;
    uint32_t n = limit > extra ? (limit - extra) / 2 : 0;
    return n < 64 ? n : 64;
}

static kf_status make_batch(kf_optimizer *o, opt_batch *b) {
    uint32_t nb = 2 * b->count + (o->states ? 1 : 0);
    bool adamw = o->desc.kind == KF_OPTIMIZER_ADAMW;
    if (o->states) {
        uint64_t floats = (adamw ? OPT_HEADER : 0) + o->states * b->elements;
        kf_status st = kf_buffer_create(o->ctx, floats * 4, &b->state); /* zeros: c_0 = 0 */
        if (st != KF_OK) {
            return st;
        }
    }
    b->buffers = calloc(nb, sizeof *b->buffers);
    if (!b->buffers) {
        return fail(o->ctx, KF_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    uint32_t at = 0;
    for (uint32_t i = 0; i < b->count; i++) {
        b->buffers[at++] = o->params[b->first + i];
        b->buffers[at++] = o->grads[b->first + i];
    }
    if (o->states) {
        b->buffers[at++] = b->state;
    }
    uint64_t groups = (b->elements + OPT_WORKGROUP - 1) / OPT_WORKGROUP;
    for (uint32_t parity = 0; parity < 2; parity++) {
        kf_kernel *k = batch_kernel(o, b, parity);
        if (!k) {
            return fail(o->ctx, KF_ERROR_OUT_OF_MEMORY, "out of host memory");
        }
        kf_status st = kf_kernel_status(k);
        if (st != KF_OK) {
            kf__context_set_error(o->ctx, KF_ERROR_INTERNAL, "optimizer kernel: %s",
                                  kf_kernel_error(k));
            kf_kernel_destroy(k);
            return KF_ERROR_INTERNAL;
        }
        kf_kernel_launch launch = {.buffers = b->buffers, .buffer_count = nb};
        launch.groups[0] = (uint32_t)(groups ? groups : 1);
        launch.groups[1] = launch.groups[2] = 1;
        st = kf_kernel_dispatch(o->ctx, k, &launch, &o->dispatches[parity][b - o->batches]);
        kf_kernel_destroy(k);
        if (st != KF_OK) {
            return st;
        }
    }
    return KF_OK;
}

kf_status kf_optimizer_create(kf_context *ctx, const kf_optimizer_desc *desc,
                              kf_gpu_tensor *const *params, kf_gpu_tensor *const *grads,
                              uint32_t count, kf_optimizer **out) {
    if (out) {
        *out = NULL;
    }
    if (!out || !ctx) {
        kf__context_set_error(ctx, KF_ERROR_INVALID_ARGUMENT, "kf_optimizer_create: out is NULL");
        return KF_ERROR_INVALID_ARGUMENT;
    }
    if (!desc || !params || !grads || count == 0) {
        return fail(ctx, KF_ERROR_INVALID_ARGUMENT, "needs a desc and at least one parameter");
    }
    kf_optimizer_desc d = with_defaults(desc);
    const char *bad = check_desc(&d);
    if (bad) {
        return fail(ctx, KF_ERROR_INVALID_ARGUMENT, bad);
    }
    kf_status st = check_tensors(ctx, params, grads, count);
    if (st != KF_OK) {
        return st;
    }
    uint32_t states = state_count(&d);
    uint32_t per = per_batch(ctx, states);
    if (per == 0) {
        return fail(ctx, KF_ERROR_LIMIT, "the device binds too few storage buffers");
    }
    kf_optimizer *o = calloc(1, sizeof *o);
    if (!o) {
        return fail(ctx, KF_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    o->ctx = ctx;
    o->desc = d;
    o->states = states;
    o->params = calloc(count, sizeof *o->params);
    o->grads = calloc(count, sizeof *o->grads);
    o->shapes = calloc(count, sizeof *o->shapes);
    if (!o->params || !o->grads || !o->shapes) {
        kf_optimizer_destroy(o);
        return fail(ctx, KF_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    o->count = count;
    for (uint32_t i = 0; i < count; i++) {
        o->params[i] = params[i]->buffer;
        o->grads[i] = grads[i]->buffer;
        kf__buffer_hold(o->params[i]);
        kf__buffer_hold(o->grads[i]);
        o->shapes[i] = params[i]->shape;
    }
    o->batch_count = (count + per - 1) / per;
    o->batches = calloc(o->batch_count, sizeof *o->batches);
    o->dispatches[0] = calloc(o->batch_count, sizeof *o->dispatches[0]);
    o->dispatches[1] = calloc(o->batch_count, sizeof *o->dispatches[1]);
    if (!o->batches || !o->dispatches[0] || !o->dispatches[1]) {
        kf_optimizer_destroy(o);
        return fail(ctx, KF_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    for (uint32_t b = 0; b < o->batch_count && st == KF_OK; b++) {
        opt_batch *batch = &o->batches[b];
        batch->first = b * per;
        batch->count = count - batch->first < per ? count - batch->first : per;
        for (uint32_t i = 0; i < batch->count; i++) {
            batch->elements += kf_shape_elements(&o->shapes[batch->first + i]);
        }
        if (batch->elements > UINT32_MAX) {
            st = fail(ctx, KF_ERROR_LIMIT, "more than 2^32 parameter elements in one dispatch");
            break;
        }
        st = make_batch(o, batch);
    }
    if (st != KF_OK) {
        kf_optimizer_destroy(o);
        return st;
    }
    *out = o;
    return KF_OK;
}

kf_status kf_optimizer_record(kf_optimizer *o, const kf_dispatch **out, uint32_t *count) {
    if (!o || !out || !count) {
        if (o) {
            kf__context_set_error(o->ctx, KF_ERROR_INVALID_ARGUMENT,
                                  "kf_optimizer_record: %s is NULL", !out ? "out" : "count");
        }
        return KF_ERROR_INVALID_ARGUMENT;
    }
    *out = o->dispatches[o->steps % 2];
    *count = o->batch_count;
    o->steps++;
    return KF_OK;
}

kf_status kf_optimizer_step(kf_optimizer *o) {
    const kf_dispatch *d;
    uint32_t n;
    kf_status st = kf_optimizer_record(o, &d, &n);
    if (st != KF_OK) {
        return st;
    }
    st = kf_context_run(o->ctx, d, n);
    if (st != KF_OK) {
        o->steps--; /* not taken: the corrections were not advanced */
    }
    return st;
}

uint64_t kf_optimizer_steps(const kf_optimizer *o) {
    return o ? o->steps : 0;
}

uint32_t kf_optimizer_dispatch_count(const kf_optimizer *o) {
    return o ? o->batch_count : 0;
}

/* Where state `which` of parameter `index` lies: its batch and its offset in bytes. */
static const opt_batch *state_of(const kf_optimizer *o, uint32_t index, uint32_t which,
                                 uint64_t *offset) {
    for (uint32_t b = 0; b < o->batch_count; b++) {
        const opt_batch *batch = &o->batches[b];
        if (index >= batch->first && index < batch->first + batch->count) {
            uint64_t at = 0;
            for (uint32_t i = batch->first; i < index; i++) {
                at += kf_shape_elements(&o->shapes[i]);
            }
            uint64_t header = o->desc.kind == KF_OPTIMIZER_ADAMW ? OPT_HEADER : 0;
            *offset = (header + which * batch->elements + at) * 4;
            return batch;
        }
    }
    return NULL;
}

kf_status kf_optimizer_state_get(const kf_optimizer *o, uint32_t index, uint32_t which,
                                 kf_tensor *out) {
    if (!o || !out || index >= o->count || which >= o->states ||
        !kf_shape_eq(&out->shape, &o->shapes[index])) {
        if (o) {
            kf__context_set_error(o->ctx, KF_ERROR_INVALID_ARGUMENT,
                                  "optimizer state: parameter %u has no state %u of that shape",
                                  index, which);
        }
        return KF_ERROR_INVALID_ARGUMENT;
    }
    uint64_t offset = 0;
    const opt_batch *b = state_of(o, index, which, &offset);
    return kf_buffer_download(b->state, offset, out->data, kf_tensor_size(out) * 4);
}

/* For verification: state `which` of parameter `index` from host values. */
static kf_status state_set(kf_optimizer *o, uint32_t index, uint32_t which, const kf_tensor *t) {
    uint64_t offset = 0;
    const opt_batch *b = state_of(o, index, which, &offset);
    return kf_buffer_upload(b->state, offset, t->data, kf_tensor_size(t) * 4);
}

/* ---- the CPU specification ---- */

kf_status kf_optimizer_spec_step(const kf_optimizer_desc *desc, uint64_t step, kf_tensor *param,
                                 const kf_tensor *grad, kf_tensor *state0, kf_tensor *state1) {
    if (!desc || !param || !grad || step == 0 || !kf_shape_eq(&param->shape, &grad->shape)) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    kf_optimizer_desc d = with_defaults(desc);
    if (check_desc(&d)) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    uint32_t states = state_count(&d);
    kf_tensor *st[2] = {state0, state1};
    for (uint32_t s = 0; s < states; s++) {
        if (!st[s] || !kf_shape_eq(&st[s]->shape, &param->shape)) {
            return KF_ERROR_INVALID_ARGUMENT;
        }
    }
    uint64_t n = kf_tensor_size(param);
    double lr = d.lr, wd = d.weight_decay;
    double bc1 = 1.0 - pow((double)d.beta1, (double)step);
    double bc2 = 1.0 - pow((double)d.beta2, (double)step);
    for (uint64_t i = 0; i < n; i++) {
        double p = param->data[i], g = grad->data[i];
        if (d.kind == KF_OPTIMIZER_SGD) {
            double dp = g + wd * p;
            if (states) {
                double buf = d.momentum * (double)st[0]->data[i] + dp;
                st[0]->data[i] = (float)buf;
                dp = d.nesterov ? dp + d.momentum * buf : buf;
            }
            param->data[i] = (float)(p - lr * dp);
        } else {
            p *= 1.0 - lr * wd;
            double m = d.beta1 * (double)st[0]->data[i] + (1.0 - d.beta1) * g;
            double v = d.beta2 * (double)st[1]->data[i] + (1.0 - d.beta2) * g * g;
            st[0]->data[i] = (float)m;
            st[1]->data[i] = (float)v;
            param->data[i] = (float)(p - lr / bc1 * m / (sqrt(v) / sqrt(bc2) + d.eps));
        }
    }
    return KF_OK;
}

/* ---- verification ---- */

#define GUARD_WORDS 16u
#define OPT_TOLERANCE 1e-5

static void fill_random(kf_tensor *t, uint64_t *rng, float lo, float hi) {
    for (uint64_t i = 0; i < kf_tensor_size(t); i++) {
        *rng += 0x9e3779b97f4a7c15ull;
        uint64_t z = *rng;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        t->data[i] = lo + (hi - lo) * (float)((double)(z >> 40) / (double)(1ull << 24));
    }
}

/* The error of got against want as kf_op_verify measures it, and where it is worst. */
static double compare(const kf_tensor *got, const kf_tensor *want, uint64_t *worst_at) {
    uint64_t n = kf_tensor_size(want);
    double ss = 0.0;
    for (uint64_t i = 0; i < n; i++) {
        ss += (double)want->data[i] * want->data[i];
    }
    /* m and the momentum are sums of terms that may cancel, and f32 rounds each term: errors
     * are relative to the tensor's rms where the element is smaller */
    double floor = sqrt(ss / (double)(n ? n : 1));
    double worst = 0.0;
    *worst_at = 0;
    for (uint64_t i = 0; i < n; i++) {
        double w = want->data[i], g = got->data[i];
        double e = isfinite(g) ? fabs(g - w) / fmax(fmax(fabs(w), floor), 1e-30) : INFINITY;
        if (e > worst || (e != e)) {
            worst = e;
            *worst_at = i;
        }
    }
    return worst;
}

typedef struct verify_state {
    kf_gpu_tensor *p[64], *g[64];
    kf_tensor *hp[64], *hg[64], *hs[64][2], *tmp;
} verify_state;

static kf_status guarded(kf_context *ctx, const kf_tensor *t, kf_gpu_tensor **out) {
    kf_gpu_tensor *g = calloc(1, sizeof *g);
    if (!g) {
        return KF_ERROR_OUT_OF_MEMORY;
    }
    uint64_t bytes = kf_tensor_size(t) * 4;
    kf_status st = kf_buffer_create(ctx, bytes + GUARD_WORDS * 4, &g->buffer);
    if (st == KF_OK) {
        st = kf_buffer_fill_u32(g->buffer, 0x7fc00000u);
    }
    if (st == KF_OK) {
        st = kf_buffer_upload(g->buffer, 0, t->data, bytes);
    }
    g->ctx = ctx;
    g->shape = t->shape;
    g->dtype = KF_DTYPE_F32;
    *out = g;
    return st;
}

static void guarded_destroy(kf_gpu_tensor *g) {
    if (g) {
        kf_buffer_destroy(g->buffer);
        free(g);
    }
}

static bool guard_intact(kf_gpu_tensor *g) {
    uint32_t words[GUARD_WORDS];
    uint64_t bytes = kf_shape_elements(&g->shape) * 4;
    if (kf_buffer_download(g->buffer, bytes, words, sizeof words) != KF_OK) {
        return false;
    }
    for (uint32_t i = 0; i < GUARD_WORDS; i++) {
        if (words[i] != 0x7fc00000u) {
            return false;
        }
    }
    return true;
}

kf_status kf_optimizer_verify(kf_context *ctx, const kf_optimizer_desc *desc,
                              const kf_shape *shapes, uint32_t count, uint32_t steps, uint64_t seed,
                              kf_verify_result *out) {
    if (!ctx || !desc || !shapes || !out || count == 0 || count > 64 || steps == 0) {
        if (out) {
            memset(out, 0, sizeof *out);
            snprintf(out->message, sizeof out->message, "kf_optimizer_verify: %s",
                     !ctx                       ? "ctx is NULL"
                     : !desc                    ? "desc is NULL"
                     : !shapes                  ? "shapes is NULL"
                     : count == 0 || count > 64 ? "count must be 1 to 64"
                                                : "steps must be at least 1");
            kf__context_set_error(ctx, KF_ERROR_INVALID_ARGUMENT, "%s", out->message);
        }
        return KF_ERROR_INVALID_ARGUMENT;
    }
    memset(out, 0, sizeof *out);
    out->tolerance = OPT_TOLERANCE;
    verify_state v;
    memset(&v, 0, sizeof v);
    kf_optimizer *o = NULL;
    uint64_t rng = seed;
    kf_optimizer_desc d = with_defaults(desc);
    uint32_t states = state_count(&d);
    kf_status st = KF_OK;
    for (uint32_t i = 0; i < count && st == KF_OK; i++) {
        st = kf_tensor_create(&shapes[i], &v.hp[i]);
        if (st == KF_OK) {
            st = kf_tensor_create(&shapes[i], &v.hg[i]);
        }
        for (uint32_t s = 0; s < states && st == KF_OK; s++) {
            st = kf_tensor_create(&shapes[i], &v.hs[i][s]);
            if (st == KF_OK) {
                /* v must be positive; m and the momentum buffer of either sign */
                fill_random(v.hs[i][s], &rng, s == 1 ? 0.0f : -0.5f, 0.5f);
            }
        }
        if (st == KF_OK) {
            fill_random(v.hp[i], &rng, -1.0f, 1.0f);
            fill_random(v.hg[i], &rng, -1.0f, 1.0f);
            st = guarded(ctx, v.hp[i], &v.p[i]);
        }
        if (st == KF_OK) {
            st = guarded(ctx, v.hg[i], &v.g[i]);
        }
    }
    if (st == KF_OK) {
        st = kf_optimizer_create(ctx, desc, v.p, v.g, count, &o);
    }
    for (uint32_t i = 0; i < count && st == KF_OK; i++) {
        for (uint32_t s = 0; s < states && st == KF_OK; s++) {
            st = state_set(o, i, s, v.hs[i][s]);
        }
    }
    double worst = 0.0;
    for (uint32_t step = 1; step <= steps && st == KF_OK && out->message[0] == '\0'; step++) {
        if (step > 1) { /* fresh gradients for every step after the first */
            for (uint32_t i = 0; i < count && st == KF_OK; i++) {
                fill_random(v.hg[i], &rng, -1.0f, 1.0f);
                st =
                    kf_buffer_upload(v.g[i]->buffer, 0, v.hg[i]->data, kf_tensor_size(v.hg[i]) * 4);
            }
        }
        if (st == KF_OK) {
            st = kf_optimizer_step(o);
        }
        for (uint32_t i = 0; i < count && st == KF_OK && out->message[0] == '\0'; i++) {
            st = kf_optimizer_spec_step(desc, step, v.hp[i], v.hg[i], v.hs[i][0], v.hs[i][1]);
            for (uint32_t s = 0; s <= states && st == KF_OK; s++) {
                const kf_tensor *want = s == 0 ? v.hp[i] : v.hs[i][s - 1];
                kf_tensor_destroy(v.tmp);
                v.tmp = NULL;
                st = kf_tensor_create(&shapes[i], &v.tmp);
                if (st == KF_OK) {
                    st = s == 0 ? kf_gpu_tensor_to(v.p[i], v.tmp)
                                : kf_optimizer_state_get(o, i, s - 1, v.tmp);
                }
                if (st != KF_OK) {
                    break;
                }
                uint64_t at = 0;
                double e = compare(v.tmp, want, &at);
                worst = e > worst ? e : worst;
                static const char *what[2][3] = {{"param", "momentum", ""}, {"param", "m", "v"}};
                if (!(e <= OPT_TOLERANCE)) {
                    snprintf(out->message, sizeof out->message,
                             "step %u, tensor %u, %s[%llu]: gpu %.9g, spec %.9g (rel err %.3g)",
                             step, i, what[d.kind == KF_OPTIMIZER_ADAMW][s], (unsigned long long)at,
                             (double)v.tmp->data[at], (double)want->data[at], e);
                    break;
                }
            }
            if (st == KF_OK && out->message[0] == '\0' &&
                (!guard_intact(v.p[i]) || !guard_intact(v.g[i]))) {
                snprintf(out->message, sizeof out->message,
                         "step %u: the guard band after parameter or gradient %u was written", step,
                         i);
            }
        }
    }
    if (st != KF_OK && out->message[0] == '\0') {
        snprintf(out->message, sizeof out->message, "%s: %s", kf_status_str(st),
                 kf_context_last_error(ctx));
    }
    out->max_rel_error = worst;
    out->passed = st == KF_OK && out->message[0] == '\0';
    kf_optimizer_destroy(o);
    for (uint32_t i = 0; i < count; i++) {
        guarded_destroy(v.p[i]);
        guarded_destroy(v.g[i]);
        kf_tensor_destroy(v.hp[i]);
        kf_tensor_destroy(v.hg[i]);
        kf_tensor_destroy(v.hs[i][0]);
        kf_tensor_destroy(v.hs[i][1]);
    }
    kf_tensor_destroy(v.tmp);
    if (st != KF_OK) {
        return st;
    }
    return out->passed ? KF_OK : KF_ERROR_MISMATCH;
}

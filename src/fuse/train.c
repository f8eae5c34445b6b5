/* Training a graph: its params on the device, the gradient graph (kf_graph_grad) compiled as one
 * plan whose gradient outputs are bound to GPU tensors, an optimizer updating the params in
 * place, and the loss of every step appended to a history buffer on the device by a one-
 * invocation kernel. One step is one submission (plan, update, loss record); only the batch goes
 * up, and the losses come down when asked for (kf_trainer_losses), many steps at a time. */
#include "fuse/plan_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HISTORY 1024u /* losses kept on the device between downloads */

struct kf_trainer {
    kf_context *ctx;
    kf_plan *plan; /* forward + backward: outputs loss and the gradients */
    kf_plan *eval; /* forward only: loss and, for cross_entropy, the logits */
    char loss_name[KF_NAME_MAX];
    bool has_logits;
    kf_shape logits_shape;
    char labels_name[KF_NAME_MAX]; /* the cross_entropy's labels, when an input */
    uint32_t param_count;
    char (*names)[KF_NAME_MAX];
    kf_gpu_tensor **params;
    kf_gpu_tensor **grads;
    kf_gpu_tensor *loss;
    kf_optimizer *opt;
    kf_buffer *history; /* [count, loss_0, loss_1, ...] */
    kf_dispatch record;
    kf_buffer *record_buffers[2];
    uint32_t pending; /* losses on the device not yet downloaded */
    float *losses;    /* every loss downloaded so far */
    uint64_t loss_count, loss_capacity;
};

static kf_status fail(kf_context *ctx, kf_status st, const char *fmt, const char *a,
                      const char *b) {
    kf__context_set_error(ctx, st, fmt, a, b);
    return st;
}

void kf_trainer_destroy(kf_trainer *t) {
    if (!t) {
        return;
    }
    kf_optimizer_destroy(t->opt);
    kf_plan_destroy(t->plan);
    kf_plan_destroy(t->eval);
    for (uint32_t i = 0; i < t->param_count; i++) {
        kf_gpu_tensor_destroy(t->params ? t->params[i] : NULL);
        kf_gpu_tensor_destroy(t->grads ? t->grads[i] : NULL);
    }
    kf_gpu_tensor_destroy(t->loss);
    kf_buffer_destroy(t->history);
    free(t->params);
    free(t->grads);
    free(t->names);
    free(t->losses);
    free(t);
}

/* The one-invocation kernel appending loss[0] to the history: h[1 + h[0]] = loss, h[0] += 1. */
static kf_status make_record(kf_trainer *t) {
    kf_kernel_desc kd = {.name = "record_loss", .workgroup_size = {1, 1, 1}};
    kf_kernel *k = kf_kernel_create(&kd);
    if (!k) {
        return KF_ERROR_OUT_OF_MEMORY;
    }
    kf_type f32 = kf_type_scalar(KF_SCALAR_F32), u32 = kf_type_scalar(KF_SCALAR_U32);
    kf_binding loss = kf_kernel_storage(k, "loss", f32, KF_ACCESS_READ);
    kf_binding h = kf_kernel_storage(k, "history", f32, KF_ACCESS_READ_WRITE);
    kf_val zero = kf_lit_u32(k, 0);
    kf_val c = kf_let(k, "c", kf_cast(k, u32, kf_load(k, h, zero)));
    kf_if(k, kf_binary(k, KF_OP_LT, c, kf_lit_u32(k, HISTORY)));
    kf_store(k, h, kf_add(k, c, kf_lit_u32(k, 1)), kf_load(k, loss, zero));
    kf_store(k, h, zero, kf_cast(k, f32, kf_add(k, c, kf_lit_u32(k, 1))));
    kf_end(k);
    t->record_buffers[0] = t->loss->buffer;
    t->record_buffers[1] = t->history;
    kf_kernel_launch launch = {
        .buffers = t->record_buffers, .buffer_count = 2, .groups = {1, 1, 1}};
    kf_status st = kf_kernel_status(k);
    if (st == KF_OK) {
        st = kf_kernel_dispatch(t->ctx, k, &launch, &t->record);
    }
    kf_kernel_destroy(k);
    return st;
}

static uint32_t loss_node(const kf_graph *g, const char *name) {
    for (uint32_t o = 0; o < g->output_count; o++) {
        if (!strcmp(g->outputs[o].name, name)) {
            return g->outputs[o].node;
        }
    }
    return 0;
}

kf_status kf_trainer_create(kf_context *ctx, const kf_graph *g, const kf_trainer_desc *desc,
                            kf_trainer **out) {
    if (out) {
        *out = NULL;
    }
    if (!out || !ctx || !g || !desc) {
        kf__context_set_error(ctx, KF_ERROR_INVALID_ARGUMENT, "kf_trainer_create: %s is NULL",
                              !out ? "out"
                              : !g ? "g"
                                   : "desc");
        return KF_ERROR_INVALID_ARGUMENT;
    }
    if (g->status != KF_OK) {
        return fail(ctx, g->status, "trainer: the graph has an error: %s%s", g->error, "");
    }
    const char *loss_name = desc->loss ? desc->loss : "loss";
    uint32_t loss = loss_node(g, loss_name);
    if (!loss) {
        return fail(ctx, KF_ERROR_INVALID_ARGUMENT,
                    "trainer: the graph has no output named '%s' (the scalar to minimise)%s",
                    loss_name, "");
    }
    kf_trainer *t = calloc(1, sizeof *t);
    kf_graph *train = kf__graph_copy(g), *eval = kf__graph_copy(g);
    uint32_t n = 0;
    for (uint32_t id = 1; id < g->node_count; id++) {
        n += g->nodes[id].kind == KF__NODE_INPUT && g->nodes[id].param;
    }
    kf_node *wrt = calloc(n ? n : 1, sizeof *wrt), *dw = calloc(n ? n : 1, sizeof *dw);
    kf_status st = KF_OK;
    if (!t || !train || !eval || !wrt || !dw) {
        st = KF_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    t->ctx = ctx;
    t->param_count = n;
    snprintf(t->loss_name, sizeof t->loss_name, "%s", loss_name);
    if (n == 0) {
        st = fail(ctx, KF_ERROR_INVALID_ARGUMENT,
                  "trainer: the graph declares no param (param w: f32[64, 32])%s%s", "", "");
        goto done;
    }
    t->names = calloc(n, sizeof *t->names);
    t->params = calloc(n, sizeof *t->params);
    t->grads = calloc(n, sizeof *t->grads);
    if (!t->names || !t->params || !t->grads) {
        st = KF_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    for (uint32_t id = 1, i = 0; id < g->node_count; id++) {
        if (g->nodes[id].kind == KF__NODE_INPUT && g->nodes[id].param) {
            snprintf(t->names[i], sizeof t->names[i], "%s", g->nodes[id].name);
            wrt[i++] = (kf_node){id};
        }
    }
    st = kf_graph_grad(train, (kf_node){loss}, wrt, n, dw);
    for (uint32_t i = 0; i < n && st == KF_OK; i++) {
        char name[KF_NAME_MAX + 8];
        snprintf(name, sizeof name, "kf_grad_%s", t->names[i]);
        st = kf_graph_output(train, name, dw[i]);
    }
    if (st != KF_OK) {
        st = fail(ctx, st, "trainer: %s%s", kf_graph_error(train), "");
        goto done;
    }
    /* The logits a cross_entropy loss reads, for accuracy. */
    const kf__node *ln = &g->nodes[loss];
    if (ln->kind == KF__NODE_OP && !strcmp(ln->op->name, "cross_entropy")) {
        const kf__node *lab = &g->nodes[ln->inputs[1]];
        if (lab->kind == KF__NODE_INPUT && g->nodes[ln->inputs[0]].shape.rank == 2) {
            t->has_logits = kf_graph_output(eval, "kf_logits", (kf_node){ln->inputs[0]}) == KF_OK;
            t->logits_shape = g->nodes[ln->inputs[0]].shape;
            snprintf(t->labels_name, sizeof t->labels_name, "%s", lab->name);
        }
    }
    kf_compile_options opts = {.no_fuse = desc->no_fuse, .activations = desc->activations};
    st = kf_graph_compile(ctx, train, &opts, &t->plan);
    if (st == KF_OK) {
        st = kf_graph_compile(ctx, eval, &opts, &t->eval);
    }
    kf_shape scalar = {0};
    if (st == KF_OK) {
        st = kf_gpu_tensor_create(ctx, &scalar, KF_DTYPE_F32, &t->loss);
    }
    if (st == KF_OK) {
        st = kf_plan_bind_output(t->plan, loss_name, t->loss);
    }
    for (uint32_t i = 0; i < n && st == KF_OK; i++) {
        const kf__node *pn = &g->nodes[wrt[i].id];
        kf_tensor *init = NULL;
        st = kf_tensor_create(&pn->shape, &init);
        if (st == KF_OK) {
            st = kf_param_init_fill(&pn->init, desc->seed, i, init);
        }
        if (st == KF_OK) {
            st = kf_gpu_tensor_from(ctx, init, KF_DTYPE_F32, &t->params[i]);
        }
        kf_tensor_destroy(init);
        if (st == KF_OK) {
            st = kf_gpu_tensor_create(ctx, &pn->shape, KF_DTYPE_F32, &t->grads[i]);
        }
        char name[KF_NAME_MAX + 8];
        snprintf(name, sizeof name, "kf_grad_%s", t->names[i]);
        if (st == KF_OK) {
            st = kf_plan_bind_input(t->plan, t->names[i], t->params[i]);
        }
        if (st == KF_OK) {
            st = kf_plan_bind_input(t->eval, t->names[i], t->params[i]);
        }
        if (st == KF_OK) {
            st = kf_plan_bind_output(t->plan, name, t->grads[i]);
        }
    }
    if (st == KF_OK) {
        st = kf_optimizer_create(ctx, &desc->optimizer, t->params, t->grads, n, &t->opt);
    }
    if (st == KF_OK) {
        st = kf_buffer_create(ctx, 4ull * (HISTORY + 1), &t->history);
    }
    if (st == KF_OK) {
        st = make_record(t);
    }
done:
    free(wrt);
    free(dw);
    kf_graph_destroy(train);
    kf_graph_destroy(eval);
    if (st != KF_OK) {
        kf_trainer_destroy(t);
        return st;
    }
    *out = t;
    return KF_OK;
}

uint32_t kf_trainer_param_count(const kf_trainer *t) {
    return t ? t->param_count : 0;
}

const char *kf_trainer_param_name(const kf_trainer *t, uint32_t index) {
    return t && index < t->param_count ? t->names[index] : NULL;
}

static int32_t param_index(const kf_trainer *t, const char *name) {
    for (uint32_t i = 0; name && i < t->param_count; i++) {
        if (!strcmp(t->names[i], name)) {
            return (int32_t)i;
        }
    }
    return -1;
}

static kf_status param_of(const kf_trainer *t, const char *name, const kf_shape *shape,
                          kf_gpu_tensor **out) {
    int32_t i = param_index(t, name);
    if (i < 0) {
        return fail(t->ctx, KF_ERROR_INVALID_ARGUMENT, "trainer: no param named '%s'%s",
                    name ? name : "(null)", "");
    }
    if (!kf_shape_eq(shape, &t->params[i]->shape)) {
        char a[64], b[64];
        kf_shape_str(shape, a, sizeof a);
        kf_shape_str(&t->params[i]->shape, b, sizeof b);
        kf__context_set_error(t->ctx, KF_ERROR_SHAPE, "trainer: param %s is %s, not %s", name, b,
                              a);
        return KF_ERROR_SHAPE;
    }
    *out = t->params[i];
    return KF_OK;
}

kf_status kf_trainer_set_param(kf_trainer *t, const char *name, const kf_tensor *value) {
    if (!t || !value) {
        if (t) {
            kf__context_set_error(t->ctx, KF_ERROR_INVALID_ARGUMENT,
                                  "kf_trainer_set_param: param %s: value is NULL",
                                  name ? name : "(null)");
        }
        return KF_ERROR_INVALID_ARGUMENT;
    }
    kf_gpu_tensor *p;
    kf_status st = param_of(t, name, &value->shape, &p);
    return st == KF_OK ? kf_buffer_upload(p->buffer, 0, value->data, kf_tensor_size(value) * 4)
                       : st;
}

kf_status kf_trainer_get_param(const kf_trainer *t, const char *name, kf_tensor *out) {
    if (!t || !out) {
        if (t) {
            kf__context_set_error(t->ctx, KF_ERROR_INVALID_ARGUMENT,
                                  "kf_trainer_get_param: param %s: out is NULL",
                                  name ? name : "(null)");
        }
        return KF_ERROR_INVALID_ARGUMENT;
    }
    kf_gpu_tensor *p;
    kf_status st = param_of(t, name, &out->shape, &p);
    return st == KF_OK ? kf_gpu_tensor_to(p, out) : st;
}

static kf_status set_batch(kf_plan *p, const char *const *names, const kf_tensor *const *batch,
                           uint32_t count) {
    for (uint32_t i = 0; i < count; i++) {
        kf_status st = kf_plan_set_input(p, names[i], batch[i]);
        if (st != KF_OK) {
            return st;
        }
    }
    return KF_OK;
}

/* Appends the losses recorded on the device to t->losses and empties the history. */
static kf_status drain(kf_trainer *t) {
    if (t->pending == 0) {
        return KF_OK;
    }
    float *h = malloc(4ull * (t->pending + 1));
    if (!h) {
        return KF_ERROR_OUT_OF_MEMORY;
    }
    if (t->loss_count + t->pending > t->loss_capacity) {
        uint64_t cap = t->loss_capacity ? t->loss_capacity * 2 : 4096;
        while (cap < t->loss_count + t->pending) {
            cap *= 2;
        }
        float *bigger = realloc(t->losses, sizeof *bigger * cap);
        if (!bigger) {
            free(h);
            return KF_ERROR_OUT_OF_MEMORY;
        }
        t->losses = bigger;
        t->loss_capacity = cap;
    }
    kf_status st = kf_buffer_download(t->history, 0, h, 4ull * (t->pending + 1));
    if (st == KF_OK && h[0] != (float)t->pending) {
        kf__context_set_error(t->ctx, KF_ERROR_INTERNAL,
                              "trainer: the device recorded %g losses, %u steps were run",
                              (double)h[0], t->pending);
        st = KF_ERROR_INTERNAL;
    }
    if (st == KF_OK) {
        memcpy(t->losses + t->loss_count, h + 1, 4ull * t->pending);
        t->loss_count += t->pending;
        t->pending = 0;
        float zero = 0.0f;
        st = kf_buffer_upload(t->history, 0, &zero, 4);
    }
    free(h);
    return st;
}

kf_status kf_trainer_step(kf_trainer *t, const char *const *names, const kf_tensor *const *batch,
                          uint32_t count) {
    if (!t || (count && (!names || !batch))) {
        if (t) {
            kf__context_set_error(t->ctx, KF_ERROR_INVALID_ARGUMENT, "kf_trainer_step: %s is NULL",
                                  !names ? "names" : "batch");
        }
        return KF_ERROR_INVALID_ARGUMENT;
    }
    kf_status st = t->pending == HISTORY ? drain(t) : KF_OK;
    if (st == KF_OK) {
        st = set_batch(t->plan, names, batch, count);
    }
    const kf_dispatch *pd = NULL, *od = NULL;
    uint32_t pn = 0, on = 0;
    if (st == KF_OK) {
        st = kf_plan_dispatches(t->plan, &pd, &pn);
    }
    kf_dispatch *all = NULL;
    if (st == KF_OK) {
        all = calloc(pn + kf_optimizer_dispatch_count(t->opt) + 1, sizeof *all);
        st = all ? kf_optimizer_record(t->opt, &od, &on) : KF_ERROR_OUT_OF_MEMORY;
    }
    if (st == KF_OK) {
        memcpy(all, pd, sizeof *all * pn);
        memcpy(all + pn, od, sizeof *all * on);
        all[pn + on] = t->record;
        st = kf_context_run(t->ctx, all, pn + on + 1);
        if (st == KF_OK) {
            t->pending++;
        }
    }
    free(all);
    return st;
}

kf_status kf_trainer_losses(kf_trainer *t, const float **losses, uint64_t *count) {
    if (!t || !losses || !count) {
        if (t) {
            kf__context_set_error(t->ctx, KF_ERROR_INVALID_ARGUMENT,
                                  "kf_trainer_losses: %s is NULL", !losses ? "losses" : "count");
        }
        return KF_ERROR_INVALID_ARGUMENT;
    }
    kf_status st = drain(t);
    *losses = t->losses;
    *count = t->loss_count;
    return st;
}

kf_status kf_trainer_evaluate(kf_trainer *t, const char *const *names,
                              const kf_tensor *const *batch, uint32_t count, uint32_t rows,
                              float *loss, uint32_t *correct) {
    if (!t || (count && (!names || !batch))) {
        if (t) {
            kf__context_set_error(t->ctx, KF_ERROR_INVALID_ARGUMENT,
                                  "kf_trainer_evaluate: %s is NULL", !names ? "names" : "batch");
        }
        return KF_ERROR_INVALID_ARGUMENT;
    }
    const kf_tensor *labels = NULL;
    for (uint32_t i = 0; t->has_logits && i < count; i++) {
        labels = !strcmp(names[i], t->labels_name) ? batch[i] : labels;
    }
    if (correct && !labels) {
        kf__context_set_error(t->ctx, KF_ERROR_INVALID_ARGUMENT,
                              "trainer: accuracy needs a cross_entropy loss whose labels are an "
                              "input given in the batch");
        return KF_ERROR_INVALID_ARGUMENT;
    }
    kf_status st = set_batch(t->eval, names, batch, count);
    if (st == KF_OK) {
        st = kf_plan_run(t->eval);
    }
    kf_tensor *l = NULL, *logits = NULL;
    kf_shape scalar = {0};
    if (st == KF_OK && loss) {
        st = kf_tensor_create(&scalar, &l);
        if (st == KF_OK) {
            st = kf_plan_get_output(t->eval, t->loss_name, l);
        }
        if (st == KF_OK) {
            *loss = l->data[0];
        }
    }
    if (st == KF_OK && correct) {
        st = kf_tensor_create(&t->logits_shape, &logits);
        if (st == KF_OK) {
            st = kf_plan_get_output(t->eval, "kf_logits", logits);
        }
        uint32_t classes = t->logits_shape.dims[t->logits_shape.rank - 1];
        uint64_t n = kf_tensor_size(logits) / classes;
        *correct = 0;
        for (uint64_t r = 0; st == KF_OK && r < n && r < rows; r++) {
            const float *row = logits->data + r * classes;
            uint32_t best = 0;
            for (uint32_t c = 1; c < classes; c++) {
                best = row[c] > row[best] ? c : best;
            }
            *correct += (float)best == labels->data[r];
        }
    }
    kf_tensor_destroy(l);
    kf_tensor_destroy(logits);
    return st;
}

const kf_plan *kf_trainer_plan(const kf_trainer *t) {
    return t ? t->plan : NULL;
}

kf_optimizer *kf_trainer_optimizer(const kf_trainer *t) {
    return t ? t->opt : NULL;
}

uint32_t kf_trainer_dispatches_per_step(const kf_trainer *t) {
    return t ? t->plan->dispatch_count + kf_optimizer_dispatch_count(t->opt) + 1 : 0;
}

bool kf_trainer_has_accuracy(const kf_trainer *t) {
    return t && t->has_logits;
}

/* Proof of a plan: the fused GPU run against the unfused composition of the CPU specifications. */
#include "fuse/plan_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops_internal.h"
#include "util/half.h"

/* The range random data for input `id` is drawn from: the narrowest range its consumers ask for
 * (log, sqrt and reciprocal want positive numbers). */
static void input_range(const kf_graph *g, uint32_t id, float *lo, float *hi) {
    *lo = -1.0f;
    *hi = 1.0f;
    for (uint32_t c = 1; c < g->node_count; c++) {
        const kf__node *n = &g->nodes[c];
        for (uint32_t i = 0; n->kind == KF__NODE_OP && i < n->input_count; i++) {
            if (n->inputs[i] != id || n->op->input_lo >= n->op->input_hi) {
                continue;
            }
            if (n->op->input_lo > *lo) {
                *lo = n->op->input_lo;
            }
            if (n->op->input_hi < *hi) {
                *hi = n->op->input_hi;
            }
        }
    }
    if (*lo >= *hi) {
        *hi = *lo + 1.0f;
    }
}

/* Index inputs (class labels) get whole numbers below the class count: the last dimension of
 * the operator's first input. */
static bool label_input(const kf_graph *g, uint32_t id, uint32_t *classes) {
    for (uint32_t c = 1; c < g->node_count; c++) {
        const kf__node *n = &g->nodes[c];
        for (uint32_t i = 0; n->kind == KF__NODE_OP && i < n->input_count; i++) {
            if (n->inputs[i] == id && (n->op->index_inputs & (1u << i))) {
                const kf_shape *first = &g->nodes[n->inputs[0]].shape;
                *classes = first->rank ? first->dims[first->rank - 1] : 1;
                return true;
            }
        }
    }
    return false;
}

static double op_tolerance(const kf__node *n) {
    return n->dtype == KF_DTYPE_F16 ? n->op->tolerance_f16 : n->op->tolerance_f32;
}

/* The tolerance of an output: four times the sum of the tolerances of the ops it depends on.
 * Relative errors of well-conditioned steps add up to first order; the factor covers ops meeting
 * inputs outside the range their own tolerance was measured on (a softmax fed by a gelu chain
 * measured 2.2x its table tolerance on lavapipe). A wrong kernel misses by orders of magnitude. */
static double cone_tolerance(const kf_graph *g, uint32_t node) {
    bool *seen = calloc(g->node_count, sizeof *seen);
    uint32_t *stack = malloc(sizeof *stack * g->node_count);
    double tol = 0.0;
    if (!seen || !stack) {
        free(seen);
        free(stack);
        return 0.0;
    }
    uint32_t top = 0;
    stack[top++] = node;
    seen[node] = true;
    while (top) {
        const kf__node *n = &g->nodes[stack[--top]];
        if (n->kind != KF__NODE_OP) {
            continue;
        }
        tol += op_tolerance(n);
        for (uint32_t i = 0; i < n->input_count; i++) {
            if (!seen[n->inputs[i]]) {
                seen[n->inputs[i]] = true;
                stack[top++] = n->inputs[i];
            }
        }
    }
    free(seen);
    free(stack);
    return 4.0 * tol;
}

static void round_to_half(kf_tensor *t) {
    uint64_t n = kf_tensor_size(t);
    for (uint64_t i = 0; i < n; i++) {
        t->data[i] = kf__half_to_float(kf__half_from_float(t->data[i]));
    }
}

/* Evaluates every operator's spec_forward in graph order into values[] (inputs and scalars must
 * be there). With a nonzero `shake`, each op's output is then multiplied by (1 + u * tolerance),
 * u uniform in [-1, 1]: the spec's own sensitivity to errors of the size each op may make. */
static kf_status run_specs(const kf_graph *g, kf_tensor **values, uint64_t shake) {
    for (uint32_t id = 1; id < g->node_count; id++) {
        const kf__node *n = &g->nodes[id];
        if (n->kind != KF__NODE_OP) {
            continue;
        }
        kf_status st = kf_tensor_create(&n->shape, &values[id]);
        if (st != KF_OK) {
            return st;
        }
        const kf_tensor *in[KF_NODE_MAX_INPUTS];
        for (uint32_t i = 0; i < n->input_count; i++) {
            in[i] = values[n->inputs[i]];
        }
        st = n->op->spec_forward(in, &n->params, values[id]);
        if (st != KF_OK) {
            return st;
        }
        uint64_t count = kf_tensor_size(values[id]);
        if (shake) {
            kf_tensor *noise = NULL;
            st = kf_tensor_create(&n->shape, &noise);
            if (st != KF_OK) {
                return st;
            }
            kf_tensor_fill_random(noise, shake + id, -1.0f, 1.0f);
            double tol = op_tolerance(n);
            for (uint64_t i = 0; i < count; i++) {
                values[id]->data[i] *= (float)(1.0 + tol * noise->data[i]);
            }
            kf_tensor_destroy(noise);
        }
        if (n->dtype == KF_DTYPE_F16) {
            round_to_half(values[id]); /* the GPU stores every f16 intermediate */
        }
    }
    return KF_OK;
}

kf_status kf__plan_random_input(const kf_plan *p, uint32_t id, uint64_t seed, kf_tensor **out) {
    const kf_graph *g = p->graph;
    const kf__node *n = &g->nodes[id];
    kf_status st = kf_tensor_create(&n->shape, out);
    if (st != KF_OK) {
        return st;
    }
    kf_tensor *t = *out;
    uint32_t classes = 0;
    uint64_t input_seed = seed * 0x9e3779b97f4a7c15ULL + id;
    if (label_input(g, id, &classes)) {
        kf_tensor_fill_random(t, input_seed, 0.0f, (float)classes);
        for (uint64_t i = 0; i < kf_tensor_size(t); i++) {
            float v = (float)(int)t->data[i];
            t->data[i] = v >= (float)classes ? (float)classes - 1.0f : v;
        }
    } else {
        float lo, hi;
        input_range(g, id, &lo, &hi);
        kf_tensor_fill_random(t, input_seed, lo, hi);
    }
    if (n->dtype == KF_DTYPE_F16) {
        round_to_half(t);
    }
    return KF_OK;
}

kf_status kf_plan_verify(kf_plan *p, uint64_t seed, kf_plan_report *out) {
    return kf__plan_check(p, NULL, seed, out);
}

kf_status kf__plan_check(kf_plan *p, const kf_tensor *const *given, uint64_t seed,
                         kf_plan_report *out) {
    if (!p || !out) {
        if (p) {
            kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT, "plan check: report is NULL");
        }
        return KF_ERROR_INVALID_ARGUMENT;
    }
    memset(out, 0, sizeof *out);
    const kf_graph *g = p->graph;
    kf_tensor **values = calloc(g->node_count, sizeof *values);
    kf_tensor **shaken = calloc(g->node_count, sizeof *shaken);
    if (!values || !shaken) {
        free(values);
        free(shaken);
        return KF_ERROR_OUT_OF_MEMORY;
    }
    kf_status st = KF_OK;
    /* Fresh inputs, uploaded to the plan and kept for the CPU. */
    for (uint32_t id = 1; id < g->node_count && st == KF_OK; id++) {
        const kf__node *n = &g->nodes[id];
        if (n->kind == KF__NODE_INPUT) {
            if (given && given[id]) {
                st = kf_tensor_create(&n->shape, &values[id]);
                if (st == KF_OK) {
                    memcpy(values[id]->data, given[id]->data,
                           kf_tensor_size(values[id]) * sizeof(float));
                    if (n->dtype == KF_DTYPE_F16) {
                        round_to_half(values[id]);
                    }
                    st = kf__match_device_subnormals(p->ctx, n->dtype, values[id]);
                }
            } else {
                st = kf__plan_random_input(p, id, seed, &values[id]);
            }
            if (st != KF_OK) {
                break;
            }
            st = kf__plan_upload(p, id, values[id]->data);
            if (st == KF_OK) {
                p->inputs_set[id] = true;
            }
        } else if (n->kind == KF__NODE_SCALAR) {
            st = kf_tensor_constant(&n->shape, n->scalar, &values[id]);
        }
    }
    /* Poison every written buffer so an element the plan forgets shows up as NaN. */
    for (uint32_t id = 1; id < g->node_count && st == KF_OK; id++) {
        if (g->nodes[id].kind == KF__NODE_OP && p->buffers[id]) {
            st = kf_buffer_fill_u32(p->buffers[id], 0x7fc07fc0u);
        }
    }
    if (st == KF_OK) {
        st = kf_plan_run(p);
    }
    /* The unfused specification, one operator at a time; then again with every intermediate
     * nudged by its op's tolerance, to see how much this graph amplifies such errors. */
    if (st == KF_OK) {
        st = run_specs(g, values, 0);
    }
    if (st == KF_OK) {
        for (uint32_t id = 1; id < g->node_count; id++) {
            shaken[id] = g->nodes[id].kind == KF__NODE_OP ? NULL : values[id];
        }
        st = run_specs(g, shaken, seed ^ 0x5bd1e995u);
    }
    out->passed = st == KF_OK;
    for (uint32_t o = 0; o < g->output_count && st == KF_OK; o++) {
        uint32_t id = g->outputs[o].node;
        const kf__node *n = &g->nodes[id];
        kf_tensor *gpu = NULL;
        st = kf_tensor_create(&n->shape, &gpu);
        if (st == KF_OK) {
            st = kf__plan_download(p, id, gpu->data);
        }
        if (st == KF_OK && o < KF_PLAN_MAX_REPORTED) {
            /* The measure operator verification uses: relative to the larger of the value and
             * 1% of the output's rms, so values that cancel to nearly zero don't dominate. */
            uint64_t count = kf_tensor_size(gpu);
            double floor = kf__verify_floor(values[id]->data, count);
            double err = kf_max_rel_error(gpu->data, values[id]->data, count, floor);
            double amplified = kf_max_rel_error(shaken[id]->data, values[id]->data, count, floor);
            double tol = cone_tolerance(g, id);
            tol = tol > 2.0 * amplified ? tol : 2.0 * amplified;
            snprintf(out->outputs[o].name, sizeof out->outputs[o].name, "%s", g->outputs[o].name);
            out->outputs[o].max_rel_error = err;
            out->outputs[o].tolerance = tol;
            out->outputs[o].passed = err <= tol;
            out->passed &= err <= tol;
            out->output_count = o + 1;
        }
        kf_tensor_destroy(gpu);
    }
    for (uint32_t id = 0; id < g->node_count; id++) {
        if (shaken[id] != values[id]) {
            kf_tensor_destroy(shaken[id]);
        }
        kf_tensor_destroy(values[id]);
    }
    free(values);
    free(shaken);
    if (st != KF_OK) {
        out->passed = false;
        return st;
    }
    return out->passed ? KF_OK : KF_ERROR_MISMATCH;
}

static uint32_t input_node(const kf_plan *p, const char *name) {
    const kf_graph *g = p->graph;
    for (uint32_t id = 1; name && id < g->node_count; id++) {
        if (g->nodes[id].kind == KF__NODE_INPUT && !strcmp(g->nodes[id].name, name)) {
            return id;
        }
    }
    return 0;
}

kf_status kf_plan_random_input(const kf_plan *p, const char *name, uint64_t seed, kf_tensor **out) {
    if (!p || !out) {
        if (p) {
            kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT,
                                  "kf_plan_random_input: out is NULL");
        }
        return KF_ERROR_INVALID_ARGUMENT;
    }
    *out = NULL;
    uint32_t id = input_node(p, name);
    if (!id) {
        kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT, "plan has no input named '%s'",
                              name ? name : "(null)");
        return KF_ERROR_INVALID_ARGUMENT;
    }
    return kf__plan_random_input(p, id, seed, out);
}

kf_status kf_plan_check(kf_plan *p, const char *const *names, const kf_tensor *const *values,
                        uint32_t count, uint64_t seed, kf_plan_report *out) {
    if (!p || !out || (count && (!names || !values))) {
        if (p) {
            kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT, "kf_plan_check: %s is NULL",
                                  !out     ? "out"
                                  : !names ? "names"
                                           : "values");
        }
        return KF_ERROR_INVALID_ARGUMENT;
    }
    const kf_tensor **given = calloc(p->graph->node_count, sizeof *given);
    if (!given) {
        return KF_ERROR_OUT_OF_MEMORY;
    }
    for (uint32_t i = 0; i < count; i++) {
        uint32_t id = input_node(p, names[i]);
        const kf__node *n = id ? &p->graph->nodes[id] : NULL;
        if (!n || !values[i] || !kf_shape_eq(&n->shape, &values[i]->shape)) {
            kf__context_set_error(p->ctx, KF_ERROR_INVALID_ARGUMENT,
                                  "check: input '%s' is unknown or its shape differs",
                                  names[i] ? names[i] : "(null)");
            free(given);
            return KF_ERROR_INVALID_ARGUMENT;
        }
        given[id] = values[i];
    }
    kf_status st = kf__plan_check(p, given, seed, out);
    free(given);
    return st;
}

/* The attention benchmarks' shared parts (attention_common.h). */
#include "attention_common.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/half.h"

bool attn_args_parse(int argc, char **argv, unsigned flags, const char *usage, attn_args *a) {
    *a = (attn_args){.ts = {1024, 4096},
                     .ds = {64, 128},
                     .h = 16,
                     .repeat = 10,
                     .dts = {KF_DTYPE_F16, KF_DTYPE_F32},
                     .causal = true,
                     .impl = "kfuse"};
    bool forward = (flags & ATTN_ARGS_FORWARD) != 0;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        unsigned n = 0;
        bool num = v && sscanf(v, "%u", &n) == 1 && n > 0;
        if (!strcmp(o, "--T") && num && a->nt < 8) {
            a->ts[a->nt++] = n, i++;
        } else if (!strcmp(o, "--D") && num && a->nd < 8) {
            a->ds[a->nd++] = n, i++;
        } else if (!strcmp(o, "--B") && num) {
            a->b = n, i++;
        } else if (!strcmp(o, "--H") && num) {
            a->h = n, i++;
        } else if (!strcmp(o, "--repeat") && num) {
            a->repeat = n, i++;
        } else if (!strcmp(o, "--dtype") && v && (!strcmp(v, "f16") || !strcmp(v, "f32")) &&
                   a->ndt < 2) {
            a->dts[a->ndt++] = v[1] == '1' ? KF_DTYPE_F16 : KF_DTYPE_F32, i++;
        } else if (!strcmp(o, "--no-causal")) {
            a->causal = false;
        } else if (!strcmp(o, "--json")) {
            a->json = true;
        } else if (forward && !strcmp(o, "--explain")) {
            a->explain = true;
        } else if (forward && !strcmp(o, "--fwd-only")) {
            a->fwd_only = true;
        } else if (forward && !strcmp(o, "--impl") && v) {
            a->impl = v, i++;
        } else {
            fprintf(stderr, "%s", usage);
            return false;
        }
    }
    a->nt = a->nt ? a->nt : 2;
    a->nd = a->nd ? a->nd : 2;
    a->ndt = a->ndt ? a->ndt : 2;
    return true;
}

void attn_inputs_destroy(kf_tensor *in[4]) {
    for (int i = 0; i < 4; i++) {
        kf_tensor_destroy(in[i]);
        in[i] = NULL;
    }
}

bool attn_inputs(const attn_case *c, kf_tensor *in[4]) {
    kf_shape s = {4, {c->b, c->h, c->t, c->d}};
    for (int i = 0; i < 4; i++) {
        in[i] = NULL;
    }
    for (int i = 0; i < 4; i++) {
        if (kf_tensor_create(&s, &in[i]) != KF_OK) {
            attn_inputs_destroy(in);
            return false;
        }
        kf_tensor_fill_random(in[i], 1234u + (uint64_t)i, -1.0f, 1.0f);
        for (uint64_t e = 0; c->dtype == KF_DTYPE_F16 && e < kf_tensor_size(in[i]); e++) {
            in[i]->data[e] = kf__half_to_float(kf__half_from_float(in[i]->data[e]));
        }
    }
    return true;
}

kf_plan *attn_compile(kf_context *ctx, const char *text, uint32_t max_bindings) {
    kf_graph *g = NULL;
    kf_spec_error err;
    if (kf_spec_parse(text, strlen(text), &g, &err) != KF_OK) {
        fprintf(stderr, "spec: %s\n", err.message);
        return NULL;
    }
    kf_plan *p = NULL;
    kf_compile_options o = {.max_storage_buffers = max_bindings};
    if (kf_graph_compile(ctx, g, &o, &p) != KF_OK) {
        fprintf(stderr, "compile: %s\n", kf_context_last_error(ctx));
    }
    kf_graph_destroy(g);
    return p;
}

bool attn_time(kf_plan *const *plans, uint32_t count, kf_tensor *const *in,
               const char *const *names, uint32_t inputs, const uint32_t *skip, uint32_t repeat,
               kf_timing *out) {
    bool ok = true;
    for (uint32_t p = 0; p < count; p++) {
        ok = ok && plans[p];
        for (uint32_t i = 0; ok && i < inputs; i++) {
            ok = (skip && (skip[p] >> i & 1u)) ||
                 kf_plan_set_input(plans[p], names[i], in[i]) == KF_OK;
        }
    }
    for (uint32_t p = 0; ok && p < count; p++) {
        out[p] = (kf_timing){0};
        ok = kf_plan_time(plans[p], repeat, &out[p]) == KF_OK;
    }
    return ok;
}

double attn_row_error(const float *got, const double *ref, uint32_t d, double floor) {
    double ss = 0, worst = 0;
    for (uint32_t e = 0; e < d; e++) {
        ss += ref[e] * ref[e];
    }
    floor = floor > 0 ? floor : fmax(0.01 * sqrt(ss / d), 1e-12);
    for (uint32_t e = 0; e < d; e++) {
        double err = fabs(got[e] - ref[e]) / fmax(fabs(ref[e]), floor);
        worst = err > worst || err != err ? err : worst;
    }
    return worst;
}

int attn_main(const char *name, const attn_args *a, void (*header)(const kf_adapter_info *info),
              attn_run_fn run) {
    kf_context *ctx = NULL;
    kf_context_desc desc = {0};
    if (kf_context_create(&desc, &ctx) != KF_OK) {
        fprintf(stderr, "%s: no device\n", name);
        return 1;
    }
    kf_adapter_info info;
    kf_context_adapter_info(ctx, &info);
    if (!a->json) {
        header(&info);
    }
    int rc = 0;
    for (uint32_t x = 0; x < a->ndt; x++) {
        if (a->dts[x] == KF_DTYPE_F16 && !info.has_f16) {
            fprintf(stderr, "f16: the device has no shader-f16; skipped\n");
            continue;
        }
        for (uint32_t y = 0; y < a->nt; y++) {
            for (uint32_t z = 0; z < a->nd; z++) {
                attn_case c = {a->b ? a->b : (8192 / a->ts[y] ? 8192 / a->ts[y] : 1),
                               a->h,
                               a->ts[y],
                               a->ds[z],
                               a->dts[x],
                               a->causal};
                rc |= run(ctx, &c, a) ? 0 : 1;
            }
        }
    }
    kf_context_destroy(ctx);
    return rc;
}

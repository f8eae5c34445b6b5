/* The planner's limits: element-wise chains reading any number of tensors plan and run, each
 * kernel within the storage-binding budget (the device's, or kf_compile_options'), split exactly
 * where the budget forces; and long repeated chains share their pipelines. */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "x0: f32[SHAPE] ... y = x0 |> add(x1) |> ... |> add(xN)" */
static char *add_chain(uint32_t adds, const char *shape) {
    size_t size = (size_t)(adds + 1) * 48 + 64;
    char *text = malloc(size);
    if (!text) {
        return NULL;
    }
    size_t used = 0;
    for (uint32_t i = 0; i <= adds; i++) {
        used += (size_t)snprintf(text + used, size - used, "x%u: f32[%s]\n", i, shape);
    }
    used += (size_t)snprintf(text + used, size - used, "y = x0");
    for (uint32_t i = 1; i <= adds; i++) {
        used += (size_t)snprintf(text + used, size - used, " |> add(x%u)", i);
    }
    snprintf(text + used, size - used, "\n");
    return text;
}

static kf_graph *parse_text(const char *text) {
    kf_graph *g = NULL;
    kf_spec_error err = {0};
    if (kf_spec_parse(text, strlen(text), &g, &err) != KF_OK) {
        kt_fail(__FILE__, __LINE__, "parse: %u:%u: %s", err.line, err.column, err.message);
        return NULL;
    }
    return g;
}

/* Compiles g within `budget` bindings (0: the device's) and unfused, checks both against the CPU
 * specs with one seed and against each other, that no kernel has more bindings than the budget,
 * and returns the fused dispatch count (0 on failure, reported). */
static uint32_t fused_dispatches(kf_context *ctx, const kf_graph *g, uint32_t budget) {
    kf_compile_options fuse = {.max_storage_buffers = budget};
    kf_compile_options no_fuse = {.no_fuse = true};
    kf_plan *pf = NULL, *pu = NULL;
    kf_status sf = kf_graph_compile(ctx, g, &fuse, &pf);
    if (sf != KF_OK) {
        kt_fail(__FILE__, __LINE__, "compile (budget %u): %s: %s", budget, kf_status_str(sf),
                kf_context_last_error(ctx));
        return 0;
    }
    kf_status su = kf_graph_compile(ctx, g, &no_fuse, &pu);
    uint64_t seed = kt_rand_u64();
    kf_plan_report rf, ru;
    sf = kf_plan_verify(pf, seed, &rf);
    su = su == KF_OK ? kf_plan_verify(pu, seed, &ru) : su;
    uint32_t dispatches = 0;
    bool ok = sf == KF_OK && su == KF_OK;
    if (!ok) {
        kt_fail(__FILE__, __LINE__, "verify fused: %s, unfused: %s", kf_status_str(sf),
                kf_status_str(su));
    }
    for (uint32_t o = 0; ok && o < kf_graph_output_count(g); o++) {
        const char *name;
        kf_shape shape;
        kf_graph_output_info(g, o, &name, &shape, NULL);
        kf_tensor *a = NULL, *b = NULL;
        kf_tensor_create(&shape, &a);
        kf_tensor_create(&shape, &b);
        ok = a && b && kf_plan_get_output(pf, name, a) == KF_OK &&
             kf_plan_get_output(pu, name, b) == KF_OK;
        double rms = 0.0;
        uint64_t count = ok ? kf_tensor_size(b) : 0;
        for (uint64_t i = 0; i < count; i++) {
            rms += (double)b->data[i] * b->data[i];
        }
        rms = count ? sqrt(rms / (double)count) : 0.0;
        double err = ok ? kf_max_rel_error(a->data, b->data, count, 0.01 * rms) : INFINITY;
        if (!(err <= rf.outputs[o].tolerance)) {
            kt_fail(__FILE__, __LINE__, "output %s: fused vs unfused differ by %.3g", name, err);
            ok = false;
        }
        kf_tensor_destroy(a);
        kf_tensor_destroy(b);
    }
    /* Every kernel within the budget: the explain lists each dispatch's reads. */
    char *text = ok ? kf_plan_explain(pf, false) : NULL;
    kf_adapter_info info;
    kf_context_adapter_info(ctx, &info);
    uint32_t limit = budget ? budget : info.max_storage_buffers_per_stage;
    for (const char *line = text; ok && line && (line = strstr(line, "  reads:  ")); line++) {
        uint32_t reads = 1;
        for (const char *c = line; *c && *c != '\n'; c++) {
            reads += *c == ',';
        }
        if (reads + 1 > limit) {
            kt_fail(__FILE__, __LINE__, "a kernel has %u bindings, the budget is %u:\n%.300s",
                    reads + 1, limit, line);
            ok = false;
        }
    }
    kf_free(text);
    kf_plan_summary s;
    kf_plan_summary_get(pf, &s);
    dispatches = ok ? s.dispatches : 0;
    kf_plan_destroy(pf);
    kf_plan_destroy(pu);
    return dispatches;
}

/* x0 |> add(x1) |> ... |> add(xN) in kernels of `budget` bindings: the first reads x0 and
 * budget - 2 more inputs, each later one the previous result and budget - 2 inputs. */
static uint32_t chain_groups(uint32_t adds, uint32_t budget) {
    uint32_t per = budget - 2;
    return (adds + per - 1) / per;
}

KT_TEST(fusion, add_chain_of_65_inputs_splits_at_the_binding_budget) {
    KT_NEED_GPU(ctx);
    kf_adapter_info info;
    KT_CHECK_OK(kf_context_adapter_info(ctx, &info));
    char *text = add_chain(64, "7, 13");
    kf_graph *g = text ? parse_text(text) : NULL;
    free(text);
    KT_CHECK(g, "parse");
    uint32_t device =
        info.max_storage_buffers_per_stage < 64 ? info.max_storage_buffers_per_stage : 64;
    const uint32_t budgets[] = {0, 5, 6, 7, 10};
    for (size_t b = 0; b < sizeof budgets / sizeof budgets[0]; b++) {
        uint32_t budget = budgets[b];
        uint32_t want = chain_groups(64, budget ? (budget < device ? budget : device) : device);
        uint32_t got = fused_dispatches(ctx, g, budget);
        if (got != want) {
            kf_graph_destroy(g);
            KT_CHECK(false, "budget %u (device %u): %u dispatches, want %u", budget, device, got,
                     want);
        }
    }
    /* Below what one add needs (a, b, out): refused, naming the op. */
    kf_compile_options tiny = {.max_storage_buffers = 2};
    kf_plan *plan = NULL;
    kf_status st = kf_graph_compile(ctx, g, &tiny, &plan);
    kf_graph_destroy(g);
    KT_CHECK(st == KF_ERROR_INVALID_ARGUMENT && !plan, "a budget of 2 gave %s", kf_status_str(st));
    KT_CHECK(strstr(kf_context_last_error(ctx), "add"), "message: %s", kf_context_last_error(ctx));
}

KT_TEST(fusion, add_chain_of_201_inputs_plans_and_runs) {
    KT_NEED_GPU(ctx);
    kf_adapter_info info;
    KT_CHECK_OK(kf_context_adapter_info(ctx, &info));
    char *text = add_chain(200, "64");
    kf_graph *g = text ? parse_text(text) : NULL;
    free(text);
    KT_CHECK(g, "parse");
    uint32_t device =
        info.max_storage_buffers_per_stage < 64 ? info.max_storage_buffers_per_stage : 64;
    uint32_t got = fused_dispatches(ctx, g, 0);
    uint32_t want = chain_groups(200, device);
    kf_graph_destroy(g);
    KT_CHECK(got == want, "%u dispatches, want %u (device budget %u)", got, want, device);
}

/* The budget holds in a matmul's store phase too: the matmul binds a, b and out, so its epilogue
 * takes budget - 3 residuals, each later element-wise group budget - 2. */
KT_TEST(fusion, matmul_epilogue_within_the_binding_budget) {
    KT_NEED_GPU(ctx);
    char text[2048];
    size_t used = (size_t)snprintf(text, sizeof text, "x: f32[9, 17]\nw: f32[17, 11]\n");
    for (int i = 1; i <= 12; i++) {
        used += (size_t)snprintf(text + used, sizeof text - used, "r%d: f32[9, 11]\n", i);
    }
    used += (size_t)snprintf(text + used, sizeof text - used, "y = matmul(x, w)");
    for (int i = 1; i <= 12; i++) {
        used += (size_t)snprintf(text + used, sizeof text - used, " |> add(r%d)", i);
    }
    snprintf(text + used, sizeof text - used, "\n");
    kf_graph *g = parse_text(text);
    KT_CHECK(g, "parse");
    /* 6: 3 residuals in the epilogue, then 4 + 4 + 1. 8: 5, then 6, then 1. */
    uint32_t got6 = fused_dispatches(ctx, g, 6);
    uint32_t got8 = fused_dispatches(ctx, g, 8);
    kf_graph_destroy(g);
    KT_CHECK(got6 == 4, "budget 6: %u dispatches, want 4", got6);
    KT_CHECK(got8 == 3, "budget 8: %u dispatches, want 3", got8);
}

/* Two chains meeting in an add: merged while the budget allows, else the second stays a group
 * of its own (its result read from memory), else the add is a group of its own. */
KT_TEST(fusion, merging_trees_respects_the_binding_budget) {
    KT_NEED_GPU(ctx);
    kf_graph *g = parse_text("x0: f32[5, 12]\nx1: f32[5, 12]\nx2: f32[5, 12]\n"
                             "y0: f32[5, 12]\ny1: f32[5, 12]\ny2: f32[5, 12]\n"
                             "a = x0 |> add(x1) |> add(x2)\nb = y0 |> add(y1) |> add(y2)\n"
                             "c = add(a, b) |> relu\nout c\n");
    KT_CHECK(g, "parse");
    const uint32_t budgets[] = {10, 7, 6, 5, 4};
    const uint32_t want[] = {1, 1, 2, 2, 3};
    for (size_t i = 0; i < sizeof budgets / sizeof budgets[0]; i++) {
        uint32_t got = fused_dispatches(ctx, g, budgets[i]);
        if (got != want[i]) {
            kf_graph_destroy(g);
            KT_CHECK(false, "budget %u: %u dispatches, want %u", budgets[i], got, want[i]);
        }
    }
    kf_graph_destroy(g);
}

/* A 2000-operator chain through the C API: groups of KF_GROUP_MAX_NODES (64) operators, all but
 * the last the same kernel text, so they share one pipeline: two are compiled, not 32. */
KT_TEST(fusion, long_repeated_chain_shares_pipelines) {
    KT_NEED_GPU(ctx);
    const uint32_t ops = 2000, per_group = 64;
    kf_graph *g = kf_graph_create();
    kf_shape shape = kf_shape_2d(64, 33);
    kf_node v = kf_graph_input(g, "x", &shape, KF_DTYPE_F32);
    for (uint32_t i = 0; i < ops; i++) {
        v = kf_graph_unary(g, i % 2 ? "relu" : "neg", v);
    }
    kf_graph_output(g, "y", v);
    KT_CHECK(kf_graph_status(g) == KF_OK, "graph: %s", kf_graph_error(g));
    kf_context_stats before, after;
    KT_CHECK_OK(kf_context_stats_get(ctx, &before));
    kf_plan *plan = NULL;
    kf_status st = kf_graph_compile(ctx, g, NULL, &plan);
    kf_context_stats_get(ctx, &after);
    kf_plan_summary s = {0};
    kf_plan_summary_get(plan, &s);
    kf_plan_report report;
    kf_status checked = st == KF_OK ? kf_plan_verify(plan, kt_rand_u64(), &report) : st;
    kf_plan_destroy(plan);
    kf_graph_destroy(g);
    KT_CHECK(st == KF_OK, "compile: %s: %s", kf_status_str(st), kf_context_last_error(ctx));
    uint32_t groups = (ops + per_group - 1) / per_group;
    KT_CHECK(s.dispatches == groups, "%u dispatches, want %u", s.dispatches, groups);
    uint64_t compiled = after.pipelines_compiled - before.pipelines_compiled;
    uint64_t hits = after.pipeline_cache_hits - before.pipeline_cache_hits;
    KT_CHECK(compiled <= 2 && compiled + hits >= groups,
             "%llu pipelines compiled and %llu found for %u identical groups",
             (unsigned long long)compiled, (unsigned long long)hits, groups);
    KT_CHECK(checked == KF_OK, "verify: %s", kf_status_str(checked));
}

/* Kernels are named by what they compute, not by where they came from: the same computation
 * on inputs of other names, in another graph, compiles no new pipeline. */
KT_TEST(fusion, same_computation_other_names_shares_the_pipeline) {
    KT_NEED_GPU(ctx);
    kf_graph *a = parse_text("p: f32[9, 31]\nq: f32[31]\nr = p |> mul(q) |> tanh\n");
    kf_graph *b =
        parse_text("left: f32[9, 31]\nright: f32[31]\nres = left |> mul(right) |> tanh\n");
    KT_CHECK(a && b, "parse");
    kf_plan *pa = NULL, *pb = NULL;
    kf_status sa = kf_graph_compile(ctx, a, NULL, &pa);
    kf_context_stats before, after;
    kf_context_stats_get(ctx, &before);
    kf_status sb = kf_graph_compile(ctx, b, NULL, &pb);
    kf_context_stats_get(ctx, &after);
    kf_plan_report report;
    kf_status checked = sb == KF_OK ? kf_plan_verify(pb, kt_rand_u64(), &report) : sb;
    kf_plan_destroy(pa);
    kf_plan_destroy(pb);
    kf_graph_destroy(a);
    kf_graph_destroy(b);
    KT_CHECK(sa == KF_OK && sb == KF_OK, "compile: %s, %s", kf_status_str(sa), kf_status_str(sb));
    KT_CHECK(after.pipelines_compiled == before.pipelines_compiled,
             "the second graph compiled %llu pipeline(s)",
             (unsigned long long)(after.pipelines_compiled - before.pipelines_compiled));
    KT_CHECK(checked == KF_OK, "verify: %s", kf_status_str(checked));
}

/* Found by the graph fuzzer: a horizontal group whose members read one tensor in two ways (b as
 * a broadcast row of t, and as a vec4 operand of y) once shared one binding of the first type. */
KT_TEST(fusion, horizontal_member_reads_one_tensor_two_ways) {
    KT_NEED_GPU(ctx);
    kf_graph *g = parse_text("a: f32[31, 64]\nc: f32[31, 64]\nb: f32[64]\nt = add(a, b)\n"
                             "t8 = add(a, c)\ny = maximum(b, b)\nout y, t, t8\n");
    KT_CHECK(g, "parse");
    uint32_t d = fused_dispatches(ctx, g, 0);
    kf_graph_destroy(g);
    KT_CHECK(d == 1, "%u dispatches: the three element-wise groups should run side by side", d);
}

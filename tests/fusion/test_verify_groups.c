/* Plan verification: every output compared, each fused group checked on its own inputs, and
 * mutants of the kernels (ir/mutate.h) killed by some check. Wrong kernels come from the
 * context's kernel transform, so no source is edited. */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir_internal.h"
#include "fuse/mutation.h"
#include "ir/mutate.h"
#include "runtime/runtime.h"
#include "spec/spec_internal.h"

static kf_graph *parse(const char *text) {
    kf_graph *g = NULL;
    kf_spec_error err;
    return kf_spec_parse(text, strlen(text), &g, &err) == KF_OK ? g : NULL;
}

/* Mutates the kernels whose WGSL contains `user` only: the first float literal times 1.1. (Plan
 * kernels are named by what they are, "elementwise", not by group, so they share pipelines.) */
static kf_kernel *break_named(void *user, const kf_kernel *k) {
    kf_kernel *copy = kf_kernel_clone(k);
    char *wgsl = copy ? kf_kernel_emit_wgsl(copy) : NULL;
    bool hit = wgsl && strstr(wgsl, user);
    kf_free(wgsl);
    kf_kernel_destroy(copy);
    return hit ? kf__mutant_apply(k, KF__MUTANT_LITERAL_10, 0) : NULL;
}

KT_TEST(fusion, verify_compares_every_output_past_the_listed_ones) {
    KT_NEED_GPU(ctx);
    /* 17 outputs; the 17th comes from a wrong kernel. */
    char text[2048];
    size_t len = 0;
    for (int i = 1; i <= 17; i++) {
        len += (size_t)snprintf(text + len, sizeof text - len, "x%d: f32[%d, 7]\n", i, i + 2);
    }
    for (int i = 1; i <= 17; i++) {
        len += (size_t)snprintf(text + len, sizeof text - len, "y%d = %s(x%d)\nout y%d\n", i,
                                i == 17 ? "sigmoid" : "relu", i, i);
    }
    kf_graph *g = parse(text);
    KT_CHECK(g, "the program parses");
    kf_compile_options no_fuse = {.no_fuse = true};
    kf_plan *p = NULL;
    KT_CHECK_OK(kf_graph_compile(ctx, g, &no_fuse, &p));
    kf_plan_report rep;
    uint64_t seed = kt_rand_u64();
    KT_CHECK_OK(kf_plan_verify(p, seed, &rep));
    KT_CHECK(rep.total_outputs == 17 && rep.output_count == KF_PLAN_MAX_REPORTED &&
                 rep.failed_outputs == 0,
             "as built: 17 outputs, %u listed, none failed (got %u, %u, %u)", KF_PLAN_MAX_REPORTED,
             rep.total_outputs, rep.output_count, rep.failed_outputs);
    kf_plan_destroy(p);
    /* The 17th op's kernel (one dispatch per op: group 16) made wrong. */
    kf__context_set_kernel_transform(ctx, break_named, "exp("); /* sigmoid, not relu */
    kf_status st = kf_graph_compile(ctx, g, &no_fuse, &p);
    kf_status sv = st == KF_OK ? kf_plan_verify(p, seed, &rep) : st;
    kf__context_set_kernel_transform(ctx, NULL, NULL);
    kf_plan_destroy(p);
    kf_graph_destroy(g);
    KT_CHECK(sv == KF_ERROR_MISMATCH, "a wrong 17th output fails verification (got %s)",
             kf_status_str(sv));
    KT_CHECK(!rep.passed && rep.total_outputs == 17 && rep.failed_outputs == 1,
             "17 outputs, 1 failed (got %u, %u)", rep.total_outputs, rep.failed_outputs);
    KT_CHECK(rep.output_count == KF_PLAN_MAX_REPORTED && !rep.outputs[0].passed &&
                 rep.outputs[0].index == 16 && !strcmp(rep.outputs[0].name, "y17"),
             "the failure is listed first: y17, output 16 (got %s, %u, %s)", rep.outputs[0].name,
             rep.outputs[0].index, rep.outputs[0].passed ? "passed" : "failed");
    KT_CHECK(rep.failed_groups == 1 && !rep.groups[0].passed && rep.groups[0].dispatch == 17,
             "its group fails on its own too: dispatch 17 (got %u failed, dispatch %u)",
             rep.failed_groups, rep.groups[0].dispatch);
}

/* gelu's cubic coefficient 0.050 instead of 0.044715 in every kernel's expression, the spec
 * untouched (issue 16's case). */
static kf_kernel *break_gelu(void *user, const kf_kernel *k) {
    (void)user;
    float want = 0.044715f, wrong = 0.050f;
    uint32_t bits, wrong_bits;
    memcpy(&bits, &want, sizeof bits);
    memcpy(&wrong_bits, &wrong, sizeof wrong_bits);
    kf_kernel *m = NULL;
    for (uint32_t i = 1; i < k->node_count; i++) {
        if (k->nodes[i].kind == KF__NODE_LIT && k->nodes[i].bits == bits &&
            k->nodes[i].type.scalar == KF_SCALAR_F32) {
            m = m ? m : kf_kernel_clone(k);
            if (m) {
                m->nodes[i].bits = wrong_bits;
                m->version++;
            }
        }
    }
    return m;
}

KT_TEST(fusion, verify_names_the_broken_group_of_a_deep_mlp) {
    KT_NEED_GPU(ctx);
    /* The 2-layer MLP, narrower (256x512x1024 takes half a minute in a debug build):
     * the whole-graph tolerance is loose here as there, the group's is not. */
    kf_graph *g = parse("x: f32[64, 128]; w1: f32[128, 256]; b1: f32[256]\n"
                        "w2: f32[256, 10]; b2: f32[10]\n"
                        "h = matmul(x, w1) |> add(b1) |> gelu\n"
                        "y = matmul(h, w2) |> add(b2) |> softmax\nout y");
    KT_CHECK(g, "the program parses");
    uint64_t seed = kt_rand_u64();
    kf_plan *p = NULL;
    kf_plan_report rep;
    KT_CHECK_OK(kf_graph_compile(ctx, g, NULL, &p));
    kf_status st = kf_plan_verify(p, seed, &rep);
    kf_plan_destroy(p);
    KT_CHECK(st == KF_OK && rep.total_groups == 3 && rep.failed_groups == 0,
             "as built it passes, 3 groups checked (got %s, %u groups)", kf_status_str(st),
             rep.total_groups);
    for (uint32_t i = 0; i < rep.group_count; i++) {
        KT_CHECK(rep.groups[i].tolerance > 0 && rep.groups[i].tolerance < 0.01,
                 "group %u's tolerance %.3g is its own ops' (well below the graph's)", i,
                 rep.groups[i].tolerance);
    }
    kf__context_set_kernel_transform(ctx, break_gelu, NULL);
    st = kf_graph_compile(ctx, g, NULL, &p);
    kf_status sv = st == KF_OK ? kf_plan_verify(p, seed, &rep) : st;
    kf__context_set_kernel_transform(ctx, NULL, NULL);
    kf_plan_destroy(p);
    kf_graph_destroy(g);
    KT_CHECK(sv == KF_ERROR_MISMATCH, "the broken gelu fails (got %s)", kf_status_str(sv));
    const kf_plan_group_report *bad = &rep.groups[0];
    KT_CHECK(rep.failed_groups == 1 && !bad->passed && bad->dispatch == 1 &&
                 !strcmp(bad->ops, "matmul |> add |> gelu"),
             "the gelu group is named (got %u failed; first: dispatch %u, %s)", rep.failed_groups,
             bad->dispatch, bad->ops);
    KT_CHECK(bad->max_rel_error > bad->tolerance && fabsf(bad->got - bad->expected) > 0,
             "error %.3g beyond tolerance %.3g at element %llu (%.9g vs %.9g)", bad->max_rel_error,
             bad->tolerance, (unsigned long long)bad->element, (double)bad->got,
             (double)bad->expected);
    /* gelu fails alone on what the group feeds it: the smallest failing subgraph is gelu. */
    KT_CHECK(strstr(rep.failing_graph, "gelu(") && !strstr(rep.failing_graph, "matmul") &&
                 !strstr(rep.failing_graph, "softmax"),
             "the failing subgraph is gelu alone:\n%s", rep.failing_graph);
    kf_graph *again = parse(rep.failing_graph);
    KT_CHECK(again && kf_graph_output_count(again) == 1, "the failing subgraph parses back");
    kf_graph_destroy(again);
}

KT_TEST(fusion, mutation_sample_kills_every_mutant_that_matters) {
    KT_NEED_GPU(ctx);
    const char *env = getenv("KFUSE_MUTATION_BUDGET");
    /* at most 45 s of baseline (all checks, ~15 s, with warm shader caches), then 45 s of
     * mutants: a minute or two of a 2-core CI machine */
    double budget = env ? atof(env) : 45.0;
    kf__mutation_options o = {.seed = kt_rand_u64(), .budget_s = budget, .quick = true};
    printf("    mutation sample: seed %llu, %.0f s (rerun: kfuse mutate --quick --seed %llu "
           "--budget %.0f)\n",
           (unsigned long long)o.seed, budget, (unsigned long long)o.seed, budget);
    o.log = stdout;
    kf_graph *plans[KF__MUTATION_PLANS];
    char msg[300];
    KT_CHECK_OK(kf__mutation_plans_parse(plans, msg, sizeof msg));
    o.plans = plans;
    o.plan_count = KF__MUTATION_PLANS;
    kf__mutation_result r;
    kf_status st = kf__mutation_run(ctx, &o, &r);
    kf__mutation_plans_destroy(plans);
    KT_CHECK(st == KF_OK, "the campaign runs: %s: %s", kf_status_str(st),
             kf_context_last_error(ctx));
    printf("    %u mutants of %u kernels (of %u of %u checks), %u tried in %.0f s: %u killed, "
           "%u did not run, %u survived (%u matter)\n",
           r.mutants, r.kernels, r.baselined, r.checks, r.tried, r.seconds, r.killed, r.stillborn,
           r.survived, r.mattered);
    KT_CHECK(r.tried > 0 && r.killed > 0, "mutants were tried and killed");
    KT_CHECK(r.mattered == 0, "%u surviving mutants changed an output past its tolerance",
             r.mattered);
}

/* The campaign drops the context's pipelines every 64 mutants (kf__context_forget_pipelines); the
 * plans compiled after that, of kernels compiled before it, must build and verify again. */
KT_TEST(fusion, plans_compile_again_after_the_context_forgets_its_pipelines) {
    KT_NEED_GPU(ctx);
    const char *program = "x: f32[2, 7, 3, 16]\nb: f32[16]\nw: f32[16, 5]\n"
                          "y = permute(x, axes=[0, 2, 1, 3]) |> add(b) |> gelu\n"
                          "z = matmul(y, w) |> relu\nout y, z\n";
    for (int round = 0; round < 3; round++) {
        kf_graph *g = parse(program);
        KT_CHECK(g, "the program parses");
        kf_plan *p = NULL;
        KT_CHECK_OK(kf_graph_compile(ctx, g, NULL, &p));
        kf_plan_report rep;
        kf_status st = kf_plan_verify(p, kt_rand_u64(), &rep);
        KT_CHECK(st == KF_OK, "round %d: verify: %s: %s", round, kf_status_str(st),
                 kf_context_last_error(ctx));
        kf_plan_destroy(p);
        kf_graph_destroy(g);
        kf__context_forget_pipelines(ctx);
    }
}

KT_TEST(fusion, verify_allows_for_a_kernel_that_cancels_its_input) {
    KT_NEED_GPU(ctx);
    /* layernorm of rows of 2 gives +-1; abs makes them equal up to their last bits; the next
     * layernorm normalizes those bits (random graph 251 of a fuzz run). The group is right to
     * its f32 arithmetic, and its tolerance must say how far that goes (docs/fusion.md). */
    kf_graph *g = parse("x: f32[32, 2]\nt = silu(x) |> abs |> layernorm |> abs\n"
                        "y = layernorm(t) |> scale(0.5) |> layernorm\nout y");
    KT_CHECK(g, "the program parses");
    kf_plan *p = NULL;
    KT_CHECK_OK(kf_graph_compile(ctx, g, NULL, &p));
    kf_plan_report rep;
    kf_status st = kf_plan_verify(p, kt_rand_u64(), &rep);
    kf_plan_destroy(p);
    kf_graph_destroy(g);
    for (uint32_t i = 0; st != KF_OK && i < rep.group_count; i++) {
        fprintf(stderr, "    group %u (%s): err %.3g tol %.3g\n", rep.groups[i].dispatch,
                rep.groups[i].ops, rep.groups[i].max_rel_error, rep.groups[i].tolerance);
    }
    KT_CHECK(st == KF_OK, "verify: %s", kf_status_str(st));
}

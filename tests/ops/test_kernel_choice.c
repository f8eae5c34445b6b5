/* The operator's kernel choice (kernel_choose): plans and kf_op_verify build the same kernel, and
 * the runtime's per-context extension slots that hold the tuner's table. */
#include "harness.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ops/matmul_blocked.h"
#include "ops/ops_internal.h"
#include "runtime/runtime.h"

static kf_graph *parse_program(const char *text) {
    kf_graph *g = NULL;
    kf_spec_error err;
    return kf_spec_parse(text, strlen(text), &g, &err) == KF_OK ? g : NULL;
}

/* A tile in the cache file for 96x64x80 that is not the built-in one: the matmul operator's
 * choice picks it, kf_op_verify tests that kernel (its pipeline is the one the plan then finds in
 * the cache, not another), and the plan runs it and matches the CPU spec. */
KT_TEST(ops, matmul_choice_is_shared_by_verify_and_plans) {
    KT_NEED_GPU(ctx);
    const uint32_t M = 96, K = 64, N = 80;
    const kf__mm_config tile = {32, 32, 16, 4, 4, 1, 0, 0};
    KT_CHECK(memcmp(kf__mm_default_config(M, K, N), &tile, sizeof tile) != 0,
             "the test's tile is the built-in one: pick another");
    char dir[] = "/tmp/kfuse-choice-XXXXXX";
    KT_CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char file[128];
    snprintf(file, sizeof file, "%s/matmul-tiles.txt", dir);
    kf_adapter_info info;
    KT_CHECK_OK(kf_context_adapter_info(ctx, &info));
    char key[720];
    snprintf(key, sizeof key, "mm4|%s|%s|%s|%s", info.vendor, info.device, info.description,
             info.backend);
    for (char *c = key; *c; c++) {
        *c = *c == '\t' || *c == '\n' ? ' ' : *c;
    }
    FILE *f = fopen(file, "w");
    KT_CHECK(f, "cannot write %s", file);
    /* class: ceil(log2(96 * 80)) = 13, ceil(log2(64)) = 6 (K and N multiples of 4) */
    fprintf(f, "%s\t13 6\t%u %u %u %u %u %u %u %u\t0.1\n", key, tile.bm, tile.bn, tile.bk, tile.tm,
            tile.tn, tile.stages, tile.raster, tile.edge);
    fclose(f);
    setenv("KF_CACHE_DIR", dir, 1);
    kf_context *fresh = NULL;
    kf_context_desc desc = {0};
    kf_status created = kf_context_create(&desc, &fresh);
    const kf_operator *mm = kf_op_find("matmul");
    kf_shape shapes[2] = {kf_shape_2d(M, K), kf_shape_2d(K, N)};
    kf_op_params params = {0};
    /* The context reads the cache file on its first choice. */
    kf_kernel *chosen =
        created == KF_OK ? kf__op_kernel_for(fresh, mm, shapes, &params, KF_DTYPE_F32) : NULL;
    unsetenv("KF_CACHE_DIR");
    remove(file);
    rmdir(dir);
    KT_CHECK_OK(created);
    kf_kernel *tuned = kf__matmul_blocked(M, K, N, &tile);
    kf_kernel *plain = kf_op_kernel_forward(mm, shapes, &params, KF_DTYPE_F32);
    /* the binding lengths a plan declares, so the WGSL is proved as the plan's is */
    kf__op_kernel_lengths(chosen, mm, shapes, &params, KF_DTYPE_F32);
    kf__op_kernel_lengths(tuned, mm, shapes, &params, KF_DTYPE_F32);
    kf__op_kernel_lengths(plain, mm, shapes, &params, KF_DTYPE_F32);
    char *w_chosen = kf_kernel_emit_wgsl(chosen);
    char *w_tuned = kf_kernel_emit_wgsl(tuned);
    char *w_plain = kf_kernel_emit_wgsl(plain);
    bool same_as_tuned = w_chosen && w_tuned && !strcmp(w_chosen, w_tuned);
    bool same_as_plain = w_chosen && w_plain && !strcmp(w_chosen, w_plain);
    kf_free(w_tuned);
    kf_free(w_plain);
    kf_kernel_destroy(chosen);
    kf_kernel_destroy(tuned);
    kf_kernel_destroy(plain);
    /* Without a context nothing is tuned: the built-in kernel. */
    kf_kernel *no_ctx = kf__op_kernel_for(NULL, mm, shapes, &params, KF_DTYPE_F32);
    kf__op_kernel_lengths(no_ctx, mm, shapes, &params, KF_DTYPE_F32);
    char *w_no_ctx = kf_kernel_emit_wgsl(no_ctx);
    kf_kernel_destroy(no_ctx);
    bool no_ctx_tuned = w_no_ctx && w_chosen && !strcmp(w_no_ctx, w_chosen);
    kf_free(w_no_ctx);
    if (!same_as_tuned || same_as_plain || no_ctx_tuned) {
        kf_free(w_chosen);
        kf_context_destroy(fresh);
        KT_CHECK(false, "the choice is not the cached tile (tuned %d, built-in %d, no ctx %d)",
                 same_as_tuned, same_as_plain, no_ctx_tuned);
    }

    kf_verify_case vc = {.op = mm, .shapes = {shapes[0], shapes[1]}, .dtype = KF_DTYPE_F32};
    vc.seed = kt_rand_u64();
    kf_verify_result vr;
    kf_status verified = kf_op_verify(fresh, &vc, &vr);
    kf_context_stats before, after;
    kf_context_stats_get(fresh, &before);
    kf_graph *g = parse_program("x: f32[96, 64]\nw: f32[64, 80]\ny = matmul(x, w)\n");
    kf_plan *plan = NULL;
    kf_status compiled = g ? kf_graph_compile(fresh, g, NULL, &plan) : KF_ERROR_INVALID_ARGUMENT;
    kf_context_stats_get(fresh, &after);
    char *text = plan ? kf_plan_explain(plan, true) : NULL;
    bool plan_runs_it = text && strstr(text, w_chosen) != NULL;
    kf_free(text);
    kf_free(w_chosen);
    kf_plan_report report;
    kf_status checked = plan ? kf_plan_verify(plan, kt_rand_u64(), &report) : compiled;
    kf_plan_destroy(plan);
    kf_graph_destroy(g);
    kf_context_destroy(fresh);
    KT_CHECK(verified == KF_OK, "kf_op_verify: %s: %s", kf_status_str(verified), vr.message);
    KT_CHECK(compiled == KF_OK, "compile: %s", kf_status_str(compiled));
    KT_CHECK(plan_runs_it, "the plan's kernel is not the operator's choice");
    KT_CHECK(after.pipelines_compiled == before.pipelines_compiled,
             "the plan compiled %llu new pipeline(s): kf_op_verify tested another kernel",
             (unsigned long long)(after.pipelines_compiled - before.pipelines_compiled));
    KT_CHECK(checked == KF_OK, "the plan with the tuned tile: %s", kf_status_str(checked));
}

static int freed_count;
static void count_free(void *data) {
    freed_count += *(int *)data;
    free(data);
}

KT_TEST(ops, context_extension_slots_hold_and_free_their_data) {
    KT_NEED_GPU(shared);
    (void)shared;
    kf_context *ctx = NULL;
    kf_context_desc desc = {0};
    KT_CHECK_OK(kf_context_create(&desc, &ctx));
    static const char key_a = 0, key_b = 0;
    int *a = malloc(sizeof *a), *b = malloc(sizeof *b), *a2 = malloc(sizeof *a2);
    KT_CHECK(a && b && a2, "out of memory");
    *a = 1;
    *b = 10;
    *a2 = 100;
    freed_count = 0;
    KT_CHECK(kf__context_extension(ctx, &key_a) == NULL, "an unset slot has data");
    KT_CHECK_OK(kf__context_extension_set(ctx, &key_a, a, count_free));
    KT_CHECK_OK(kf__context_extension_set(ctx, &key_b, b, count_free));
    KT_CHECK(kf__context_extension(ctx, &key_a) == a && kf__context_extension(ctx, &key_b) == b,
             "slots mixed up");
    KT_CHECK_OK(kf__context_extension_set(ctx, &key_a, a2, count_free));
    KT_CHECK(freed_count == 1, "replacing a slot did not free its old data (%d)", freed_count);
    KT_CHECK(kf__context_extension(ctx, &key_a) == a2, "the replaced slot");
    kf_context_destroy(ctx);
    KT_CHECK(freed_count == 111, "destroying the context freed %d, want 111", freed_count);
}

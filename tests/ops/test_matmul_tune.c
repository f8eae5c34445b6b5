/* The matmul autotuner: a tuned tile lands in the cache file, a new context reads it back, and
 * plans compiled afterwards use it. */
#include "harness.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ops/matmul_blocked.h"

KT_TEST(ops, matmul_tune_caches_and_plans_use_it) {
    KT_NEED_GPU(ctx);
    char dir[] = "/tmp/kfuse-tune-XXXXXX";
    KT_CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    setenv("KF_CACHE_DIR", dir, 1);
    kf_context *fresh = NULL;
    kf_context_desc desc = {0};
    KT_CHECK_OK(kf_context_create(&desc, &fresh));

    kf_matmul_tuning t;
    KT_CHECK_OK(kf_matmul_tune(fresh, 96, 80, 128, &t));
    kf__mm_config chosen = {t.bm, t.bn, t.bk, t.tm, t.tn, t.stages, t.raster, t.edge};
    KT_CHECK(kf__matmul_blocked_valid(&chosen), "chose an invalid tile %ux%ux%u/%ux%u", t.bm, t.bn,
             t.bk, t.tm, t.tn);
    KT_CHECK(t.candidates >= 5 && t.best_ms > 0.0 && t.default_ms >= t.best_ms,
             "%u candidates, best %g ms, built-in %g ms", t.candidates, t.best_ms, t.default_ms);
    KT_CHECK(t.saved, "the cache file in %s was not written", dir);
    kf_context_destroy(fresh);

    /* Another context (another process, as far as the cache knows) reads the choice back. */
    KT_CHECK_OK(kf_context_create(&desc, &fresh));
    const kf__mm_config *again = kf__matmul_config_for(fresh, 96, 80, 128);
    KT_CHECK(again && !memcmp(again, &chosen, sizeof chosen), "the cached tile was not found");
    KT_CHECK(kf__matmul_config_for(fresh, 4096, 4096, 4096) == NULL,
             "an untuned shape class found a tile");
    /* Same sizes but rows that are not whole vec4s: another class (other tiles win there). */
    KT_CHECK(kf__matmul_config_for(fresh, 96, 81, 128) == NULL,
             "96x81x128 (K not a multiple of 4) found 96x80x128's tile");
    KT_CHECK(kf__matmul_config_for(fresh, 96, 80, 127) == NULL,
             "96x80x127 (N not a multiple of 4) found 96x80x128's tile");

    /* A plan for that class uses it, and still matches the CPU specs. */
    const char *text = "x: f32[96, 80]\nw: f32[80, 128]\ny = matmul(x, w) |> relu\n";
    kf_graph *g = NULL;
    kf_spec_error err;
    KT_CHECK_OK(kf_spec_parse(text, strlen(text), &g, &err));
    kf_plan *plan = NULL;
    KT_CHECK_OK(kf_graph_compile(fresh, g, NULL, &plan));
    char *explain = kf_plan_explain(plan, true);
    char want[96], raster[16] = "";
    if (t.raster > 1) {
        snprintf(raster, sizeof raster, "_r%u", t.raster);
    }
    bool edge = t.edge && (96 % t.bm || 128 % t.bn || 80 % t.bk); /* the kernel names the path */
    snprintf(want, sizeof want, "matmul_%ux%ux%u_%ux%u%s%s%s", t.bm, t.bn, t.bk, t.tm, t.tn,
             t.stages == 2 ? "_db" : "", raster, edge ? "_e" : "");
    const char *at = explain ? strstr(explain, want) : NULL; /* the whole name: not _db's */
    KT_CHECK(at && at[strlen(want)] != '_', "the plan does not use the tuned %s", want);
    kf_free(explain);
    kf_plan_report report;
    KT_CHECK_OK(kf_plan_verify(plan, kt_rand_u64(), &report));
    kf_plan_destroy(plan);
    kf_graph_destroy(g);

    KT_CHECK(kf_matmul_tune(fresh, 0, 4, 4, &t) == KF_ERROR_INVALID_ARGUMENT, "zero size");
    KT_CHECK(kf_matmul_tune(NULL, 4, 4, 4, &t) == KF_ERROR_INVALID_ARGUMENT, "NULL context");
    kf_context_destroy(fresh);
    char file[128];
    snprintf(file, sizeof file, "%s/matmul-tiles.txt", dir);
    remove(file);
    rmdir(dir);
    unsetenv("KF_CACHE_DIR");
}

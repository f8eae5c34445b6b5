/* The persistent pipeline cache: a second context (as a second process would) loads what the
 * first stored; damaged and truncated entries are ignored, removed and written again; off means
 * off. Each context here has a folder of its own, so the tests never touch the user's cache. */
#include "harness.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *cache_text =
    "x: f32[1031]\nb: f32[1031]\ny = add(x, b) |> scale(0.75) |> sigmoid |> mul(b)\nout y\n";

typedef struct cache_run {
    kf_context_stats stats;
    char folder[1024];
    bool verified;
} cache_run;

/* A context on `dir` (NULL: off) compiles and verifies the plan; returns its stats. */
static bool run_with_cache(const char *dir, cache_run *out) {
    memset(out, 0, sizeof *out);
    char msg[512] = "";
    kf_context_desc desc = {.pipeline_cache_dir = dir,
                            .disable_pipeline_cache = dir == NULL,
                            .error_out = msg,
                            .error_out_size = sizeof msg};
    kf_context *ctx = NULL;
    if (kf_context_create(&desc, &ctx) != KF_OK) {
        kt_fail(__FILE__, __LINE__, "context: %s", msg);
        return false;
    }
    kf_adapter_info info;
    kf_context_adapter_info(ctx, &info);
    snprintf(out->folder, sizeof out->folder, "%s", info.pipeline_cache);
    kf_graph *g = NULL;
    kf_spec_error err;
    kf_plan *p = NULL;
    bool ok = kf_spec_parse(cache_text, strlen(cache_text), &g, &err) == KF_OK &&
              kf_graph_compile(ctx, g, NULL, &p) == KF_OK;
    kf_plan_report report;
    out->verified = ok && kf_plan_verify(p, kt_rand_u64(), &report) == KF_OK && report.passed;
    if (!out->verified) {
        kt_fail(__FILE__, __LINE__, "plan: %s", kf_context_last_error(ctx));
    }
    kf_context_stats_get(ctx, &out->stats);
    kf_plan_destroy(p);
    kf_graph_destroy(g);
    kf_context_destroy(ctx);
    return out->verified;
}

/* Applies damage(path, index) to every entry of the folder; returns how many there were. */
static uint32_t for_each_entry(const char *folder, void (*damage)(const char *, uint32_t)) {
    DIR *d = opendir(folder);
    uint32_t count = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n > 4 && !strcmp(e->d_name + n - 4, ".bin")) {
            char path[2048];
            snprintf(path, sizeof path, "%s/%s", folder, e->d_name);
            if (damage) {
                damage(path, count);
            }
            count++;
        }
    }
    if (d) {
        closedir(d);
    }
    return count;
}

/* Four kinds of damage in turn: a flipped byte, cut in half, emptied, a byte appended. */
static void damage_entry(const char *path, uint32_t index) {
    struct stat st;
    if (stat(path, &st) != 0) {
        return;
    }
    FILE *f = NULL;
    switch (index % 4) {
    case 0:
        f = fopen(path, "r+b");
        if (f) {
            fseek(f, st.st_size / 2 + 1, SEEK_SET);
            int c = fgetc(f);
            fseek(f, st.st_size / 2 + 1, SEEK_SET);
            fputc(c ^ 0x5a, f);
            fclose(f);
        }
        break;
    case 1:
        (void)!truncate(path, st.st_size / 2);
        break;
    case 2:
        (void)!truncate(path, 0);
        break;
    default:
        f = fopen(path, "ab");
        if (f) {
            fputc(0, f);
            fclose(f);
        }
        break;
    }
}

static void remove_tree(const char *root) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    (void)!system(cmd);
}

KT_TEST(unit, pipeline_cache_is_loaded_by_a_second_context) {
    KT_NEED_GPU(ctx);
    (void)ctx;
    char root[] = "/tmp/kfuse-pipeline-cache-XXXXXX";
    KT_CHECK(mkdtemp(root) != NULL, "mkdtemp");
    cache_run first, second;
    bool ok = run_with_cache(root, &first) && run_with_cache(root, &second);
    uint32_t entries = for_each_entry(first.folder, NULL);
    remove_tree(root);
    KT_CHECK(ok, "runs");
    KT_CHECK(strncmp(first.folder, root, strlen(root)) == 0, "cache folder %s is not under %s",
             first.folder, root);
    KT_CHECK(first.stats.disk_cache_stores > 0 && entries > 0, "the first context stored nothing");
    KT_CHECK(second.stats.disk_cache_loads > 0, "the second context loaded nothing");
    KT_CHECK(second.stats.disk_cache_stores == 0, "the second context stored %llu entries again",
             (unsigned long long)second.stats.disk_cache_stores);
}

KT_TEST(unit, pipeline_cache_survives_corrupt_and_truncated_entries) {
    KT_NEED_GPU(ctx);
    (void)ctx;
    char root[] = "/tmp/kfuse-pipeline-cache-XXXXXX";
    KT_CHECK(mkdtemp(root) != NULL, "mkdtemp");
    cache_run first, damaged, healed;
    bool ok = run_with_cache(root, &first);
    uint32_t entries = for_each_entry(first.folder, damage_entry);
    ok = ok && run_with_cache(root, &damaged) && run_with_cache(root, &healed);
    remove_tree(root);
    KT_CHECK(ok, "a damaged cache broke a context or a plan");
    KT_CHECK(entries > 0, "nothing was stored");
    KT_CHECK(damaged.stats.disk_cache_loads == 0, "%llu damaged entries were handed to Dawn",
             (unsigned long long)damaged.stats.disk_cache_loads);
    KT_CHECK(damaged.stats.disk_cache_rejected >= 1, "no damaged entry was noticed");
    KT_CHECK(damaged.stats.disk_cache_stores >= 1, "damaged entries were not written again");
    KT_CHECK(healed.stats.disk_cache_loads > 0, "the rewritten entries were not loaded");
    KT_CHECK(healed.stats.disk_cache_rejected == 0, "rewritten entries were rejected");
}

KT_TEST(unit, pipeline_cache_off_writes_nothing) {
    KT_NEED_GPU(ctx);
    (void)ctx;
    cache_run off;
    KT_CHECK(run_with_cache(NULL, &off), "run");
    KT_CHECK(off.folder[0] == '\0', "off, yet a folder: %s", off.folder);
    KT_CHECK(off.stats.disk_cache_stores == 0 && off.stats.disk_cache_loads == 0, "off, yet used");
}

/* kfuse tune: the matmul autotuner, for the shapes given or the benchmark's. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static void tune_usage(FILE *f) {
    fprintf(f, "usage: kfuse tune [MxKxN ...]\n\n"
               "Times the register-blocked f32 matmul's tile configurations on this device for\n"
               "each product (default: 1024x1024x1024, 4096x4096x4096, 8192x8192x8192 on a GPU;\n"
               "256x256x256 on a CPU adapter) and keeps the fastest per shape class in the\n"
               "cache file (KF_CACHE_DIR, else XDG_CACHE_HOME/kfuse, else ~/.cache/kfuse), which\n"
               "plans compiled later use.\n");
}

static bool parse_shape(const char *s, uint32_t dims[3]) {
    for (int i = 0; i < 3; i++) {
        if (!kf_cli_dim(&s, 1, 65536, &dims[i]) || *s != (i < 2 ? 'x' : '\0')) {
            return false;
        }
        s++;
    }
    return true;
}

int kf_cmd_tune(int argc, char **argv) {
    uint32_t shapes[16][3];
    int count = 0;
    for (int i = 1; i < argc; i++) {
        if (kf_cli_is_help(argv[i])) {
            tune_usage(stdout);
            return 0;
        }
        if (count == 16 || !parse_shape(argv[i], shapes[count])) {
            fprintf(stderr, "kfuse tune: '%s' is not MxKxN (each 1..65536, at most 16 shapes)\n",
                    argv[i]);
            return 2;
        }
        count++;
    }
    kf_context *ctx = kf_cli_context();
    if (!ctx) {
        return 1;
    }
    kf_adapter_info info;
    kf_context_adapter_info(ctx, &info);
    if (count == 0) {
        bool cpu = !strcmp(info.adapter_type, "CPU");
        uint32_t sizes[3] = {1024, 4096, 8192};
        for (int i = 0; i < (cpu ? 1 : 3); i++) {
            uint32_t s = cpu ? 256 : sizes[i];
            shapes[count][0] = shapes[count][1] = shapes[count][2] = s;
            count++;
        }
    }
    printf("matmul tiles on %s (%s)\n", info.device, info.backend);
    printf("%-20s %-18s %10s %10s %9s %s\n", "m x k x n", "best tile", "best ms", "TFLOP/s",
           "vs built", "cached");
    int rc = 0;
    for (int i = 0; i < count; i++) {
        kf_matmul_tuning t;
        kf_status st = kf_matmul_tune(ctx, shapes[i][0], shapes[i][1], shapes[i][2], &t);
        char shape[48], tile[96];
        snprintf(shape, sizeof shape, "%ux%ux%u", shapes[i][0], shapes[i][1], shapes[i][2]);
        if (st != KF_OK) {
            printf("%-20s %s: %s\n", shape, kf_status_str(st), kf_context_last_error(ctx));
            rc = 1;
            continue;
        }
        int len = snprintf(tile, sizeof tile, "%ux%ux%u/%ux%u%s", t.bm, t.bn, t.bk, t.tm, t.tn,
                           t.stages == 2 ? "/db" : "");
        if (len > 0 && (size_t)len < sizeof tile && (t.raster > 1 || t.edge)) {
            snprintf(tile + len, sizeof tile - (size_t)len, "%s%.0u%s", t.raster > 1 ? "/r" : "",
                     t.raster > 1 ? t.raster : 0, t.edge ? "/e" : "");
        }
        double flops = 2.0 * shapes[i][0] * (double)shapes[i][1] * shapes[i][2];
        printf("%-20s %-18s %10.4f %10.2f %8.2fx %s\n", shape, tile, t.best_ms,
               flops / (t.best_ms * 1e9), t.default_ms > 0 ? t.default_ms / t.best_ms : 0.0,
               t.saved ? "yes" : "no (kept for this process)");
    }
    kf_context_destroy(ctx);
    return rc;
}

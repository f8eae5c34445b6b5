/* kfuse bench: the benchmark of docs/PERFORMANCE.md (the cases live in bench/). */
#include "cli.h"

#include "bench.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void bench_usage(FILE *f) {
    fprintf(f, "usage: kfuse bench [--filter RE] [--json] [--size small|full] [--repeat N]\n"
               "                   [--batch N] [--seed S] [--list] [--json-file PATH]\n\n"
               "Times every case fused and unfused (one dispatch per operator) on this device and\n"
               "compares the throughput with the device's own copy bandwidth and matmul rate,\n"
               "measured first. Cases: element-wise chains of 1 to 8 operators, matmul + bias +\n"
               "GELU (f32, and f16 inputs with f32 accumulation), softmax, rmsnorm * weight,\n"
               "layernorm * weight + bias, and the FFN activation save.\n\n"
               "  --filter RE     only cases whose name matches the POSIX extended regex RE\n"
               "  --json          one JSON object per line (device, references, cases)\n"
               "  --json-file P   print the table and write the JSON lines to P, from one run\n"
               "  --size S        small (default on a CPU adapter) or full (issue 6's sizes)\n"
               "  --repeat N      timed runs per variant, median reported (default 10, small 5)\n"
               "  --batch N       each timed run is the plan N times back to back in one\n"
               "                  submission, the time per run reported (1..64; default 1):\n"
               "                  short plans then run at the clocks of steady work\n"
               "  --seed S        seed of the random inputs (default: fresh, printed in --json)\n"
               "  --list          print the selected cases, their sizes and graphs; run nothing\n");
}

int kf_cmd_bench(int argc, char **argv) {
    kf_bench_options opts = {0};
    const char *json_path = NULL;
    opts.seed = (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)clock();
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        bool has_next = i + 1 < argc;
        if (kf_cli_is_help(arg)) {
            bench_usage(stdout);
            return 0;
        } else if (!strcmp(arg, "--json")) {
            opts.json = true;
        } else if (!strcmp(arg, "--json-file") && has_next) {
            json_path = argv[++i];
        } else if (!strcmp(arg, "--list")) {
            opts.list = true;
        } else if (!strcmp(arg, "--filter") && has_next) {
            opts.filter = argv[++i];
        } else if (!strcmp(arg, "--size") && has_next) {
            const char *s = argv[++i];
            if (!strcmp(s, "small")) {
                opts.size = KF_BENCH_SIZE_SMALL;
            } else if (!strcmp(s, "full")) {
                opts.size = KF_BENCH_SIZE_FULL;
            } else {
                fprintf(stderr, "kfuse bench: --size takes small or full, not '%s'\n", s);
                return 2;
            }
        } else if (!strcmp(arg, "--repeat") && has_next) {
            uint64_t v;
            if (!kf_cli_number("bench", "--repeat", argv[++i], 1, 100000, &v)) {
                return 2;
            }
            opts.repeat = (uint32_t)v;
        } else if (!strcmp(arg, "--batch") && has_next) {
            uint64_t v;
            if (!kf_cli_number("bench", "--batch", argv[++i], 1, 64, &v)) {
                return 2;
            }
            opts.batch = (uint32_t)v;
        } else if (!strcmp(arg, "--seed") && has_next) {
            if (!kf_cli_number("bench", "--seed", argv[++i], 0, UINT64_MAX, &opts.seed)) {
                return 2;
            }
        } else {
            fprintf(stderr, "kfuse bench: unknown or incomplete option '%s'\n", arg);
            bench_usage(stderr);
            return 2;
        }
    }
    if (opts.list && opts.size != KF_BENCH_SIZE_DEFAULT) {
        return kf_bench_run(NULL, &opts); /* the sizes are known without a device */
    }
    if (json_path && !opts.json && !opts.list) {
        opts.json_also = fopen(json_path, "w");
        if (!opts.json_also) {
            fprintf(stderr, "kfuse bench: cannot write %s: %s\n", json_path, strerror(errno));
            return 1;
        }
    }
    kf_context *ctx = kf_cli_context();
    int rc = ctx ? kf_bench_run(ctx, &opts) : 1;
    kf_context_destroy(ctx);
    if (opts.json_also && fclose(opts.json_also) != 0 && rc == 0) {
        fprintf(stderr, "kfuse bench: writing %s: %s\n", json_path, strerror(errno));
        rc = 1;
    }
    return rc;
}

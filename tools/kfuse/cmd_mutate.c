/* kfuse mutate: mutation testing of kfuse's own kernels (docs/fusion.md, "Mutation testing"). */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuse/mutation.h"
#include "spec/spec_internal.h"

static void usage(FILE *f) {
    fprintf(f, "usage: kfuse mutate [--seed N] [--budget SECONDS] [--quick] [--kernel TEXT] "
               "[--shard I/N] [--verbose]\n\n"
               "Builds mutants of every kernel the checks compile (a literal off by 1%% and 10%%,\n"
               "+ for -, min for max, a load's index off by one, a loop one step short, a barrier\n"
               "removed, the epilogue applied twice), in the IR, one at a time, and runs the\n"
               "operator checks (kf_op_verify) and fused plans (kf_plan_verify) that compile that\n"
               "kernel against each. Prints the kill rate and every survivor that matters (moved\n"
               "an output past its documented tolerance). Exit 1 when one does.\n\n"
               "  --budget S   a random sample (from the seed): checks in a random order for S\n"
               "               seconds of baseline, then their kernels' mutants for S seconds\n"
               "  --quick      two cases per operator instead of every small one\n"
               "  --kernel T   only kernels whose name contains T\n"
               "  --shard I/N  only mutant numbers m with m %% N == I (runs side by side)\n"
               "  --verbose    every mutant's fate\n");
}

int kf_cmd_mutate(int argc, char **argv) {
    kf__mutation_options o = {.seed = 1, .log = stdout};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--seed") && i + 1 < argc) {
            char *end = NULL;
            o.seed = strtoull(argv[++i], &end, 0);
            if (!end || *end || !argv[i][0]) {
                fprintf(stderr, "kfuse mutate: --seed takes a number, got '%s'\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--budget") && i + 1 < argc) {
            char *end = NULL;
            o.budget_s = strtod(argv[++i], &end);
            if (!end || *end || !(o.budget_s > 0)) {
                fprintf(stderr, "kfuse mutate: --budget takes seconds > 0, got '%s'\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--shard") && i + 1 < argc) {
            unsigned shard = 0, shards = 0;
            char extra = 0;
            if (sscanf(argv[++i], "%u/%u%c", &shard, &shards, &extra) != 2 || shards == 0 ||
                shard >= shards) {
                fprintf(stderr, "kfuse mutate: --shard takes I/N with I < N, got '%s'\n", argv[i]);
                return 2;
            }
            o.shard = shard;
            o.shards = shards;
        } else if (!strcmp(a, "--quick")) {
            o.quick = true;
        } else if (!strcmp(a, "--kernel") && i + 1 < argc) {
            o.filter = argv[++i];
        } else if (!strcmp(a, "--verbose")) {
            o.verbose = true;
        } else {
            fprintf(stderr, "kfuse mutate: unknown argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    kf_context *ctx = kf_cli_context();
    if (!ctx) {
        return 1;
    }
    printf("seed %llu%s\n", (unsigned long long)o.seed, o.budget_s > 0 ? " (sample)" : "");
    fflush(stdout);
    kf_graph *plans[KF__MUTATION_PLANS];
    char msg[300];
    if (kf__mutation_plans_parse(plans, msg, sizeof msg) != KF_OK) {
        fprintf(stderr, "kfuse mutate: %s\n", msg);
        kf_context_destroy(ctx);
        return 1;
    }
    o.plans = plans;
    o.plan_count = KF__MUTATION_PLANS;
    kf__mutation_result r;
    kf_status st = kf__mutation_run(ctx, &o, &r);
    kf__mutation_plans_destroy(plans);
    if (st != KF_OK) {
        fprintf(stderr, "kfuse mutate: %s: %s\n", kf_status_str(st), kf_context_last_error(ctx));
        kf_context_destroy(ctx);
        return 1;
    }
    uint32_t dead = r.killed + r.stillborn;
    printf("%u kernels of %u of %u checks, %u mutants, %u tried in %.1f s\n", r.kernels,
           r.baselined, r.checks, r.mutants, r.tried, r.seconds);
    printf("killed %u (%u by a mismatch, %u did not compile or run), survived %u: %u moved no "
           "output past its tolerance, %u that matter\n",
           dead, r.killed, r.stillborn, r.survived, r.unchanged, r.mattered);
    printf("kill rate %.1f%% of all tried, %.1f%% of those that matter\n",
           r.tried ? 100.0 * dead / r.tried : 0.0,
           dead + r.mattered ? 100.0 * dead / (dead + r.mattered) : 100.0);
    kf_context_destroy(ctx);
    return r.mattered ? 1 : 0;
}

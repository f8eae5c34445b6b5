/* The mutation campaign (src/fuse/mutation.c; docs/fusion.md, "Mutation testing"): every mutant
 * (ir/mutate.h) of the kernels that operator checks and fused plans compile, one at a time,
 * against the checks that compile it. It lives in src/fuse because it compiles plans; its plans
 * come from its callers (`kfuse mutate`, the mutation sample test) as graphs. */
#ifndef KF_FUSE_MUTATION_H
#define KF_FUSE_MUTATION_H

#include "kfuse.h"

#include <stdio.h>

typedef struct kf__mutation_options {
    uint64_t seed;          /* inputs of every check, and which mutants a sample takes */
    double budget_s;        /* > 0: a random sample: checks in a random order until their
                             * baseline took this long, then mutants for as long again */
    uint32_t shard, shards; /* shards > 1: only mutants m with m % shards == shard */
    bool quick;             /* fewer operator cases (the CI sample) */
    const char *filter;     /* only kernels whose name contains this (NULL: all) */
    FILE *log;              /* progress and survivors (NULL: quiet) */
    bool verbose;           /* every mutant, not only survivors */
    /* The fused plans every mutant meets besides the operator checks: graphs the caller owns
     * and keeps until the campaign returns, each compiled afresh for every run of its check.
     * The standard ones: kf__mutation_plans_parse (src/spec/mutation_plans.c). */
    kf_graph *const *plans;
    uint32_t plan_count;
} kf__mutation_options;

typedef struct kf__mutation_result {
    uint32_t kernels;   /* kernel names seen */
    uint32_t checks;    /* operator and plan checks */
    uint32_t baselined; /* of them, run as built (all but in a sample cut short by its budget) */
    uint32_t mutants;   /* mutants there are */
    uint32_t tried;     /* run (all of them, or a sample) */
    uint32_t killed;    /* some check failed (mismatch) */
    uint32_t stillborn; /* the mutant did not compile or run: a check failed loudly */
    uint32_t survived;  /* every check passed */
    uint32_t mattered;  /* of the survivors: changed an output by more than its tolerance */
    uint32_t unchanged; /* of the survivors: every output within tolerance of the original */
    double seconds;
} kf__mutation_result;

/* Runs the checks on ctx as built (they must pass), then each mutant of every kernel they
 * compile, one at a time, against the checks that compile that kernel. A sample's time is at
 * most about twice budget_s: its baseline, then its mutants. */
kf_status kf__mutation_run(kf_context *ctx, const kf__mutation_options *o, kf__mutation_result *r);

#endif

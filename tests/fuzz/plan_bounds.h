/* The in-bounds proof of a plan's kernels, for the graph fuzzer (tests/fuzz/plan_bounds.c). */
#ifndef KT_PLAN_BOUNDS_H
#define KT_PLAN_BOUNDS_H

#include "kfuse.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct kt_plan_bounds {
    uint32_t kernels, accesses, proved, guarded;
    uint32_t interpreted; /* kernels run through the interpreter (the small ones) */
} kt_plan_bounds;

/* Adds the bounds reports of every kernel the plan dispatches to `tally`, and runs each kernel of
 * at most `max_elements` bound elements in the interpreter on random data, with every binding
 * exactly its node's size: false (and the message in msg) when one meets an out-of-bounds
 * access. */
bool kt_plan_in_bounds(const kf_plan *plan, uint64_t max_elements, kt_plan_bounds *tally, char *msg,
                       size_t msg_size);

#endif

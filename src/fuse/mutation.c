/* The mutation campaign (fuse/mutation.h; its mutants: ir/mutate.h): operator checks (kf_op_verify)
 * and fused plans (kf_plan_verify) run once as built, recording which kernels each compiles; then
 * every mutant of those kernels, one at a time, against the checks that compile its kernel.
 *
 * A mutant is killed when a check fails. A surviving mutant "matters" when it changed a
 * kernel's own result by more than the tolerance documented for it, against the original
 * kernel's result on the same inputs: in plans, any group whose inputs are bit for bit what they
 * were as built (so the change is its kernel's, not one arriving from upstream within the
 * upstream group's tolerance) against that group's tolerance; for operator checks, where only
 * kf_op_verify's error against the spec is seen, a mutant's error exceeding the original's by
 * more than the op's tolerance (which implies the change; such a mutant also fails the check).
 *
 * The plans are the caller's graphs (kf__mutation_options.plans: the standard ones are written
 * in the graph language, src/spec/mutation_plans.c), so this layer parses nothing. */
#include "fuse/mutation.h"
#include "fuse/plan_internal.h"
#include "ir/mutate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/ops_internal.h"

#define MAX_VALUES 32

typedef struct check {
    bool plan;
    kf_verify_case vc;
    const kf_graph *graph; /* plans: the caller's (kf__mutation_options.plans) */
    char name[160];
    /* baseline */
    double err; /* op checks: kf_op_verify's error */
    double tol; /* op checks: the op's tolerance */
    /* plans: every group's result as built (node id, value, the group's tolerance) */
    uint32_t value_nodes[MAX_VALUES];
    kf_tensor *values[MAX_VALUES];
    double value_tol[MAX_VALUES];
    uint32_t value_count;
} check;

typedef struct kernel_entry {
    char name[128];
    uint32_t sites[KF__MUTANT_KIND_COUNT];
    uint32_t *checks; /* the checks that compile it */
    uint32_t check_count, check_cap;
} kernel_entry;

typedef struct campaign {
    kf_context *ctx;
    const kf__mutation_options *o;
    check *checks;
    uint32_t check_count, check_cap;
    kernel_entry *kernels;
    uint32_t kernel_count, kernel_cap;
    bool recording;
    uint32_t current; /* the check running while recording */
    /* the mutant in force */
    uint32_t kernel;
    kf__mutant_kind kind;
    uint32_t site;
    uint32_t applied;
    bool oom;
    char why[256]; /* what the last failing check said */
} campaign;

static kernel_entry *find_kernel(campaign *c, const char *name) {
    for (uint32_t i = 0; i < c->kernel_count; i++) {
        if (!strcmp(c->kernels[i].name, name)) {
            return &c->kernels[i];
        }
    }
    return NULL;
}

/* A kernel's identity in a campaign: its name and a hash of its WGSL. Plan kernels are named by
 * what they are ("elementwise", "tail"), not by group, so that equal groups share a pipeline; the
 * hash keeps kernels of one name that compute different things apart, so a mutant changes one
 * kernel, not every kernel of that name. */
static void kernel_key(const kf_kernel *k, char *out, size_t size) {
    kf_kernel *copy = kf_kernel_clone(k);
    char *wgsl = copy ? kf_kernel_emit_wgsl(copy) : NULL;
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const char *ch = wgsl; ch && *ch; ch++) {
        h = (h ^ (uint8_t)*ch) * 16777619u;
    }
    snprintf(out, size, "%.100s#%08x", kf_kernel_name(k), (unsigned)h);
    kf_free(wgsl);
    kf_kernel_destroy(copy);
}

static kf_kernel *transform(void *user, const kf_kernel *k) {
    campaign *c = user;
    char name[128];
    kernel_key(k, name, sizeof name);
    if (c->recording) {
        if (c->o->filter && !strstr(name, c->o->filter)) {
            return NULL;
        }
        kernel_entry *e = find_kernel(c, name);
        if (!e) {
            if (c->kernel_count == c->kernel_cap) {
                uint32_t cap = c->kernel_cap ? 2 * c->kernel_cap : 64;
                kernel_entry *grown = realloc(c->kernels, sizeof *grown * cap);
                if (!grown) {
                    c->oom = true;
                    return NULL;
                }
                c->kernels = grown;
                c->kernel_cap = cap;
            }
            e = &c->kernels[c->kernel_count++];
            memset(e, 0, sizeof *e);
            snprintf(e->name, sizeof e->name, "%s", name);
        }
        uint32_t sites[KF__MUTANT_KIND_COUNT];
        kf__mutant_sites(k, sites);
        for (uint32_t i = 0; i < KF__MUTANT_KIND_COUNT; i++) {
            e->sites[i] = sites[i] > e->sites[i] ? sites[i] : e->sites[i];
        }
        if (e->check_count && e->checks[e->check_count - 1] == c->current) {
            return NULL;
        }
        if (e->check_count == e->check_cap) {
            uint32_t cap = e->check_cap ? 2 * e->check_cap : 8;
            uint32_t *grown = realloc(e->checks, sizeof *grown * cap);
            if (!grown) {
                c->oom = true;
                return NULL;
            }
            e->checks = grown;
            e->check_cap = cap;
        }
        e->checks[e->check_count++] = c->current;
        return NULL;
    }
    if (strcmp(name, c->kernels[c->kernel].name) != 0) {
        return NULL;
    }
    kf_kernel *m = kf__mutant_apply(k, c->kind, c->site);
    c->applied += m != NULL;
    return m;
}

static check *add_check(campaign *c) {
    if (c->check_count == c->check_cap) {
        uint32_t cap = c->check_cap ? 2 * c->check_cap : 64;
        check *grown = realloc(c->checks, sizeof *grown * cap);
        if (!grown) {
            return NULL;
        }
        c->checks = grown;
        c->check_cap = cap;
    }
    check *k = &c->checks[c->check_count++];
    memset(k, 0, sizeof *k);
    return k;
}

static uint64_t case_elements(const kf_op_case *oc) {
    uint64_t elements = 0;
    for (uint32_t j = 0; j < 4; j++) {
        elements += oc->shapes[j].rank || j == 0 ? kf_shape_elements(&oc->shapes[j]) : 0;
    }
    return elements;
}

/* The large cases take seconds each on a CPU driver. */
#define MAX_CASE_ELEMENTS (1u << 18)

static kf_status list_checks(campaign *c) {
    for (uint32_t i = 0; i < kf_op_count(); i++) {
        const kf_operator *op = kf_op_at(i);
        /* quick: the first case and the largest below the limit (past a tile: a loop or an
         * index that only matters beyond the first tile shows there) */
        uint32_t largest = 0;
        for (uint32_t ci = 0; ci < op->case_count; ci++) {
            uint64_t e = case_elements(&op->cases[ci]);
            if (e <= MAX_CASE_ELEMENTS && e > case_elements(&op->cases[largest])) {
                largest = ci;
            }
        }
        for (uint32_t ci = 0; ci < op->case_count; ci++) {
            const kf_op_case *oc = &op->cases[ci];
            if (case_elements(oc) > MAX_CASE_ELEMENTS ||
                (c->o->quick && ci != 0 && ci != largest)) {
                continue;
            }
            for (int dtype = 0; dtype < 2; dtype++) {
                for (int backward = 0; backward < 2; backward++) {
                    if (backward && !kf_op_has_backward(op)) {
                        continue; /* backward operators and sum_to have no backward kernel */
                    }
                    check *k = add_check(c);
                    if (!k) {
                        return KF_ERROR_OUT_OF_MEMORY;
                    }
                    k->vc.op = op;
                    k->vc.params = oc->params;
                    memcpy(k->vc.shapes, oc->shapes, sizeof k->vc.shapes);
                    k->vc.dtype = dtype ? KF_DTYPE_F16 : KF_DTYPE_F32;
                    k->vc.backward = backward;
                    k->vc.seed = c->o->seed + c->check_count;
                    snprintf(k->name, sizeof k->name, "verify %s case %u %s %s", op->name, ci,
                             dtype ? "f16" : "f32", backward ? "backward" : "forward");
                }
            }
        }
    }
    for (uint32_t i = 0; i < c->o->plan_count; i++) {
        check *k = add_check(c);
        if (!k) {
            return KF_ERROR_OUT_OF_MEMORY;
        }
        k->plan = true;
        k->graph = c->o->plans[i];
        snprintf(k->name, sizeof k->name, "plan %u", i + 1);
    }
    return KF_OK;
}

/* The value group gi of plan p wrote, downloaded. */
static kf_status group_value(const kf_plan *p, uint32_t id, kf_tensor **out) {
    kf_status st = kf_tensor_create(&p->graph->nodes[id].shape, out);
    if (st == KF_OK) {
        st = kf__plan_download(p, id, (*out)->data);
    }
    if (st != KF_OK) {
        kf_tensor_destroy(*out);
        *out = NULL;
    }
    return st;
}

static int32_t value_index(const check *k, uint32_t node) {
    for (uint32_t i = 0; i < k->value_count; i++) {
        if (k->value_nodes[i] == node) {
            return (int32_t)i;
        }
    }
    return -1;
}

/* After kf_plan_verify ran p on the check's inputs: the baseline records every value a group
 * writes (its result, its sides) and its tolerance; a mutant's run sets *mattered when some group,
 * reading exactly what it read as built, wrote a result that moved past that group's tolerance (a
 * change that only arrives from upstream, within the upstream group's tolerance, is no change of
 * this kernel's). */
static kf_status plan_values(const kf_plan *p, check *k, const kf_plan_report *rep, bool baseline,
                             bool *mattered) {
    kf_tensor *now[MAX_VALUES] = {0};
    uint32_t nodes[MAX_VALUES];
    uint32_t n = 0;
    kf_status st = KF_OK;
    for (uint32_t gi = 0; gi < p->group_count && n < MAX_VALUES && st == KF_OK; gi++) {
        const kf__group *grp = &p->groups[gi];
        if (grp->kind == KF__GROUP_DEAD || grp->kind == KF__GROUP_HORIZONTAL || !grp->result) {
            continue;
        }
        /* every value the group writes: its result and its sides (a multi-output group) */
        for (uint32_t t = 0; t <= grp->side_count && n < MAX_VALUES && st == KF_OK; t++) {
            nodes[n] = t ? grp->sides[t - 1] : grp->result;
            st = group_value(p, nodes[n], &now[n]);
            n++;
        }
    }
    if (st == KF_OK && baseline) {
        for (uint32_t i = 0; i < n; i++) {
            k->value_nodes[i] = nodes[i];
            k->values[i] = now[i];
            now[i] = NULL;
            /* the group's tolerance, from the report (by the name it gives the result) */
            const kf__node *res = &p->graph->nodes[nodes[i]];
            char label[KF_NAME_MAX + 16];
            snprintf(label, sizeof label, "%s_%u", res->op->name, nodes[i]);
            k->value_tol[i] = INFINITY;
            for (uint32_t r = 0; r < rep->group_count; r++) {
                bool named = !strcmp(rep->groups[r].result, label);
                for (uint32_t o = 0; o < p->graph->output_count; o++) {
                    named |= p->graph->outputs[o].node == nodes[i] &&
                             !strcmp(rep->groups[r].result, p->graph->outputs[o].name);
                }
                if (named) {
                    k->value_tol[i] = rep->groups[r].tolerance;
                }
            }
        }
        k->value_count = n;
    } else if (st == KF_OK) {
        for (uint32_t i = 0; i < n; i++) {
            int32_t base = value_index(k, nodes[i]);
            if (base < 0) {
                continue;
            }
            /* the same inputs as built? */
            uint32_t reads[KF_GROUP_MAX_SLOTS];
            uint32_t nr =
                kf__plan_group_reads(p, (uint32_t)p->group_of[nodes[i]], reads, KF_GROUP_MAX_SLOTS);
            bool same = true;
            for (uint32_t r = 0; r < nr && same; r++) {
                int32_t b = value_index(k, reads[r]);
                uint32_t j = 0;
                while (j < n && nodes[j] != reads[r]) {
                    j++;
                }
                if (b >= 0 && j < n) {
                    same = !memcmp(k->values[b]->data, now[j]->data,
                                   kf_tensor_size(now[j]) * sizeof(float));
                }
            }
            const kf_tensor *ref = k->values[base];
            uint64_t count = kf_tensor_size(ref);
            double floor = kf__verify_floor(ref->data, count);
            double moved = kf_max_rel_error(now[i]->data, ref->data, count, floor);
            *mattered |= same && !(moved <= k->value_tol[base]);
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        kf_tensor_destroy(now[i]);
    }
    return st;
}

typedef enum verdict { PASSED, FAILED, BROKEN } verdict;

/* Runs check k. baseline: records what it computes; else compares with the baseline and sets
 * *mattered when a value moved by more than its tolerance. */
static verdict run_check(campaign *c, check *k, bool baseline, bool *mattered) {
    if (!k->plan) {
        kf_verify_result res;
        kf_status st = kf_op_verify(c->ctx, &k->vc, &res);
        snprintf(c->why, sizeof c->why, "%s", st == KF_OK ? "" : res.message);
        if (baseline) {
            k->err = res.max_rel_error;
            k->tol = res.tolerance;
        } else if (st == KF_OK || st == KF_ERROR_MISMATCH) {
            *mattered |= !(res.max_rel_error - k->err <= k->tol);
        }
        return st == KF_OK ? PASSED : st == KF_ERROR_MISMATCH ? FAILED : BROKEN;
    }
    kf_plan *p = NULL;
    verdict v = BROKEN;
    if (kf_graph_compile(c->ctx, k->graph, NULL, &p) != KF_OK) {
        snprintf(c->why, sizeof c->why, "%s", kf_context_last_error(c->ctx));
        return BROKEN;
    }
    kf_plan_report rep;
    kf_status st = kf_plan_verify(p, c->o->seed, &rep);
    v = st == KF_OK ? PASSED : st == KF_ERROR_MISMATCH ? FAILED : BROKEN;
    snprintf(c->why, sizeof c->why, "%s",
             st == KF_OK               ? ""
             : st == KF_ERROR_MISMATCH ? "a group or an output is outside its tolerance"
                                       : kf_context_last_error(c->ctx));
    if (v == PASSED) {
        st = plan_values(p, k, &rep, baseline, mattered);
        v = st == KF_OK ? PASSED : BROKEN;
    }
    kf_plan_destroy(p);
    return v;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void campaign_free(campaign *c) {
    for (uint32_t i = 0; i < c->check_count; i++) {
        for (uint32_t v = 0; v < c->checks[i].value_count; v++) {
            kf_tensor_destroy(c->checks[i].values[v]);
        }
    }
    for (uint32_t i = 0; i < c->kernel_count; i++) {
        free(c->kernels[i].checks);
    }
    free(c->checks);
    free(c->kernels);
}

/* a[0..n) in a random order from seed (Fisher-Yates) */
static void shuffle(uint32_t *a, uint32_t n, uint64_t seed) {
    uint64_t state = seed;
    for (uint32_t i = n; i > 1; i--) {
        uint32_t j = (uint32_t)(kf__splitmix64(&state) % i);
        uint32_t t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

kf_status kf__mutation_run(kf_context *ctx, const kf__mutation_options *o, kf__mutation_result *r) {
    if (!ctx || !o || !r) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    memset(r, 0, sizeof *r);
    double start = now_s();
    campaign c = {.ctx = ctx, .o = o};
    kf_status st = list_checks(&c);
    kf__context_set_kernel_transform(ctx, transform, &c);
    /* The checks as built: each must pass, and says which kernels it compiles. A sample takes
     * them in a random order and stops its baseline once it took the budget (after one check):
     * on a cold shader cache, or under a sanitizer, compiling every check's kernels takes far
     * longer than the mutants' own budget. Its mutants are then those of the kernels the
     * baselined checks compile, each against those checks. */
    uint32_t *check_order = st == KF_OK ? malloc(sizeof *check_order * (c.check_count + 1)) : NULL;
    st = st == KF_OK && !check_order ? KF_ERROR_OUT_OF_MEMORY : st;
    for (uint32_t i = 0; check_order && i < c.check_count; i++) {
        check_order[i] = i;
    }
    if (check_order && o->budget_s > 0) {
        shuffle(check_order, c.check_count, o->seed ^ 0x636865636b73ULL);
    }
    c.recording = true;
    uint32_t baselined = 0;
    for (; check_order && baselined < c.check_count && st == KF_OK; baselined++) {
        if (o->budget_s > 0 && baselined > 0 && now_s() - start > o->budget_s) {
            break;
        }
        uint32_t i = check_order[baselined];
        c.current = i;
        bool unused = false;
        if (run_check(&c, &c.checks[i], true, &unused) != PASSED) {
            kf__context_set_error(ctx, KF_ERROR_MISMATCH,
                                  "mutation: check '%s' fails on the kernels as built: %s",
                                  c.checks[i].name, c.why);
            st = KF_ERROR_MISMATCH;
        }
    }
    st = st == KF_OK && c.oom ? KF_ERROR_OUT_OF_MEMORY : st;
    c.recording = false;
    free(check_order);
    r->kernels = c.kernel_count;
    r->checks = c.check_count;
    r->baselined = baselined;
    /* Every mutant as (kernel, kind, site), in one list; a sample shuffles it. */
    uint32_t total = 0;
    for (uint32_t i = 0; i < c.kernel_count; i++) {
        for (uint32_t kind = 0; kind < KF__MUTANT_KIND_COUNT; kind++) {
            total += c.kernels[i].sites[kind];
        }
    }
    r->mutants = total;
    uint32_t *order = st == KF_OK ? malloc(sizeof *order * (total ? total : 1)) : NULL;
    st = st == KF_OK && !order ? KF_ERROR_OUT_OF_MEMORY : st;
    for (uint32_t i = 0; order && i < total; i++) {
        order[i] = i;
    }
    if (order && o->budget_s > 0) {
        shuffle(order, total, o->seed ^ 0x6d757461746531ULL);
    }
    double sample_start = now_s(); /* the budget is the mutants' time, after the baseline */
    for (uint32_t m = 0; order && m < total; m++) {
        if (o->budget_s > 0 && r->tried > 0 && now_s() - sample_start > o->budget_s) {
            break;
        }
        if (o->shards > 1 && m % o->shards != o->shard) {
            continue;
        }
        /* mutant number order[m] as (kernel, kind, site) */
        uint32_t index = order[m];
        for (c.kernel = 0; c.kernel < c.kernel_count; c.kernel++) {
            bool found = false;
            for (uint32_t kind = 0; kind < KF__MUTANT_KIND_COUNT && !found; kind++) {
                uint32_t n = c.kernels[c.kernel].sites[kind];
                if (index < n) {
                    c.kind = (kf__mutant_kind)kind;
                    c.site = index;
                    found = true;
                } else {
                    index -= n;
                }
            }
            if (found) {
                break;
            }
        }
        const kernel_entry *e = &c.kernels[c.kernel];
        c.applied = 0;
        verdict worst = PASSED;
        bool mattered = false;
        const char *killer = NULL;
        bool cut = false;
        for (uint32_t i = 0; i < e->check_count && worst == PASSED; i++) {
            /* a sample's budget holds inside a mutant too: one of a kernel that many checks
             * share (a strided load's) ran 600 s of checks in a 2-core CI run; a mutant cut
             * short is not counted */
            if (o->budget_s > 0 && r->tried > 0 && now_s() - sample_start > o->budget_s) {
                cut = true;
                break;
            }
            check *k = &c.checks[e->checks[i]];
            worst = run_check(&c, k, false, &mattered);
            killer = worst != PASSED ? k->name : killer;
        }
        if (cut && worst == PASSED) {
            break;
        }
        r->tried++;
        if (worst == FAILED) {
            r->killed++;
        } else if (worst == BROKEN) {
            r->stillborn++;
        } else {
            r->survived++;
            r->mattered += mattered;
            r->unchanged += !mattered;
        }
        if (o->log && (o->verbose || (worst == PASSED && mattered))) {
            fprintf(o->log, "%s %s site %u (%s): %s%s\n", e->name, kf__mutant_kind_str(c.kind),
                    c.site, c.applied ? "applied" : "not applied",
                    worst == FAILED   ? "killed by "
                    : worst == BROKEN ? "does not run: "
                    : mattered        ? "SURVIVED and it matters"
                                      : "survived, no output moved past its tolerance",
                    worst != PASSED && killer ? killer : "");
            fflush(o->log); /* a run cut short keeps what it found */
        }
        /* Mutants' pipelines are used once: let the context drop them now and then. */
        if (m % 64 == 63) {
            kf__context_forget_pipelines(ctx);
        }
    }
    kf__context_set_kernel_transform(ctx, NULL, NULL);
    free(order);
    campaign_free(&c);
    r->seconds = now_s() - start;
    return st;
}

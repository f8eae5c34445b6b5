/* The in-bounds proof: an interval analysis over a prepared kernel that shows each storage,
 * uniform-array and workgroup index in range, so the device can run without Dawn's robustness
 * pass (which clamps every index at run time).
 *
 * Every integer value gets an interval [lo, hi] (int64, so u32 and i32 both fit) that holds for
 * every invocation wherever the value is used: literals are exact; builtins are bounded by the
 * workgroup size and the grid; loop variables by their loop's start and end; variables by the join
 * of their initial value and everything assigned to them (iterated, widened to the type's range
 * when it keeps growing); arithmetic follows the operands and becomes the type's whole range
 * where it may wrap. Conditions refine: inside `if (a < b)` (and after `if (!(a < b)) { break; }`,
 * and in a for loop's body) a is below b's upper bound and b above a's lower bound; && gives both
 * facts, the else of || gives both negations. A comparison with `arrayLength(&x)`, or a stage's
 * `idx < kf_elements` (a launch refuses "in" or "out" shorter than the elements), bounds an index
 * symbolically.
 *
 * An access is proved when its index interval lies inside what its memory holds: a workgroup
 * array's count, a uniform array's count, a storage binding's length (declared with
 * kf_kernel_set_binding_length, or the launch's buffer; each launch checks it). Otherwise it is
 * guarded, and the emitter clamps (loads) or skips (stores) that access alone. */
#include "ir/ir_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define U32_MAX_ 4294967295LL
#define I32_MIN_ (-2147483647LL - 1)
#define I32_MAX_ 2147483647LL
#define VAR_ROUNDS 3 /* rounds of the variables' fixpoint before they are widened */

typedef struct ival {
    int64_t lo, hi; /* lo > hi: no value reaches here */
    int64_t m;      /* > 1: every value is lo + a multiple of m (loop counters, tile offsets) */
} ival;

typedef struct fact {
    uint32_t node;  /* the value the fact is about */
    ival range;     /* where it lies */
    uint32_t below; /* a LENGTH or OVERRIDE node it is strictly below (0: none) */
} fact;

typedef struct prover {
    const kf_kernel *w;
    const uint64_t *lengths; /* per binding id */
    uint32_t grid[3];        /* 0: unknown */
    uint32_t elements;       /* the kf_elements override of a stage, 0 */
    fact *facts;
    uint32_t fact_count, fact_cap;
    ival *memo;
    uint32_t *memo_epoch;
    uint32_t *canon; /* per node: the first pure node computing the same (facts are about it) */
    uint32_t epoch;
    ival *vars;
    bool vars_grew;
    bool widen;
    bool oom;
    bool judging;  /* the second walk: verdicts and the report */
    uint32_t dead; /* > 0: inside a block no invocation reaches (`if (false)`) */
    kf__bounds *out;
    char *report;
    size_t report_len, report_cap;
} prover;

static const ival EMPTY = {1, 0, 0};

static bool is_int(kf_type t) {
    return t.count == 0 && t.lanes <= 1 &&
           (t.scalar == KF_SCALAR_U32 || t.scalar == KF_SCALAR_I32 || t.scalar == KF_SCALAR_BOOL);
}

static ival type_range(kf_type t) {
    if (t.count == 0 && t.lanes <= 1) {
        switch (t.scalar) {
        case KF_SCALAR_U32:
            return (ival){0, U32_MAX_, 0};
        case KF_SCALAR_I32:
            return (ival){I32_MIN_, I32_MAX_, 0};
        case KF_SCALAR_BOOL:
            return (ival){0, 1, 0};
        default:
            break;
        }
    }
    return (ival){INT64_MIN / 4, INT64_MAX / 4, 0};
}

static bool empty(ival v) {
    return v.lo > v.hi;
}

static int64_t gcd(int64_t a, int64_t b) {
    a = a < 0 ? -a : a;
    b = b < 0 ? -b : b;
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* the modulus to combine: 0 for a single value, else m (at least 1) */
static int64_t mod_of(ival v) {
    return v.lo == v.hi ? 0 : (v.m > 1 ? v.m : 1);
}

static int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

/* v with its bounds moved onto its residue class */
static ival aligned(ival v) {
    if (v.m > 1 && v.lo <= v.hi) {
        v.hi = v.lo + floor_div(v.hi - v.lo, v.m) * v.m;
    }
    if (v.m > 1 && v.lo == v.hi) {
        v.m = 0;
    }
    return v;
}

static ival meet(ival a, ival b) {
    ival r = {a.lo > b.lo ? a.lo : b.lo, a.hi < b.hi ? a.hi : b.hi, 0};
    if (a.m > 1 && r.lo <= r.hi) { /* keep a's residue: round lo up onto it */
        int64_t k = floor_div(r.lo - a.lo + a.m - 1, a.m);
        r.lo = a.lo + k * a.m;
        r.m = a.m;
    }
    return aligned(r);
}

static ival join(ival a, ival b) {
    if (empty(a)) {
        return b;
    }
    if (empty(b)) {
        return a;
    }
    ival r = {a.lo < b.lo ? a.lo : b.lo, a.hi > b.hi ? a.hi : b.hi, 0};
    r.m = gcd(gcd(mod_of(a), mod_of(b)), a.lo - b.lo);
    return aligned(r);
}

/* a range with modulus m (0: none) from lo */
static ival stepped(int64_t lo, int64_t hi, int64_t m) {
    return aligned((ival){lo, hi, m > 1 ? m : 0});
}

/* v if it fits the type (no wrap-around), else the type's whole range */
static ival fit(kf_type t, ival v) {
    ival r = type_range(t);
    if (empty(v)) {
        return v;
    }
    return v.lo >= r.lo && v.hi <= r.hi ? v : r;
}

static ival lit_value(const kf__ir_node *n) {
    switch (n->type.scalar) {
    case KF_SCALAR_U32:
        return (ival){n->bits, n->bits, 0};
    case KF_SCALAR_I32:
        return (ival){(int32_t)n->bits, (int32_t)n->bits, 0};
    case KF_SCALAR_BOOL:
        return (ival){n->bits != 0, n->bits != 0, 0};
    default:
        return type_range(n->type);
    }
}

static ival eval(prover *pv, uint32_t id);

static ival mul(kf_type t, ival a, ival b) {
    int64_t c[4];
    if (__builtin_mul_overflow(a.lo, b.lo, &c[0]) || __builtin_mul_overflow(a.lo, b.hi, &c[1]) ||
        __builtin_mul_overflow(a.hi, b.lo, &c[2]) || __builtin_mul_overflow(a.hi, b.hi, &c[3])) {
        return type_range(t);
    }
    ival r = {c[0], c[0], 0};
    for (int i = 1; i < 4; i++) {
        r.lo = c[i] < r.lo ? c[i] : r.lo;
        r.hi = c[i] > r.hi ? c[i] : r.hi;
    }
    /* (a0 + i ma)(b0 + j mb): a multiple of gcd(a0 mb, b0 ma, ma mb) away from a0 b0 */
    int64_t ma = mod_of(a), mb = mod_of(b), m = 0;
    if (ma <= 0xffffffffLL && mb <= 0xffffffffLL && a.lo > -0xffffffffLL && b.lo > -0xffffffffLL &&
        a.lo < 0xffffffffLL && b.lo < 0xffffffffLL) {
        m = gcd(gcd(a.lo * mb, b.lo * ma), ma * mb);
    }
    if (m > 1 && (c[0] - r.lo) % m == 0) {
        r.m = m;
        r.lo = c[0] - ((c[0] - r.lo) / m) * m;
    }
    return fit(t, aligned(r));
}

static int64_t ones_above(int64_t v) { /* the smallest 2^k - 1 >= v, v >= 0 */
    int64_t m = 0;
    while (m < v) {
        m = m * 2 + 1;
    }
    return m;
}

static ival binary(prover *pv, const kf__ir_node *n) {
    kf_type t = n->type;
    if (!is_int(t) || !is_int(pv->w->nodes[n->args[0]].type) ||
        !is_int(pv->w->nodes[n->args[1]].type)) {
        return type_range(t);
    }
    ival a = eval(pv, n->args[0]), b = eval(pv, n->args[1]);
    if (empty(a) || empty(b)) {
        return EMPTY;
    }
    bool u = t.scalar == KF_SCALAR_U32;
    switch ((kf_op)n->op) {
    case KF_OP_ADD:
        return fit(t, stepped(a.lo + b.lo, a.hi + b.hi, gcd(mod_of(a), mod_of(b))));
    case KF_OP_SUB: /* residues: a.lo - b.hi shares b.lo's class only when b.hi is aligned */
        return fit(t, stepped(a.lo - b.hi, a.hi - b.lo, gcd(mod_of(a), mod_of(b))));
    case KF_OP_MUL:
        return mul(t, a, b);
    case KF_OP_DIV:
        if (a.lo >= 0 && b.lo >= 1) {
            int64_t m = mod_of(a);
            if (b.lo == b.hi && m && m % b.lo == 0) { /* (lo + i m) / c = lo / c + i (m / c) */
                return stepped(a.lo / b.lo, a.hi / b.lo, m / b.lo);
            }
            return (ival){a.lo / b.hi, a.hi / b.lo, 0};
        }
        if (a.lo >= 0 && b.lo >= 0) { /* x / 0 is x */
            return (ival){0, a.hi, 0};
        }
        return type_range(t);
    case KF_OP_MOD:
        if (a.lo >= 0 && b.lo >= 1) {
            if (a.hi < b.lo) {
                return a;
            }
            int64_t m = mod_of(a);
            if (b.lo == b.hi && m % b.lo == 0) { /* every value leaves lo's remainder */
                return (ival){a.lo % b.lo, a.lo % b.lo, 0};
            }
            return (ival){0, a.hi < b.hi - 1 ? a.hi : b.hi - 1, 0};
        }
        if (a.lo >= 0 && b.lo >= 0) { /* x % 0 is 0 */
            return (ival){0, a.hi, 0};
        }
        return type_range(t);
    case KF_OP_BIT_AND:
        if (a.lo >= 0 && b.lo >= 0) {
            return (ival){0, a.hi < b.hi ? a.hi : b.hi, 0};
        }
        if (a.lo >= 0) {
            return (ival){0, a.hi, 0};
        }
        if (b.lo >= 0) {
            return (ival){0, b.hi, 0};
        }
        return type_range(t);
    case KF_OP_BIT_OR:
    case KF_OP_BIT_XOR:
        if (a.lo >= 0 && b.lo >= 0) { /* x | y and x ^ y are at most x | (2^k - 1), y < 2^k */
            int64_t hi = ones_above(a.hi > b.hi ? a.hi : b.hi);
            int64_t ha = a.hi | ones_above(b.hi), hb = b.hi | ones_above(a.hi);
            hi = ha < hi ? ha : hi;
            hi = hb < hi ? hb : hi;
            return fit(t, (ival){0, hi, 0});
        }
        return type_range(t);
    case KF_OP_SHL:
        if (a.lo >= 0 && b.lo == b.hi && b.lo >= 0) {
            int64_t s = b.lo & 31;
            return fit(t, stepped(a.lo << s, a.hi << s, mod_of(a) << s));
        }
        return type_range(t);
    case KF_OP_SHR:
        if (a.lo >= 0 && b.lo == b.hi && b.lo >= 0) {
            int64_t s = b.lo & 31, m = mod_of(a);
            if (m && m % (1ll << s) == 0) {
                return stepped(a.lo >> s, a.hi >> s, m >> s);
            }
            return (ival){a.lo >> s, a.hi >> s, 0};
        }
        if (a.lo >= 0 && (u || b.lo >= 0)) {
            return (ival){0, a.hi, 0};
        }
        return type_range(t);
    default: /* comparisons and logic: bool */
        return type_range(t);
    }
}

static ival call(prover *pv, const kf__ir_node *n) {
    kf_type t = n->type;
    if (!is_int(t)) {
        return type_range(t);
    }
    ival a = n->nargs > 0 ? eval(pv, n->args[0]) : EMPTY;
    ival b = n->nargs > 1 ? eval(pv, n->args[1]) : EMPTY;
    ival c = n->nargs > 2 ? eval(pv, n->args[2]) : EMPTY;
    switch ((kf_fn)n->op) {
    case KF_FN_MIN:
        return (ival){a.lo < b.lo ? a.lo : b.lo, a.hi < b.hi ? a.hi : b.hi, 0};
    case KF_FN_MAX:
        return (ival){a.lo > b.lo ? a.lo : b.lo, a.hi > b.hi ? a.hi : b.hi, 0};
    case KF_FN_CLAMP: { /* min(max(x, lo), hi) */
        ival m = {a.lo > b.lo ? a.lo : b.lo, a.hi > b.hi ? a.hi : b.hi, 0};
        return (ival){m.lo < c.lo ? m.lo : c.lo, m.hi < c.hi ? m.hi : c.hi, 0};
    }
    case KF_FN_SELECT:
        return join(a, b);
    case KF_FN_ABS:
        if (a.lo >= 0) {
            return a;
        }
        if (a.hi <= 0 && a.lo > I32_MIN_) {
            return (ival){-a.hi, -a.lo, 0};
        }
        return type_range(t);
    default:
        return type_range(t);
    }
}

static ival cast(const kf__ir_node *n, const kf__ir_node *arg, ival a) {
    kf_type t = n->type;
    if (!is_int(t) || !is_int(arg->type) || empty(a)) {
        return empty(a) ? a : type_range(t);
    }
    if (t.scalar == KF_SCALAR_BOOL) {
        return a.lo > 0 || a.hi < 0 ? (ival){1, 1, 0}
                                    : (a.lo == 0 && a.hi == 0 ? a : (ival){0, 1, 0});
    }
    if (t.scalar == KF_SCALAR_U32 && a.hi < 0) { /* i32 -> u32 of negatives: a shift by 2^32 */
        return (ival){a.lo + U32_MAX_ + 1, a.hi + U32_MAX_ + 1, 0};
    }
    return fit(t, a);
}

/* Lane `lane` of a vector builtin. A 1-D grid longer than the device's
 * maxComputeWorkgroupsPerDimension (at least 65535 in WebGPU) is folded by the runtime into
 * x * y >= groups workgroups (src/runtime/dispatch.c), so its ids are bounded as folded. */
static ival builtin_lane(prover *pv, kf_builtin b, uint32_t lane) {
    const kf_kernel *w = pv->w;
    lane &= 3u;
    int64_t wg = lane < 3 ? w->workgroup[lane] : 1;
    int64_t g = lane < 3 ? pv->grid[lane] : 1, n = g; /* workgroups: at most g, exactly n */
    if (pv->grid[0] > 65535u && pv->grid[1] == 1 && pv->grid[2] == 1) {
        int64_t groups = pv->grid[0], ymax = (groups + 65534) / 65535;
        g = lane == 0 ? groups : (lane == 1 ? ymax : 1);
        n = 0;
        if (b == KF_BUILTIN_NUM_WORKGROUPS) {
            return lane == 0 ? (ival){(groups + ymax - 1) / ymax, groups, 0}
                             : (lane == 1 ? (ival){1, ymax, 0} : (ival){1, 1, 0});
        }
    }
    switch (b) {
    case KF_BUILTIN_LOCAL_ID:
        return (ival){0, wg - 1, 0};
    case KF_BUILTIN_WORKGROUP_ID:
        return g ? (ival){0, g - 1, 0} : (ival){0, U32_MAX_, 0};
    case KF_BUILTIN_NUM_WORKGROUPS:
        return n ? (ival){n, n, 0} : (ival){1, U32_MAX_, 0};
    case KF_BUILTIN_GLOBAL_ID:
        return g && g * wg - 1 <= U32_MAX_ ? (ival){0, g * wg - 1, 0} : (ival){0, U32_MAX_, 0};
    default:
        return (ival){0, U32_MAX_, 0};
    }
}

static ival compute(prover *pv, uint32_t id) {
    const kf_kernel *w = pv->w;
    const kf__ir_node *n = &w->nodes[id];
    switch ((kf__ir_node_kind)n->kind) {
    case KF__NODE_LIT:
        return lit_value(n);
    case KF__NODE_UNARY: {
        if (!is_int(n->type)) {
            return type_range(n->type);
        }
        ival a = eval(pv, n->args[0]);
        if (n->op == KF_OP_NEG && n->type.scalar == KF_SCALAR_I32 && a.lo > I32_MIN_) {
            return (ival){-a.hi, -a.lo, 0};
        }
        return type_range(n->type);
    }
    case KF__NODE_BINARY:
        return binary(pv, n);
    case KF__NODE_CALL:
        return call(pv, n);
    case KF__NODE_CAST:
    case KF__NODE_BITCAST: {
        const kf__ir_node *arg = &w->nodes[n->args[0]];
        if (n->kind == KF__NODE_BITCAST && arg->type.scalar == KF_SCALAR_BOOL) {
            return type_range(n->type);
        }
        return cast(n, arg, eval(pv, n->args[0]));
    }
    case KF__NODE_EXTRACT: {
        const kf__ir_node *v = &w->nodes[n->args[0]];
        while (v->kind == KF__NODE_NAMED) {
            v = &w->nodes[v->args[0]];
        }
        if (!is_int(n->type) || v->type.count) {
            return type_range(n->type);
        }
        if (v->kind == KF__NODE_BUILTIN) {
            return builtin_lane(pv, (kf_builtin)v->op, n->ref);
        }
        if (v->kind == KF__NODE_VEC && n->ref < v->nargs) {
            return eval(pv, v->args[n->ref]);
        }
        if (v->kind == KF__NODE_SPLAT) {
            return eval(pv, v->args[0]);
        }
        return type_range(n->type);
    }
    case KF__NODE_BUILTIN:
        switch ((kf_builtin)n->op) {
        case KF_BUILTIN_LOCAL_INDEX:
            return (ival){0, (int64_t)w->workgroup[0] * w->workgroup[1] * w->workgroup[2] - 1, 0};
        case KF_BUILTIN_SUBGROUP_INVOCATION_ID:
            return (ival){0, 127, 0};
        case KF_BUILTIN_SUBGROUP_SIZE:
            return (ival){1, 128, 0};
        default:
            return type_range(n->type);
        }
    case KF__NODE_LOOP_VAR: {
        const kf__stmt *s = &w->stmts[n->ref];
        ival start = eval(pv, s->a), end = eval(pv, s->b), step = eval(pv, s->c);
        ival r = type_range(n->type);
        if (empty(start) || empty(end)) {
            return EMPTY;
        }
        /* the body runs for start <= v < end as long as v += step cannot wrap past the end */
        bool no_wrap = step.lo >= 0 && end.hi - 1 + step.hi <= r.hi;
        if (!no_wrap) {
            return (ival){r.lo, end.hi - 1, 0};
        }
        return stepped(start.lo, end.hi - 1, gcd(mod_of(start), gcd(mod_of(step), step.lo)));
    }
    case KF__NODE_NAMED:
        return eval(pv, n->args[0]);
    case KF__NODE_READ:
        if (is_int(n->type) && !w->vars[n->ref].sgmat) {
            return pv->vars[n->ref];
        }
        return type_range(n->type);
    case KF__NODE_SUBGROUP:
        if (is_int(n->type) && (n->op == KF_SUBGROUP_SHUFFLE || n->op == KF_SUBGROUP_BROADCAST ||
                                n->op == KF_SUBGROUP_MAX)) {
            return eval(pv, n->args[0]); /* a value another active invocation holds here */
        }
        return type_range(n->type);
    case KF__NODE_LENGTH: {
        uint64_t len = pv->lengths ? pv->lengths[n->ref] : 0;
        return (ival){len ? (int64_t)(len < (uint64_t)U32_MAX_ ? len : (uint64_t)U32_MAX_) : 1,
                      U32_MAX_, 0};
    }
    default: /* loads, overrides, inputs */
        return type_range(n->type);
    }
}

static ival eval(prover *pv, uint32_t id) {
    if (!id || id >= pv->w->node_count) {
        return (ival){INT64_MIN / 4, INT64_MAX / 4, 0};
    }
    if (pv->memo_epoch[id] == pv->epoch) {
        return pv->memo[id];
    }
    /* a cycle cannot happen (operands precede their users); mark it in progress anyway */
    pv->memo_epoch[id] = pv->epoch;
    pv->memo[id] = type_range(pv->w->nodes[id].type);
    ival v = compute(pv, id);
    for (uint32_t f = 0; f < pv->fact_count; f++) {
        if (pv->facts[f].node == pv->canon[id]) {
            v = meet(v, pv->facts[f].range);
        }
    }
    pv->memo[id] = v;
    return v;
}

/* ---- facts ---- */

static uint32_t strip(const kf_kernel *w, uint32_t id) {
    while (id && w->nodes[id].kind == KF__NODE_NAMED) {
        id = w->nodes[id].args[0];
    }
    return id;
}

static void push_fact(prover *pv, uint32_t node, ival range, uint32_t below) {
    if (pv->fact_count == pv->fact_cap) {
        uint32_t cap = pv->fact_cap ? pv->fact_cap * 2 : 32;
        fact *f = realloc(pv->facts, cap * sizeof *f);
        if (!f) {
            pv->oom = true;
            return;
        }
        pv->facts = f;
        pv->fact_cap = cap;
    }
    pv->facts[pv->fact_count++] = (fact){pv->canon[node], range, below};
    pv->epoch++;
}

static void pop_facts(prover *pv, uint32_t to) {
    if (pv->fact_count != to) {
        pv->fact_count = to;
        pv->epoch++;
    }
}

/* A fact on each side of a < b (strict) or a <= b, about the values and about every name they
 * go by (a `let` of the value, the value under it). */
static void less(prover *pv, uint32_t a, uint32_t b, bool strict) {
    const kf_kernel *w = pv->w;
    ival va = eval(pv, a), vb = eval(pv, b);
    int64_t d = strict ? 1 : 0;
    ival ra = {INT64_MIN / 4, vb.hi - d, 0}, rb = {va.lo + d, INT64_MAX / 4, 0};
    uint32_t sb = strip(w, b);
    uint32_t below =
        strict && (w->nodes[sb].kind == KF__NODE_LENGTH || w->nodes[sb].kind == KF__NODE_OVERRIDE)
            ? sb
            : 0;
    for (uint32_t x = a; x; x = w->nodes[x].kind == KF__NODE_NAMED ? w->nodes[x].args[0] : 0) {
        push_fact(pv, x, ra, below);
    }
    for (uint32_t x = b; x; x = w->nodes[x].kind == KF__NODE_NAMED ? w->nodes[x].args[0] : 0) {
        push_fact(pv, x, rb, 0);
    }
}

/* The facts `cond == truth` gives (none where it gives nothing simple). */
static void assume(prover *pv, uint32_t cond, bool truth, int depth) {
    const kf_kernel *w = pv->w;
    cond = strip(w, cond);
    if (!cond || depth > 16) {
        return;
    }
    const kf__ir_node *n = &w->nodes[cond];
    if (n->type.lanes > 1 || n->type.scalar != KF_SCALAR_BOOL) {
        return;
    }
    if (n->kind == KF__NODE_UNARY && n->op == KF_OP_NOT) {
        assume(pv, n->args[0], !truth, depth + 1);
        return;
    }
    if (n->kind != KF__NODE_BINARY) {
        return;
    }
    uint32_t a = n->args[0], b = n->args[1];
    if ((n->op == KF_OP_AND && truth) || (n->op == KF_OP_OR && !truth)) {
        assume(pv, a, truth, depth + 1);
        assume(pv, b, truth, depth + 1);
        return;
    }
    if (!is_int(w->nodes[a].type) || w->nodes[a].type.scalar == KF_SCALAR_BOOL ||
        !is_int(w->nodes[b].type)) {
        return;
    }
    kf_op op = (kf_op)n->op;
    if (!truth) { /* !(a < b) is b <= a, ... */
        switch (op) {
        case KF_OP_LT:
            op = KF_OP_GE;
            break;
        case KF_OP_LE:
            op = KF_OP_GT;
            break;
        case KF_OP_GT:
            op = KF_OP_LE;
            break;
        case KF_OP_GE:
            op = KF_OP_LT;
            break;
        case KF_OP_EQ:
            op = KF_OP_NE;
            break;
        default:
            return;
        }
    }
    switch (op) {
    case KF_OP_LT:
        less(pv, a, b, true);
        break;
    case KF_OP_LE:
        less(pv, a, b, false);
        break;
    case KF_OP_GT:
        less(pv, b, a, true);
        break;
    case KF_OP_GE:
        less(pv, b, a, false);
        break;
    case KF_OP_EQ:
        less(pv, a, b, false);
        less(pv, b, a, false);
        break;
    default:
        break;
    }
}

/* What a condition is wherever it is evaluated: 0 false, 1 true, -1 either. */
static int truth_of(prover *pv, uint32_t cond, int depth) {
    const kf_kernel *w = pv->w;
    cond = strip(w, cond);
    const kf__ir_node *n = &w->nodes[cond];
    if (!cond || depth > 16 || n->type.lanes > 1 || n->type.scalar != KF_SCALAR_BOOL) {
        return -1;
    }
    if (n->kind == KF__NODE_LIT) {
        return n->bits != 0;
    }
    if (n->kind == KF__NODE_UNARY && n->op == KF_OP_NOT) {
        int t = truth_of(pv, n->args[0], depth + 1);
        return t < 0 ? -1 : !t;
    }
    if (n->kind != KF__NODE_BINARY) {
        return -1;
    }
    if (n->op == KF_OP_AND || n->op == KF_OP_OR) {
        int a = truth_of(pv, n->args[0], depth + 1), b = truth_of(pv, n->args[1], depth + 1);
        int absorbing = n->op == KF_OP_AND ? 0 : 1;
        if (a == absorbing || b == absorbing) {
            return absorbing;
        }
        return a >= 0 && b >= 0 ? !absorbing : -1;
    }
    if (!is_int(w->nodes[n->args[0]].type) || w->nodes[n->args[0]].type.scalar == KF_SCALAR_BOOL) {
        return -1;
    }
    ival a = eval(pv, n->args[0]), b = eval(pv, n->args[1]);
    if (empty(a) || empty(b)) {
        return -1;
    }
    switch ((kf_op)n->op) {
    case KF_OP_LT:
        return a.hi < b.lo ? 1 : (a.lo >= b.hi ? 0 : -1);
    case KF_OP_LE:
        return a.hi <= b.lo ? 1 : (a.lo > b.hi ? 0 : -1);
    case KF_OP_GT:
        return a.lo > b.hi ? 1 : (a.hi <= b.lo ? 0 : -1);
    case KF_OP_GE:
        return a.lo >= b.hi ? 1 : (a.hi < b.lo ? 0 : -1);
    default:
        return -1;
    }
}

/* ---- verdicts ---- */

static void say(prover *pv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(prover *pv, const char *fmt, ...) {
    if (pv->report_cap == 0 || !pv->report) { /* no report asked for (or out of memory) */
        return;
    }
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(pv->report + pv->report_len, pv->report_cap - pv->report_len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            return;
        }
        if (pv->report_len + (size_t)n < pv->report_cap) {
            pv->report_len += (size_t)n;
            return;
        }
        size_t cap = pv->report_cap * 2 + (size_t)n + 64;
        char *r = realloc(pv->report, cap);
        if (!r) {
            pv->oom = true;
            return;
        }
        pv->report = r;
        pv->report_cap = cap;
    }
}

/* Is index node `idx` (range v) strictly below the length of binding `binding`, symbolically? */
static bool below_length(prover *pv, uint32_t idx, uint32_t binding) {
    const kf_kernel *w = pv->w;
    for (uint32_t f = 0; f < pv->fact_count; f++) {
        const fact *ft = &pv->facts[f];
        if (!ft->below || (ft->node != pv->canon[idx] && ft->node != pv->canon[strip(w, idx)])) {
            continue;
        }
        const kf__ir_node *s = &w->nodes[ft->below];
        if (s->kind == KF__NODE_LENGTH && s->ref == binding) {
            return true;
        }
        /* a launch binds "in" and "out" of a stage with at least kf_elements elements */
        if (s->kind == KF__NODE_OVERRIDE && s->ref == pv->elements && pv->elements &&
            w->bindings[binding].role != KF__ROLE_DECLARED) {
            return true;
        }
    }
    return false;
}

static const char *kind_str(int kind) {
    static const char *const names[] = {"load",
                                        "store",
                                        "workgroup load",
                                        "workgroup store",
                                        "subgroup-matrix load",
                                        "subgroup-matrix store"};
    return names[kind];
}

/* Judges an access at [lo, hi] of memory holding `count` elements (0: unknown; storage binding
 * `binding` where that is not 0). Returns the verdict and reports it. */
static uint8_t judge(prover *pv, int kind, const char *mem, ival v, uint64_t count,
                     uint32_t binding, uint32_t idx) {
    if (pv->dead) {
        v = EMPTY;
    }
    bool proved = empty(v) || (v.lo >= 0 && count && (uint64_t)v.hi < count) ||
                  (binding && idx && v.lo >= 0 && below_length(pv, idx, binding));
    pv->out->accesses++;
    if (proved) {
        pv->out->proved++;
    } else {
        pv->out->guarded++;
    }
    if (empty(v)) {
        say(pv, "%s '%s': proved (never reached)\n", kind_str(kind), mem);
    } else if (count) {
        say(pv, "%s '%s': %s: index in [%" PRId64 ", %" PRId64 "], %" PRIu64 " elements\n",
            kind_str(kind), mem, proved ? "proved" : "guarded", v.lo, v.hi, count);
    } else {
        say(pv, "%s '%s': %s: index in [%" PRId64 ", %" PRId64 "]%s\n", kind_str(kind), mem,
            proved ? "proved" : "guarded", v.lo, v.hi,
            proved ? " below its length" : ", length unknown");
    }
    return proved ? KF__ACCESS_PROVED : KF__ACCESS_GUARDED;
}

static uint64_t binding_count_of(prover *pv, uint32_t b) {
    const kf__binding *bd = &pv->w->bindings[b];
    if (bd->kind == KF_BINDING_UNIFORM) {
        return bd->type.count;
    }
    return pv->lengths ? pv->lengths[b] : 0;
}

static void judge_load(prover *pv, uint32_t id) {
    const kf_kernel *w = pv->w;
    const kf__ir_node *n = &w->nodes[id];
    if (n->kind == KF__NODE_LOAD && n->nargs) {
        pv->out->node_verdict[id] =
            judge(pv, 0, kf__str(w, w->bindings[n->ref].name), eval(pv, n->args[0]),
                  binding_count_of(pv, n->ref),
                  w->bindings[n->ref].kind == KF_BINDING_UNIFORM ? 0 : n->ref, n->args[0]);
    } else if (n->kind == KF__NODE_SHARED_LOAD) {
        pv->out->node_verdict[id] = judge(pv, 2, kf__str(w, w->shareds[n->ref].name),
                                          eval(pv, n->args[0]), w->shareds[n->ref].count, 0, 0);
    }
}

static void judge_sgmat(prover *pv, uint32_t sid) {
    const kf_kernel *w = pv->w;
    const kf__stmt *s = &w->stmts[sid];
    const kf__var *v = &w->vars[s->ref];
    bool storage = s->flags & KF__SGMAT_STORAGE;
    ival off = eval(pv, s->a), stride = eval(pv, s->b);
    uint32_t major = s->flags & KF__SGMAT_COL_MAJOR ? v->cols : v->rows; /* strided dimension */
    uint32_t minor = s->flags & KF__SGMAT_COL_MAJOR ? v->rows : v->cols;
    ival span = mul(kf_type_scalar(KF_SCALAR_U32), stride, (ival){major - 1, major - 1, 0});
    ival last = fit(kf_type_scalar(KF_SCALAR_U32),
                    (ival){off.lo + span.lo, off.hi + span.hi + (int64_t)minor - 1, 0});
    if (empty(off) || empty(stride)) {
        last = EMPTY;
    } else if (stride.lo < 0 || off.lo < 0) {
        last = (ival){-1, U32_MAX_, 0};
    }
    const char *mem =
        storage ? kf__str(w, w->bindings[s->d].name) : kf__str(w, w->shareds[s->d].name);
    uint64_t count = storage ? (pv->lengths ? pv->lengths[s->d] : 0) : w->shareds[s->d].count;
    pv->out->stmt_verdict[sid] =
        judge(pv, s->kind == KF__STMT_SGMAT_LOAD ? 4 : 5, mem, last, count, 0, 0);
}

static void judge_store(prover *pv, uint32_t sid) {
    const kf_kernel *w = pv->w;
    const kf__stmt *s = &w->stmts[sid];
    if (s->kind == KF__STMT_STORE) {
        pv->out->stmt_verdict[sid] =
            judge(pv, 1, kf__str(w, w->bindings[s->ref].name), eval(pv, s->a),
                  binding_count_of(pv, s->ref), s->ref, s->a);
        return;
    }
    const kf__shared *sh = &w->shareds[s->ref];
    uint8_t verdict = judge(pv, 3, kf__str(w, sh->name), eval(pv, s->a), sh->count, 0, 0);
    if (s->c) { /* the lane, within the vector */
        ival lane = eval(pv, s->c);
        uint32_t lanes = kf__type_lanes(sh->elem);
        if (!empty(lane) && (lane.lo < 0 || lane.hi >= (int64_t)lanes)) {
            if (verdict == KF__ACCESS_PROVED) {
                pv->out->proved--;
                pv->out->guarded++;
            }
            verdict = KF__ACCESS_GUARDED;
            say(pv, "  its lane in [%" PRId64 ", %" PRId64 "] of %u: guarded\n", lane.lo, lane.hi,
                (unsigned)lanes);
        }
    }
    pv->out->stmt_verdict[sid] = verdict;
}

/* ---- the walk ---- */

static void assign_var(prover *pv, uint32_t var, uint32_t value) {
    const kf_kernel *w = pv->w;
    const kf__var *v = &w->vars[var];
    if (v->sgmat || !is_int(v->type)) {
        return;
    }
    ival now = pv->vars[var];
    ival val = value ? eval(pv, value) : (ival){0, 0, 0};
    ival grown = join(now, val);
    if (grown.lo != now.lo || grown.hi != now.hi) {
        if (pv->widen && !empty(now)) { /* a bound still moving goes to 0, then to the type's */
            ival r = type_range(v->type);
            if (grown.lo < now.lo) {
                grown.lo = now.lo > 0 && grown.lo >= 0 ? 0 : r.lo;
            }
            if (grown.hi > now.hi) {
                grown.hi = r.hi;
            }
        }
        pv->vars[var] = grown;
        pv->vars_grew = true;
    }
}

static void walk(prover *pv, uint32_t block) {
    const kf_kernel *w = pv->w;
    uint32_t mark = pv->fact_count, dead_here = 0;
    for (uint32_t sid = w->blocks[block].first; sid && !pv->oom; sid = w->stmts[sid].next) {
        const kf__stmt *s = &w->stmts[sid];
        switch ((kf__stmt_kind)s->kind) {
        case KF__STMT_LET:
            if (pv->judging) {
                judge_load(pv, s->ref);
            }
            break;
        case KF__STMT_VAR:
            assign_var(pv, s->ref, s->a);
            break;
        case KF__STMT_ASSIGN:
            assign_var(pv, s->ref, s->a);
            break;
        case KF__STMT_STORE:
        case KF__STMT_SHARED_STORE:
            if (pv->judging) {
                judge_store(pv, sid);
            }
            break;
        case KF__STMT_SGMAT_LOAD:
        case KF__STMT_SGMAT_STORE:
            if (pv->judging) {
                judge_sgmat(pv, sid);
            }
            break;
        case KF__STMT_IF: {
            uint32_t m = pv->fact_count;
            int t = truth_of(pv, s->a, 0);
            bool never = t == 0, always = t == 1;
            assume(pv, s->a, true, 0);
            pv->dead += never;
            walk(pv, s->body);
            pv->dead -= never;
            pop_facts(pv, m);
            if (s->else_body) {
                assume(pv, s->a, false, 0);
                pv->dead += always;
                walk(pv, s->else_body);
                pv->dead -= always;
                pop_facts(pv, m);
            }
            break;
        }
        case KF__STMT_FOR: {
            uint32_t m = pv->fact_count;
            less(pv, s->ref, s->b, true);
            walk(pv, s->body);
            pop_facts(pv, m);
            break;
        }
        case KF__STMT_LOOP:
            walk(pv, s->body);
            break;
        case KF__STMT_BREAK_UNLESS: /* the rest of this block runs only where it holds */
            if (truth_of(pv, s->a, 0) == 0) {
                pv->dead++;
                dead_here++;
            }
            assume(pv, s->a, true, 0);
            break;
        default:
            break;
        }
    }
    pv->dead -= dead_here;
    pop_facts(pv, mark);
}

/* Pure nodes built twice from the same operands (`k0 + 32u` in a guard and again in an index)
 * are one value: each node's canonical id is the first such node. */
static bool canonicalize(prover *pv) {
    const kf_kernel *w = pv->w;
    uint32_t cap = 1;
    while (cap < 2 * w->node_count + 2) {
        cap *= 2;
    }
    uint32_t *table = calloc(cap, sizeof *table);
    if (!table) {
        return false;
    }
    for (uint32_t id = 1; id < w->node_count; id++) {
        const kf__ir_node *n = &w->nodes[id];
        pv->canon[id] = id;
        bool pure = n->kind >= KF__NODE_LIT && n->kind <= KF__NODE_LOOP_VAR &&
                    n->kind != KF__NODE_STAGE_IN && n->kind != KF__NODE_INDEX;
        if (!pure) {
            continue;
        }
        uint32_t args[4] = {0};
        uint64_t h = 1469598103934665603ull;
        uint64_t parts[6] = {
            n->kind,
            n->op,
            n->nargs,
            n->ref,
            n->bits,
            ((uint64_t)n->type.scalar << 40) ^ ((uint64_t)n->type.lanes << 20) ^ n->type.count};
        for (int i = 0; i < 6; i++) {
            h = (h ^ parts[i]) * 1099511628211ull;
        }
        for (uint32_t i = 0; i < n->nargs && i < 4; i++) {
            args[i] = pv->canon[n->args[i]];
            h = (h ^ args[i]) * 1099511628211ull;
        }
        for (uint32_t slot = (uint32_t)(h & (cap - 1));; slot = (slot + 1) & (cap - 1)) {
            uint32_t other = table[slot];
            if (!other) {
                table[slot] = id;
                break;
            }
            const kf__ir_node *o = &w->nodes[other];
            bool same = o->kind == n->kind && o->op == n->op && o->nargs == n->nargs &&
                        o->ref == n->ref && o->bits == n->bits && kf_type_eq(o->type, n->type);
            for (uint32_t i = 0; same && i < n->nargs && i < 4; i++) {
                same = pv->canon[o->args[i]] == args[i];
            }
            if (same) {
                pv->canon[id] = other;
                break;
            }
        }
    }
    free(table);
    return true;
}

kf__bounds *kf__bounds_prove(const kf_kernel *w, const uint64_t *lengths, const uint32_t grid[3],
                             bool report) {
    kf__bounds *out = calloc(1, sizeof *out);
    prover pv;
    memset(&pv, 0, sizeof pv);
    pv.w = w;
    pv.out = out;
    uint64_t *declared = calloc(w->binding_count ? w->binding_count : 1, sizeof *declared);
    if (out) {
        out->node_verdict = calloc(w->node_count ? w->node_count : 1, 1);
        out->stmt_verdict = calloc(w->stmt_count ? w->stmt_count : 1, 1);
    }
    pv.memo = calloc(w->node_count ? w->node_count : 1, sizeof *pv.memo);
    pv.memo_epoch = calloc(w->node_count ? w->node_count : 1, sizeof *pv.memo_epoch);
    pv.vars = calloc(w->var_count ? w->var_count : 1, sizeof *pv.vars);
    pv.canon = calloc(w->node_count ? w->node_count : 1, sizeof *pv.canon);
    if (!out || !declared || !out->node_verdict || !out->stmt_verdict || !pv.memo ||
        !pv.memo_epoch || !pv.vars || !pv.canon || !canonicalize(&pv)) {
        free(pv.canon);
        free(declared);
        free(pv.memo);
        free(pv.memo_epoch);
        free(pv.vars);
        kf__bounds_free(out);
        return NULL;
    }
    for (uint32_t b = 1; b < w->binding_count; b++) {
        declared[b] = lengths ? lengths[b] : w->bindings[b].length;
    }
    pv.lengths = declared;
    bool given = grid && (grid[0] || grid[1] || grid[2]);
    const uint32_t *g = given ? grid : w->grid;
    if (g[0] || g[1] || g[2]) {
        for (int i = 0; i < 3; i++) {
            pv.grid[i] = g[i] ? g[i] : 1;
        }
    }
    uint32_t eo = kf__override_find(w, "kf_elements");
    for (uint32_t b = 1; eo && b < w->binding_count; b++) {
        if (w->bindings[b].role == KF__ROLE_IN) {
            pv.elements = eo;
        }
    }
    pv.epoch = 1;
    for (uint32_t v = 1; v < w->var_count; v++) {
        pv.vars[v] = EMPTY;
    }
    /* the variables: what they can hold, to a fixpoint (widened when it keeps growing) */
    for (int round = 0; round < VAR_ROUNDS + 4; round++) {
        pv.vars_grew = false;
        pv.widen = round >= VAR_ROUNDS;
        pv.epoch++;
        walk(&pv, 1);
        if (!pv.vars_grew) {
            break;
        }
    }
    if (pv.vars_grew) { /* still growing after widening: give up on them */
        for (uint32_t v = 1; v < w->var_count; v++) {
            pv.vars[v] = type_range(w->vars[v].type);
        }
    }
    pv.epoch++;
    pv.judging = true;
    if (report) {
        pv.report_cap = 256;
        pv.report = malloc(pv.report_cap);
        if (pv.report) {
            pv.report[0] = '\0';
        } else {
            pv.oom = true;
        }
    }
    walk(&pv, 1);
    out->report = pv.report;
    free(declared);
    free(pv.facts);
    free(pv.memo);
    free(pv.memo_epoch);
    free(pv.vars);
    free(pv.canon);
    if (pv.oom) {
        kf__bounds_free(out);
        return NULL;
    }
    return out;
}

void kf__bounds_free(kf__bounds *b) {
    if (b) {
        free(b->node_verdict);
        free(b->stmt_verdict);
        free(b->report);
        free(b);
    }
}

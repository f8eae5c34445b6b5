/* The CPU interpreter: runs a prepared kernel (the same IR the WGSL emitter writes) one workgroup
 * at a time, all invocations of a workgroup in lockstep (SIMT) with a per-invocation active mask.
 * Lockstep makes barriers natural (every invocation has finished the statements before it) and
 * subgroups plain (consecutive local indices, subgroup_size at a time). Values are kept per
 * invocation as 32-bit words: f32 as its bits, f16 as the bits of the f32 holding the half value
 * (every f16 operation rounds to half precision, ties to even), integers wrap as in WGSL. */
#include "ir/ir_internal.h"
#include "core/core.h"
#include "core/half.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* kf__is_float, inlined: the interpreter asks it for every arithmetic operation */
static inline bool is_float(kf_scalar s) {
    return s == KF_SCALAR_F32 || s == KF_SCALAR_F16;
}

#define KF__LOOP_LIMIT (1u << 22) /* iterations of one loop before it is called runaway */

enum { LANE_RUN = 0, LANE_BROKE, LANE_CONTINUED };

typedef struct ibuf {
    uint8_t *data;
    uint64_t size;
    uint64_t length; /* elements (storage) */
    uint32_t stride;
    const char *name;
} ibuf;

typedef struct interp {
    const kf_kernel *w;
    kf_kernel *user;
    uint32_t lanes, sg;
    uint32_t wid[3], nwg[3];
    size_t *slot;
    uint32_t *vals;
    size_t *var_slot;
    uint32_t *vars;
    size_t *shared_slot;
    uint32_t *shared;
    size_t shared_words;
    ibuf *bufs;
    uint32_t *override_bits;
    uint8_t *state;
    kf_status st;
    /* a dispatch's bounds check (kf__checker): constants exactly as the pipeline's (no
     * kf_elements derived from "in"), and the work done counted */
    bool faithful;
    uint64_t work;   /* statements run x invocations running them */
    uint32_t *words; /* per node: kf__type_words of its type (NULL: the folder's) */
    /* The proof behind the WGSL a checked dispatch runs (kf__checker): an access it left
     * guarded does on the CPU what the emitted guard does on the GPU when out of bounds (a load
     * reads the last element, a store is skipped), counted in guards_fired; an out-of-bounds
     * access anywhere else is an error. NULL: every access must be in bounds. */
    const uint8_t *node_verdict, *stmt_verdict;
    uint64_t guards_fired;
    /* Addresses only (a checked kernel whose addresses do not depend on data): the nodes an
     * index, lane or condition depends on; every other pure value, and every subgroup-matrix
     * product, is left uncomputed (its storage holds garbage, which nothing reads). The
     * accesses themselves all run, each at its let. NULL: everything is computed. */
    const uint8_t *address_nodes;
    uint64_t address_hash; /* of every access's memory and index, in order */
    /* Active masks, a stack (blocks, branches and loops nest): lanes bytes each. */
    uint8_t *masks;
    size_t mask_top, mask_cap;
    /* The race detector (off with $KF_CHECK_RACES=0): per word of workgroup memory, who last
     * wrote it and who read it, and in which epoch (epochs end at each workgroupBarrier and
     * at each workgroup). Lockstep hides races (every invocation finishes a statement before
     * any starts the next), so two accesses of a word in one epoch by different invocations,
     * one of them a write, are what the GPU may reorder; a subgroup-matrix load or store is an
     * access by every invocation of its subgroup (WGSL has no subgroup-scoped barrier).
     * NULL: off. */
    struct race_cell *race;
    uint32_t epoch;
    /* kf_interp_desc.f16_casts_unrounded */
    bool f16_wide;
} interp;

typedef struct race_cell {
    uint32_t write_epoch, writer, read_epoch, reader;
} race_cell;

#define RACE_GROUP                                                                                 \
    0x80000000u               /* an accessor: subgroup (RACE_GROUP | g), every invocation of it    \
                               */
#define RACE_MANY 0xffffffffu /* readers: more than one in the epoch */

static float fw(uint32_t w) {
    float f;
    memcpy(&f, &w, sizeof f);
    return f;
}

static uint32_t wf32(float f) {
    uint32_t w;
    memcpy(&w, &f, sizeof w);
    return w;
}

static float r16(float f) {
    return kf__half_to_float(kf__half_from_float(f));
}

/* the word of a float result of scalar type s */
static uint32_t wfloat(kf_scalar s, float f) {
    return wf32(s == KF_SCALAR_F16 ? r16(f) : f);
}

static inline __attribute__((always_inline)) uint32_t *V(interp *ip, uint32_t node, uint32_t lane) {
    uint32_t words = ip->words ? ip->words[node] : kf__type_words(ip->w->nodes[node].type);
    return ip->vals + ip->slot[node] + (size_t)lane * words;
}

/* A mask of ip->lanes bytes on the mask stack, NULL when it is full; released (with every mask
 * pushed after it) by mask_pop. */
static uint8_t *mask_push(interp *ip) {
    if (ip->mask_top + ip->lanes > ip->mask_cap) {
        return NULL;
    }
    uint8_t *m = ip->masks + ip->mask_top;
    ip->mask_top += ip->lanes;
    return m;
}

static void mask_pop(interp *ip, uint8_t *m) {
    if (m) {
        ip->mask_top = (size_t)(m - ip->masks);
    }
}

static bool fail(interp *ip, kf_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool fail(interp *ip, kf_status st, const char *fmt, ...) {
    if (ip->st != KF_OK) {
        return false;
    }
    char msg[KF__KERNEL_ERROR_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ip->st = kf__run_fail(ip->user, st, "kf_kernel_interpret: %s (workgroup %u,%u,%u)", msg,
                          (unsigned)ip->wid[0], (unsigned)ip->wid[1], (unsigned)ip->wid[2]);
    return false;
}

/* ======================================================================================== */
/* scalar semantics                                                                         */
/* ======================================================================================== */

static uint32_t shr_i32(uint32_t a, uint32_t n) {
    int32_t v = (int32_t)a;
    return v < 0 ? ~(~a >> n) : a >> n;
}

static uint32_t bin1(kf_scalar s, kf_op op, uint32_t a, uint32_t b) {
    if (is_float(s)) {
        float x = fw(a), y = fw(b);
        switch (op) {
        case KF_OP_ADD:
            return wfloat(s, x + y);
        case KF_OP_SUB:
            return wfloat(s, x - y);
        case KF_OP_MUL:
            return wfloat(s, x * y);
        case KF_OP_DIV:
            return wfloat(s, x / y);
        case KF_OP_MOD: /* WGSL: e1 - e2 * trunc(e1 / e2) */
            return wfloat(s, x - y * truncf(x / y));
        case KF_OP_EQ:
            return x == y;
        case KF_OP_NE:
            return x != y;
        case KF_OP_LT:
            return x < y;
        case KF_OP_LE:
            return x <= y;
        case KF_OP_GT:
            return x > y;
        case KF_OP_GE:
            return x >= y;
        default:
            return 0;
        }
    }
    if (s == KF_SCALAR_I32) {
        int32_t x = (int32_t)a, y = (int32_t)b;
        switch (op) {
        case KF_OP_ADD:
            return a + b;
        case KF_OP_SUB:
            return a - b;
        case KF_OP_MUL:
            return a * b;
        case KF_OP_DIV: /* WGSL: x / 0 and INT_MIN / -1 are x */
            return (y == 0 || (a == 0x80000000u && y == -1)) ? a : (uint32_t)(x / y);
        case KF_OP_MOD: /* WGSL: x % 0 and INT_MIN % -1 are 0 */
            return (y == 0 || (a == 0x80000000u && y == -1)) ? 0u : (uint32_t)(x % y);
        case KF_OP_EQ:
            return x == y;
        case KF_OP_NE:
            return x != y;
        case KF_OP_LT:
            return x < y;
        case KF_OP_LE:
            return x <= y;
        case KF_OP_GT:
            return x > y;
        case KF_OP_GE:
            return x >= y;
        case KF_OP_BIT_AND:
            return a & b;
        case KF_OP_BIT_OR:
            return a | b;
        case KF_OP_BIT_XOR:
            return a ^ b;
        case KF_OP_SHL:
            return a << (b & 31u);
        case KF_OP_SHR:
            return shr_i32(a, b & 31u);
        default:
            return 0;
        }
    }
    if (s == KF_SCALAR_U32) {
        switch (op) {
        case KF_OP_ADD:
            return a + b;
        case KF_OP_SUB:
            return a - b;
        case KF_OP_MUL:
            return a * b;
        case KF_OP_DIV:
            return b == 0 ? a : a / b;
        case KF_OP_MOD:
            return b == 0 ? 0u : a % b;
        case KF_OP_EQ:
            return a == b;
        case KF_OP_NE:
            return a != b;
        case KF_OP_LT:
            return a < b;
        case KF_OP_LE:
            return a <= b;
        case KF_OP_GT:
            return a > b;
        case KF_OP_GE:
            return a >= b;
        case KF_OP_BIT_AND:
            return a & b;
        case KF_OP_BIT_OR:
            return a | b;
        case KF_OP_BIT_XOR:
            return a ^ b;
        case KF_OP_SHL:
            return a << (b & 31u);
        case KF_OP_SHR:
            return a >> (b & 31u);
        default:
            return 0;
        }
    }
    /* bool */
    switch (op) {
    case KF_OP_AND:
        return a && b;
    case KF_OP_OR:
        return a || b;
    case KF_OP_EQ:
        return a == b;
    case KF_OP_NE:
        return a != b;
    default:
        return 0;
    }
}

static uint32_t un1(kf_scalar s, kf_op op, uint32_t a) {
    switch (op) {
    case KF_OP_NEG:
        return is_float(s) ? wf32(-fw(a)) : 0u - a;
    case KF_OP_NOT:
        return !a;
    case KF_OP_BIT_NOT:
        return ~a;
    default:
        return 0;
    }
}

static bool lt_s(kf_scalar s, uint32_t a, uint32_t b) {
    if (is_float(s)) {
        return fw(a) < fw(b);
    }
    return s == KF_SCALAR_I32 ? (int32_t)a < (int32_t)b : a < b;
}

static uint32_t min1(kf_scalar s, uint32_t a, uint32_t b) {
    return lt_s(s, b, a) ? b : a;
}

static uint32_t max1(kf_scalar s, uint32_t a, uint32_t b) {
    return lt_s(s, a, b) ? b : a;
}

static uint32_t call1(kf_scalar s, kf_fn fn, const uint32_t *a) {
    if (is_float(s)) {
        float x = fw(a[0]);
        float y = fw(a[1]);
        switch (fn) {
        case KF_FN_EXP:
            return wfloat(s, expf(x));
        case KF_FN_LOG:
            return wfloat(s, logf(x));
        case KF_FN_TANH:
            return wfloat(s, tanhf(x));
        case KF_FN_SQRT:
            return wfloat(s, sqrtf(x));
        case KF_FN_INVERSE_SQRT:
            return wfloat(s, 1.0f / sqrtf(x));
        case KF_FN_ABS:
            return wfloat(s, fabsf(x));
        case KF_FN_FLOOR:
            return wfloat(s, floorf(x));
        case KF_FN_SIN:
            return wfloat(s, sinf(x));
        case KF_FN_COS:
            return wfloat(s, cosf(x));
        case KF_FN_ERF: /* f16: the f32 approximation rounded once, as the WGSL helper does */
            return wfloat(s, kf__erf_f32(x));
        case KF_FN_POW:
            return wfloat(s, powf(x, y));
        case KF_FN_FMA:
            return wfloat(s, (float)((double)x * (double)y + (double)fw(a[2])));
        default:
            break;
        }
    }
    switch (fn) {
    case KF_FN_ABS:
        return s == KF_SCALAR_I32 && (int32_t)a[0] < 0 ? 0u - a[0] : a[0];
    case KF_FN_MIN:
        return min1(s, a[0], a[1]);
    case KF_FN_MAX:
        return max1(s, a[0], a[1]);
    case KF_FN_CLAMP:
        return min1(s, max1(s, a[0], a[1]), a[2]);
    default:
        return 0;
    }
}

static uint32_t convert1(kf_scalar to, kf_scalar from, uint32_t a) {
    float f = 0;
    switch (from) {
    case KF_SCALAR_F32:
    case KF_SCALAR_F16:
        f = fw(a);
        break;
    case KF_SCALAR_I32:
        f = (float)(int32_t)a;
        break;
    case KF_SCALAR_U32:
        f = (float)a;
        break;
    case KF_SCALAR_BOOL:
        f = a ? 1.0f : 0.0f;
        break;
    default:
        break;
    }
    switch (to) {
    case KF_SCALAR_F32:
    case KF_SCALAR_F16:
        return wfloat(to, f);
    case KF_SCALAR_I32:
        if (!is_float(from)) {
            return from == KF_SCALAR_BOOL ? (a ? 1u : 0u) : a; /* u32 -> i32 keeps the bits */
        }
        /* WGSL clamps to the i32 values an f32 can hold, [-2^31, 2^31 - 128], then truncates
         * (what the GPU gives too); NaN gives 0 here */
        if (f != f) {
            return 0;
        }
        if (f >= 2147483520.0f) {
            return 0x7fffff80u;
        }
        return f < -2147483648.0f ? 0x80000000u : (uint32_t)(int32_t)truncf(f);
    case KF_SCALAR_U32:
        if (!is_float(from)) {
            return from == KF_SCALAR_BOOL ? (a ? 1u : 0u) : a;
        }
        if (f != f) {
            return 0;
        }
        if (f >= 4294967040.0f) {
            return 0xffffff00u; /* 2^32 - 256, the largest u32 an f32 holds */
        }
        return f < 0.0f ? 0u : (uint32_t)truncf(f);
    case KF_SCALAR_BOOL:
        return is_float(from) ? f != 0.0f : a != 0;
    default:
        return 0;
    }
}

/* ======================================================================================== */
/* expressions                                                                              */
/* ======================================================================================== */

static bool eval(interp *ip, uint32_t id, const uint8_t *m);
static bool compute(interp *ip, uint32_t id, const uint8_t *m);

#define FOR_LANES(ip, m, l)                                                                        \
    for (uint32_t l = 0; l < (ip)->lanes; l++)                                                     \
        if ((m)[l])

static void builtin_value(interp *ip, kf_builtin b, uint32_t lane, uint32_t *out) {
    const uint32_t *wg = ip->w->workgroup;
    uint32_t local[3] = {lane % wg[0], (lane / wg[0]) % wg[1], lane / (wg[0] * wg[1])};
    switch (b) {
    case KF_BUILTIN_GLOBAL_ID:
        for (int i = 0; i < 3; i++) {
            out[i] = ip->wid[i] * wg[i] + local[i];
        }
        break;
    case KF_BUILTIN_LOCAL_ID:
        memcpy(out, local, sizeof local);
        break;
    case KF_BUILTIN_LOCAL_INDEX:
        out[0] = lane;
        break;
    case KF_BUILTIN_WORKGROUP_ID:
        memcpy(out, ip->wid, sizeof ip->wid);
        break;
    case KF_BUILTIN_NUM_WORKGROUPS:
        memcpy(out, ip->nwg, sizeof ip->nwg);
        break;
    case KF_BUILTIN_SUBGROUP_INVOCATION_ID:
        out[0] = lane % ip->sg;
        break;
    case KF_BUILTIN_SUBGROUP_SIZE:
        out[0] = ip->sg;
        break;
    default:
        break;
    }
}

/* Packs a value's lanes into 32-bit words (two halves per word for f16). */
static uint32_t pack_bits(kf_type t, const uint32_t *v, uint32_t *words) {
    uint32_t lanes = kf__type_lanes(t);
    if (t.scalar != KF_SCALAR_F16) {
        memcpy(words, v, lanes * sizeof *v);
        return lanes;
    }
    uint32_t n = lanes / 2;
    for (uint32_t i = 0; i < n; i++) {
        words[i] = (uint32_t)kf__half_from_float(fw(v[2 * i])) |
                   ((uint32_t)kf__half_from_float(fw(v[2 * i + 1])) << 16);
    }
    return n;
}

static void unpack_bits(kf_type t, const uint32_t *words, uint32_t *v) {
    uint32_t lanes = kf__type_lanes(t);
    for (uint32_t i = 0; i < lanes; i++) {
        if (t.scalar == KF_SCALAR_F16) {
            v[i] = wf32(kf__half_to_float((uint16_t)(words[i / 2] >> (16 * (i % 2)))));
        } else {
            v[i] = words[i];
        }
    }
}

static bool index_of(interp *ip, uint32_t idx_node, uint32_t lane, int64_t *out) {
    kf_type t = ip->w->nodes[idx_node].type;
    uint32_t w = V(ip, idx_node, lane)[0];
    *out = t.scalar == KF_SCALAR_I32 ? (int64_t)(int32_t)w : (int64_t)w;
    return true;
}

static void read_elem(const uint8_t *p, kf_type t, uint32_t *out) {
    uint32_t lanes = kf__type_lanes(t);
    for (uint32_t c = 0; c < lanes; c++) {
        if (t.scalar == KF_SCALAR_F16) {
            uint16_t h;
            memcpy(&h, p + 2 * c, 2);
            out[c] = wf32(kf__half_to_float(h));
        } else {
            memcpy(&out[c], p + 4 * c, 4);
        }
    }
}

static void write_elem(uint8_t *p, kf_type t, const uint32_t *in) {
    uint32_t lanes = kf__type_lanes(t);
    for (uint32_t c = 0; c < lanes; c++) {
        if (t.scalar == KF_SCALAR_F16) {
            uint16_t h = kf__half_from_float(fw(in[c]));
            memcpy(p + 2 * c, &h, 2);
        } else {
            memcpy(p + 4 * c, &in[c], 4);
        }
    }
}

/* Who an accessor is, for a race's message. */
static void race_who(const interp *ip, uint32_t who, char *out, size_t size) {
    if (who == RACE_MANY) {
        snprintf(out, size, "several invocations");
    } else if (who & RACE_GROUP) {
        snprintf(out, size, "subgroup %u (invocations %u..%u, a subgroup-matrix access)",
                 (unsigned)(who & ~RACE_GROUP), (unsigned)((who & ~RACE_GROUP) * ip->sg),
                 (unsigned)((who & ~RACE_GROUP) * ip->sg + ip->sg - 1));
    } else {
        snprintf(out, size, "invocation %u", (unsigned)who);
    }
}

/* Records an access by `who` (an invocation, or RACE_GROUP | subgroup) to element i of
 * workgroup array ref, words [i * ew + first, + count); false (with the error) on a race. */
static bool race_access(interp *ip, uint32_t ref, int64_t i, uint32_t first, uint32_t count,
                        uint32_t who, bool write) {
    const kf__shared *sh = &ip->w->shareds[ref];
    uint32_t ew = kf__type_words(sh->elem);
    race_cell *cell = ip->race + ip->shared_slot[ref] + (size_t)i * ew + first;
    for (uint32_t c = 0; c < count; c++, cell++) {
        bool alone = !(who & RACE_GROUP);
        uint32_t other = 0;
        int kind = 0; /* 1: read after a write, 2: two writes, 3: a write after a read */
        if (cell->write_epoch == ip->epoch && !(alone && cell->writer == who)) {
            other = cell->writer;
            kind = write ? 2 : 1;
        } else if (write && cell->read_epoch == ip->epoch && !(alone && cell->reader == who)) {
            other = cell->reader;
            kind = 3;
        }
        if (kind) {
            char a[80], b[80], ts[48], pair[200];
            race_who(ip, who, a, sizeof a);
            race_who(ip, other, b, sizeof b);
            if (kind == 1) {
                snprintf(pair, sizeof pair, "read by %s after %s wrote it", a, b);
            } else if (kind == 2) {
                snprintf(pair, sizeof pair, "written by %s and by %s", a, b);
            } else {
                snprintf(pair, sizeof pair, "written by %s after %s read it", a, b);
            }
            return fail(ip, KF_ERROR_INVALID_ARGUMENT,
                        "data race on workgroup array '%s' (%s), element %lld: %s with no "
                        "workgroupBarrier between (KF_CHECK_RACES=0 turns the check off)",
                        kf__str(ip->w, sh->name), kf_type_str(sh->elem, ts, sizeof ts),
                        (long long)i, pair);
        }
        if (write) {
            cell->write_epoch = ip->epoch;
            cell->writer = who;
        } else if (cell->read_epoch != ip->epoch) {
            cell->read_epoch = ip->epoch;
            cell->reader = who;
        } else if (cell->reader != who) {
            cell->reader = RACE_MANY;
        }
    }
    return true;
}

/* Folds an access (memory `ref`, storage or workgroup, and index i) into the run's hash. */
static void note(interp *ip, uint32_t ref, bool shared, int64_t i) {
    uint64_t v = (uint64_t)i * 0x9e3779b97f4a7c15ull + ref * 2u + shared;
    ip->address_hash = (ip->address_hash ^ v) * 1099511628211ull;
}

/* Is the access at `at` (a node or statement of `verdicts`) one the emitter guards? Then its
 * being out of bounds is what the guard is for: counted, not an error. */
static bool guarded(interp *ip, const uint8_t *verdicts, uint32_t at) {
    if (verdicts && verdicts[at] == KF__ACCESS_GUARDED) {
        ip->guards_fired++;
        return true;
    }
    return false;
}

/* What a failing access means on the GPU, when the check knows the proof. */
static const char *unguarded(const interp *ip) {
    return ip->node_verdict ? "; the proof found it in bounds, so the GPU runs it unguarded" : "";
}

static bool do_load(interp *ip, uint32_t id, uint32_t lane) {
    const kf__ir_node *n = &ip->w->nodes[id];
    const kf__binding *b = &ip->w->bindings[n->ref];
    const ibuf *buf = &ip->bufs[n->ref];
    uint32_t *out = V(ip, id, lane);
    char ts[48];
    if (b->kind == KF_BINDING_UNIFORM) {
        if (!n->nargs) { /* the whole uniform */
            kf_type elem = kf__type_elem(b->type);
            uint32_t count = b->type.count ? b->type.count : 1;
            uint32_t stride = b->type.count ? kf__type_stride(b->type) : 0;
            uint32_t ew = kf__type_lanes(elem);
            for (uint32_t e = 0; e < count; e++) {
                read_elem(buf->data + (size_t)e * stride, b->type.count ? elem : b->type,
                          out + e * ew);
            }
            return true;
        }
        int64_t i;
        index_of(ip, n->args[0], lane, &i);
        note(ip, n->ref, false, i);
        if ((i < 0 || i >= (int64_t)b->type.count) && b->type.count &&
            guarded(ip, ip->node_verdict, id)) {
            i = (int64_t)b->type.count - 1;
        }
        if (i < 0 || i >= (int64_t)b->type.count) {
            return fail(ip, KF_ERROR_INVALID_ARGUMENT,
                        "load from uniform '%s' at index %lld is out of bounds (%s)%s", buf->name,
                        (long long)i, kf_type_str(b->type, ts, sizeof ts), unguarded(ip));
        }
        read_elem(buf->data + (size_t)i * kf__type_stride(b->type), kf__type_elem(b->type), out);
        return true;
    }
    int64_t i;
    index_of(ip, n->args[0], lane, &i);
    note(ip, n->ref, false, i);
    if ((i < 0 || (uint64_t)i >= buf->length) && buf->length && guarded(ip, ip->node_verdict, id)) {
        i = (int64_t)buf->length - 1;
    }
    if (i < 0 || (uint64_t)i >= buf->length) {
        return fail(ip, KF_ERROR_INVALID_ARGUMENT,
                    "load from '%s' at index %lld is out of bounds (it holds %llu elements of "
                    "%s)%s",
                    buf->name, (long long)i, (unsigned long long)buf->length,
                    kf_type_str(b->type, ts, sizeof ts), unguarded(ip));
    }
    read_elem(buf->data + (size_t)i * buf->stride, b->type, out);
    return true;
}

static bool do_subgroup(interp *ip, uint32_t id, const uint8_t *m) {
    const kf__ir_node *n = &ip->w->nodes[id];
    kf_type t = n->type;
    kf_scalar s = t.scalar;
    uint32_t comps = kf__type_lanes(t);
    for (uint32_t g = 0; g < ip->lanes; g += ip->sg) {
        uint32_t end = g + ip->sg < ip->lanes ? g + ip->sg : ip->lanes;
        bool any = false;
        uint32_t acc[4] = {0};
        for (uint32_t l = g; l < end; l++) {
            if (!m[l]) {
                continue;
            }
            const uint32_t *v = V(ip, n->args[0], l);
            for (uint32_t c = 0; c < comps; c++) {
                if (!any) {
                    acc[c] = v[c];
                } else if (n->op == KF_SUBGROUP_ADD) {
                    acc[c] = bin1(s, KF_OP_ADD, acc[c], v[c]);
                } else if (n->op == KF_SUBGROUP_MAX) {
                    acc[c] = max1(s, acc[c], v[c]);
                }
            }
            any = true;
        }
        for (uint32_t l = g; l < end; l++) {
            if (!m[l]) {
                continue;
            }
            uint32_t *out = V(ip, id, l);
            if (n->op == KF_SUBGROUP_ADD || n->op == KF_SUBGROUP_MAX) {
                memcpy(out, acc, comps * sizeof *out);
                continue;
            }
            int64_t src;
            index_of(ip, n->args[1], l, &src);
            if (src < 0 || src >= (int64_t)ip->sg || g + (uint64_t)src >= end ||
                !m[g + (uint32_t)src]) {
                return fail(ip, KF_ERROR_INVALID_ARGUMENT,
                            "%s in invocation %u reads subgroup lane %lld, which is %s (subgroup "
                            "size %u)",
                            kf__subgroup_str((kf_subgroup_op)n->op), (unsigned)l, (long long)src,
                            src < 0 || src >= (int64_t)ip->sg ? "out of range" : "not active",
                            (unsigned)ip->sg);
            }
            memcpy(out, V(ip, n->args[0], g + (uint32_t)src), comps * sizeof *out);
        }
    }
    return true;
}

/* Computes node id for the active invocations, evaluating its operands first. */
static bool compute(interp *ip, uint32_t id, const uint8_t *m) {
    const kf_kernel *w = ip->w;
    const kf__ir_node *n = &w->nodes[id];
    if (ip->address_nodes && !ip->address_nodes[id] && n->kind != KF__NODE_LOAD &&
        n->kind != KF__NODE_SHARED_LOAD && n->kind != KF__NODE_SUBGROUP) {
        return true; /* no address depends on it, and a load in it ran at the load's let */
    }
    for (uint32_t i = 0; i < n->nargs; i++) {
        if (!eval(ip, n->args[i], m)) {
            return false;
        }
    }
    kf_type t = n->type;
    kf_scalar s = t.scalar;
    uint32_t comps = kf__type_lanes(t);
    uint32_t words = kf__type_words(t);
    switch ((kf__ir_node_kind)n->kind) {
    case KF__NODE_LIT:
        FOR_LANES(ip, m, l) {
            V(ip, id, l)[0] = n->bits;
        }
        return true;
    case KF__NODE_UNARY:
        FOR_LANES(ip, m, l) {
            const uint32_t *a = V(ip, n->args[0], l);
            uint32_t *out = V(ip, id, l);
            for (uint32_t c = 0; c < comps; c++) {
                out[c] = un1(s, (kf_op)n->op, a[c]);
            }
        }
        return true;
    case KF__NODE_BINARY: {
        kf_type ta = w->nodes[n->args[0]].type;
        kf_type tb = w->nodes[n->args[1]].type;
        bool sa = kf__type_lanes(ta) == 1, sbb = kf__type_lanes(tb) == 1;
        FOR_LANES(ip, m, l) {
            const uint32_t *a = V(ip, n->args[0], l);
            const uint32_t *b = V(ip, n->args[1], l);
            uint32_t *out = V(ip, id, l);
            for (uint32_t c = 0; c < comps; c++) {
                out[c] = bin1(ta.scalar, (kf_op)n->op, a[sa ? 0 : c], b[sbb ? 0 : c]);
            }
        }
        return true;
    }
    case KF__NODE_CALL: {
        kf_fn fn = (kf_fn)n->op;
        kf_type ta = w->nodes[n->args[0]].type;
        FOR_LANES(ip, m, l) {
            uint32_t *out = V(ip, id, l);
            if (fn == KF_FN_DOT) {
                const uint32_t *a = V(ip, n->args[0], l);
                const uint32_t *b = V(ip, n->args[1], l);
                uint32_t acc = 0;
                for (uint32_t c = 0; c < kf__type_lanes(ta); c++) {
                    uint32_t p = bin1(s, KF_OP_MUL, a[c], b[c]);
                    acc = c == 0 ? p : bin1(s, KF_OP_ADD, acc, p);
                }
                out[0] = acc;
            } else if (fn == KF_FN_SELECT) {
                const uint32_t *f = V(ip, n->args[0], l);
                const uint32_t *tv = V(ip, n->args[1], l);
                const uint32_t *cond = V(ip, n->args[2], l);
                bool scalar_cond = kf__type_lanes(w->nodes[n->args[2]].type) == 1;
                for (uint32_t c = 0; c < comps; c++) {
                    out[c] = cond[scalar_cond ? 0 : c] ? tv[c] : f[c];
                }
            } else {
                for (uint32_t c = 0; c < comps; c++) {
                    uint32_t a[3] = {0, 0, 0};
                    for (uint32_t i = 0; i < n->nargs; i++) {
                        a[i] = V(ip, n->args[i], l)[c];
                    }
                    out[c] = call1(s, fn, a);
                }
            }
        }
        return true;
    }
    case KF__NODE_CAST: {
        kf_scalar from = w->nodes[n->args[0]].type.scalar;
        FOR_LANES(ip, m, l) {
            const uint32_t *a = V(ip, n->args[0], l);
            uint32_t *out = V(ip, id, l);
            for (uint32_t c = 0; c < comps; c++) {
                out[c] = ip->f16_wide && s == KF_SCALAR_F16 && from == KF_SCALAR_F32
                             ? a[c]
                             : convert1(s, from, a[c]);
            }
        }
        return true;
    }
    case KF__NODE_BITCAST: {
        kf_type from = w->nodes[n->args[0]].type;
        FOR_LANES(ip, m, l) {
            uint32_t packed[4];
            pack_bits(from, V(ip, n->args[0], l), packed);
            unpack_bits(t, packed, V(ip, id, l));
        }
        return true;
    }
    case KF__NODE_SPLAT:
        FOR_LANES(ip, m, l) {
            uint32_t v = V(ip, n->args[0], l)[0];
            uint32_t *out = V(ip, id, l);
            for (uint32_t c = 0; c < comps; c++) {
                out[c] = v;
            }
        }
        return true;
    case KF__NODE_VEC:
        FOR_LANES(ip, m, l) {
            uint32_t *out = V(ip, id, l);
            for (uint32_t c = 0; c < comps; c++) {
                out[c] = V(ip, n->args[c], l)[0];
            }
        }
        return true;
    case KF__NODE_EXTRACT:
        FOR_LANES(ip, m, l) {
            memcpy(V(ip, id, l), V(ip, n->args[0], l) + (size_t)n->ref * words,
                   words * sizeof(uint32_t));
        }
        return true;
    case KF__NODE_BUILTIN:
        FOR_LANES(ip, m, l) {
            builtin_value(ip, (kf_builtin)n->op, l, V(ip, id, l));
        }
        return true;
    case KF__NODE_OVERRIDE:
        FOR_LANES(ip, m, l) {
            V(ip, id, l)[0] = ip->override_bits[n->ref];
        }
        return true;
    case KF__NODE_NAMED:
        FOR_LANES(ip, m, l) {
            memcpy(V(ip, id, l), V(ip, n->args[0], l), words * sizeof(uint32_t));
        }
        return true;
    case KF__NODE_LOAD:
        FOR_LANES(ip, m, l) {
            if (!do_load(ip, id, l)) {
                return false;
            }
        }
        return true;
    case KF__NODE_SHARED_LOAD: {
        const kf__shared *sh = &w->shareds[n->ref];
        uint32_t ew = kf__type_words(sh->elem);
        FOR_LANES(ip, m, l) {
            int64_t i;
            index_of(ip, n->args[0], l, &i);
            note(ip, n->ref, true, i);
            if ((i < 0 || i >= (int64_t)sh->count) && sh->count &&
                guarded(ip, ip->node_verdict, id)) {
                i = (int64_t)sh->count - 1;
            }
            if (i < 0 || i >= (int64_t)sh->count) {
                return fail(ip, KF_ERROR_INVALID_ARGUMENT,
                            "load from workgroup array '%s' at index %lld is out of bounds (%u "
                            "elements)%s",
                            kf__str(w, sh->name), (long long)i, (unsigned)sh->count, unguarded(ip));
            }
            if (ip->race && !race_access(ip, n->ref, i, 0, ew, l, false)) {
                return false;
            }
            memcpy(V(ip, id, l), ip->shared + ip->shared_slot[n->ref] + (size_t)i * ew,
                   ew * sizeof(uint32_t));
        }
        return true;
    }
    case KF__NODE_READ:
        FOR_LANES(ip, m, l) {
            memcpy(V(ip, id, l), ip->vars + ip->var_slot[n->ref] + (size_t)l * words,
                   words * sizeof(uint32_t));
        }
        return true;
    case KF__NODE_SUBGROUP:
        return do_subgroup(ip, id, m);
    case KF__NODE_LENGTH:
        FOR_LANES(ip, m, l) {
            V(ip, id, l)[0] = (uint32_t)ip->bufs[n->ref].length;
        }
        return true;
    default:
        return fail(ip, KF_ERROR_INTERNAL, "cannot evaluate a value of kind %d", (int)n->kind);
    }
}

static bool eval(interp *ip, uint32_t id, const uint8_t *m) {
    const kf__ir_node *n = &ip->w->nodes[id];
    if (n->materialized || n->kind == KF__NODE_LOOP_VAR) {
        return true; /* its let (or loop) already set it */
    }
    return compute(ip, id, m);
}

/* ======================================================================================== */
/* statements                                                                               */
/* ======================================================================================== */

static bool exec_block(interp *ip, uint32_t block, const uint8_t *mask);

static bool store(interp *ip, const kf__stmt *s, const uint8_t *m) {
    const kf_kernel *w = ip->w;
    if (!eval(ip, s->a, m) || !eval(ip, s->b, m) ||
        (s->kind == KF__STMT_SHARED_STORE && s->c && !eval(ip, s->c, m))) {
        return false;
    }
    char ts[48];
    uint32_t sid = (uint32_t)(s - w->stmts);
    FOR_LANES(ip, m, l) {
        int64_t i;
        index_of(ip, s->a, l, &i);
        note(ip, s->ref, s->kind == KF__STMT_SHARED_STORE, i);
        const uint32_t *v = V(ip, s->b, l);
        if (s->kind == KF__STMT_STORE) {
            const kf__binding *b = &w->bindings[s->ref];
            ibuf *buf = &ip->bufs[s->ref];
            if (i < 0 || (uint64_t)i >= buf->length) {
                if (guarded(ip, ip->stmt_verdict, sid)) {
                    continue;
                }
                return fail(ip, KF_ERROR_INVALID_ARGUMENT,
                            "store to '%s' at index %lld is out of bounds (it holds %llu elements "
                            "of %s)%s",
                            buf->name, (long long)i, (unsigned long long)buf->length,
                            kf_type_str(b->type, ts, sizeof ts), unguarded(ip));
            }
            write_elem(buf->data + (size_t)i * buf->stride, b->type, v);
        } else {
            const kf__shared *sh = &w->shareds[s->ref];
            uint32_t ew = kf__type_words(sh->elem);
            int64_t lane = 0;
            if (s->c) {
                index_of(ip, s->c, l, &lane);
            }
            bool out = i < 0 || i >= (int64_t)sh->count ||
                       (s->c && (lane < 0 || lane >= (int64_t)sh->elem.lanes));
            if (out && guarded(ip, ip->stmt_verdict, sid)) {
                continue;
            }
            if (i < 0 || i >= (int64_t)sh->count) {
                return fail(ip, KF_ERROR_INVALID_ARGUMENT,
                            "store to workgroup array '%s' at index %lld is out of bounds (%u "
                            "elements)%s",
                            kf__str(w, sh->name), (long long)i, (unsigned)sh->count, unguarded(ip));
            }
            uint32_t *dst = ip->shared + ip->shared_slot[s->ref] + (size_t)i * ew;
            uint32_t first = 0, count = ew;
            if (s->c) { /* one lane of a vector element */
                if (lane < 0 || lane >= (int64_t)sh->elem.lanes) {
                    return fail(ip, KF_ERROR_INVALID_ARGUMENT,
                                "store to lane %lld of workgroup array '%s' (its elements have %u "
                                "lanes)%s",
                                (long long)lane, kf__str(w, sh->name), (unsigned)sh->elem.lanes,
                                unguarded(ip));
                }
                count = ew / sh->elem.lanes;
                first = (uint32_t)lane * count;
            }
            if (ip->race && !race_access(ip, s->ref, i, first, count, l, true)) {
                return false;
            }
            for (uint32_t c = 0; c < count; c++) {
                /* an f16 kept wide in registers (f16_casts_unrounded) is rounded by the store */
                dst[first + c] = ip->f16_wide && sh->elem.scalar == KF_SCALAR_F16
                                     ? wfloat(KF_SCALAR_F16, fw(v[c]))
                                     : v[c];
            }
        }
    }
    return true;
}

static bool any_lane(const interp *ip, const uint8_t *m) {
    for (uint32_t l = 0; l < ip->lanes; l++) {
        if (m[l]) {
            return true;
        }
    }
    return false;
}

/* After a loop body: invocations that broke leave the loop, those that continued rejoin. */
static void settle_loop(interp *ip, uint8_t *loop_mask) {
    FOR_LANES(ip, loop_mask, l) {
        if (ip->state[l] == LANE_BROKE) {
            ip->state[l] = LANE_RUN;
            loop_mask[l] = 0;
        } else if (ip->state[l] == LANE_CONTINUED) {
            ip->state[l] = LANE_RUN;
        }
    }
}

static bool exec_loop(interp *ip, const kf__stmt *s, const uint8_t *m) {
    const kf_kernel *w = ip->w;
    uint8_t *lm = mask_push(ip);
    if (!lm) {
        return fail(ip, KF_ERROR_OUT_OF_MEMORY, "out of memory");
    }
    memcpy(lm, m, ip->lanes);
    bool ok = true;
    uint32_t var = s->kind == KF__STMT_FOR ? s->ref : 0;
    kf_scalar vs = var ? w->nodes[var].type.scalar : KF_SCALAR_VOID;
    if (var) {
        ok = eval(ip, s->a, lm);
        FOR_LANES(ip, lm, l) {
            V(ip, var, l)[0] = V(ip, s->a, l)[0];
        }
    }
    for (uint32_t iter = 0; ok; iter++) {
        if (var) {
            ok = eval(ip, s->b, lm);
            FOR_LANES(ip, lm, l) {
                if (!lt_s(vs, V(ip, var, l)[0], V(ip, s->b, l)[0])) {
                    lm[l] = 0;
                }
            }
        }
        if (!ok || !any_lane(ip, lm)) {
            break;
        }
        if (iter >= KF__LOOP_LIMIT) {
            ok = fail(ip, KF_ERROR_INVALID_ARGUMENT,
                      "a loop ran more than %u iterations: is it missing its exit condition?",
                      (unsigned)KF__LOOP_LIMIT);
            break;
        }
        ok = exec_block(ip, s->body, lm);
        settle_loop(ip, lm);
        if (ok && var) {
            ok = eval(ip, s->c, lm);
            FOR_LANES(ip, lm, l) {
                uint32_t *iv = V(ip, var, l);
                iv[0] = bin1(vs, KF_OP_ADD, iv[0], V(ip, s->c, l)[0]);
            }
        }
    }
    mask_pop(ip, lm);
    return ok;
}

/* ---- subgroup matrices: one whole matrix per subgroup ---- */

static uint32_t *sgmat_at(interp *ip, uint32_t var, uint32_t group) {
    const kf__var *v = &ip->w->vars[var];
    return ip->vars + ip->var_slot[var] + (size_t)group * v->cols * v->rows;
}

/* Which subgroups run a subgroup-matrix statement: every invocation of a subgroup or none, and
 * (values != NULL) the same values in all of them. Sets run[g]; false (with the error) if not. */
static bool sgmat_groups(interp *ip, const uint8_t *m, const char *what, const uint32_t *values,
                         uint32_t nvalues, uint8_t *run) {
    if (ip->lanes % ip->sg) {
        return fail(ip, KF_ERROR_INVALID_ARGUMENT,
                    "%s: the workgroup's %u invocations are not whole subgroups of %u (subgroup "
                    "matrices need a workgroup size that is a multiple of the subgroup size)",
                    what, (unsigned)ip->lanes, (unsigned)ip->sg);
    }
    for (uint32_t g = 0; g * ip->sg < ip->lanes; g++) {
        uint32_t first = g * ip->sg, active = 0;
        for (uint32_t l = first; l < first + ip->sg; l++) {
            active += m[l] ? 1u : 0u;
        }
        if (active && active != ip->sg) {
            return fail(ip, KF_ERROR_INVALID_ARGUMENT,
                        "%s reached by %u of the %u invocations of subgroup %u: subgroup matrices "
                        "need subgroup-uniform control flow",
                        what, (unsigned)active, (unsigned)ip->sg, (unsigned)g);
        }
        run[g] = active != 0;
        for (uint32_t i = 0; run[g] && i < nvalues; i++) {
            uint32_t want = V(ip, values[i], first)[0];
            for (uint32_t l = first + 1; l < first + ip->sg; l++) {
                if (V(ip, values[i], l)[0] != want) {
                    return fail(ip, KF_ERROR_INVALID_ARGUMENT,
                                "%s: the %s differs between invocations %u and %u of subgroup %u "
                                "(%u and %u): it must be the same in the whole subgroup",
                                what, i == 0 ? "offset" : "stride", (unsigned)first, (unsigned)l,
                                (unsigned)g, (unsigned)want, (unsigned)V(ip, values[i], l)[0]);
                }
            }
        }
    }
    return true;
}

static bool sgmat_access(interp *ip, const kf__stmt *s, const uint8_t *m) {
    const kf_kernel *w = ip->w;
    bool load = s->kind == KF__STMT_SGMAT_LOAD, storage = s->flags & KF__SGMAT_STORAGE;
    const char *what = load ? "subgroupMatrixLoad" : "subgroupMatrixStore";
    if (!eval(ip, s->a, m) || !eval(ip, s->b, m)) {
        return false;
    }
    uint8_t *run = calloc(ip->lanes / ip->sg + 1, 1);
    if (!run) {
        return fail(ip, KF_ERROR_OUT_OF_MEMORY, "out of memory");
    }
    uint32_t values[2] = {s->a, s->b};
    bool ok = sgmat_groups(ip, m, what, values, 2, run);
    const kf__var *v = &w->vars[s->ref];
    const char *mem = storage ? ip->bufs[s->d].name : kf__str(w, w->shareds[s->d].name);
    uint64_t length = storage ? ip->bufs[s->d].length : w->shareds[s->d].count;
    for (uint32_t g = 0; ok && g * ip->sg < ip->lanes; g++) {
        if (!run[g]) {
            continue;
        }
        uint64_t offset = V(ip, s->a, g * ip->sg)[0], stride = V(ip, s->b, g * ip->sg)[0];
        note(ip, s->d, !storage, (int64_t)offset);
        note(ip, s->d, !storage, (int64_t)stride);
        uint32_t *mat = sgmat_at(ip, s->ref, g);
        bool col = s->flags & KF__SGMAT_COL_MAJOR;
        uint64_t span = (uint64_t)((col ? v->cols : v->rows) - 1) * stride +
                        (col ? v->rows : v->cols); /* elements from the offset to the last */
        if (offset + span > length && guarded(ip, ip->stmt_verdict, (uint32_t)(s - w->stmts))) {
            continue; /* the emitted guard skips the whole move */
        }
        for (uint32_t r = 0; ok && r < v->rows; r++) {
            for (uint32_t c = 0; c < v->cols; c++) {
                uint64_t i =
                    offset + (s->flags & KF__SGMAT_COL_MAJOR ? c * stride + r : r * stride + c);
                if (i >= length) {
                    ok =
                        fail(ip, KF_ERROR_INVALID_ARGUMENT,
                             "%s of '%s': element (%u, %u) at index %llu of '%s' is out of "
                             "bounds (it holds %llu elements)%s",
                             what, kf__str(w, v->name), (unsigned)r, (unsigned)c,
                             (unsigned long long)i, mem, (unsigned long long)length, unguarded(ip));
                    break;
                }
                uint32_t *e = mat + r * v->cols + c;
                if (storage) {
                    uint8_t *p = ip->bufs[s->d].data + i * ip->bufs[s->d].stride;
                    if (load) {
                        read_elem(p, v->type, e);
                    } else {
                        write_elem(p, v->type, e);
                    }
                } else {
                    uint32_t *p = ip->shared + ip->shared_slot[s->d] + i;
                    if (ip->race &&
                        !race_access(ip, s->d, (int64_t)i, 0, 1, RACE_GROUP | g, !load)) {
                        ok = false;
                        break;
                    }
                    if (load) {
                        *e = *p;
                    } else {
                        *p = *e;
                    }
                }
            }
        }
    }
    free(run);
    return ok;
}

/* acc += left * right, each element's products and accumulator summed exactly (double; integers
 * wrap) and rounded once. */
static bool sgmat_mma(interp *ip, const kf__stmt *s, const uint8_t *m) {
    const kf_kernel *w = ip->w;
    uint8_t *run = calloc(ip->lanes / ip->sg + 1, 1);
    if (!run) {
        return fail(ip, KF_ERROR_OUT_OF_MEMORY, "out of memory");
    }
    const bool fresh = s->flags & KF__SGMAT_FRESH;
    bool ok = sgmat_groups(
        ip, m, fresh ? "subgroupMatrixMultiply" : "subgroupMatrixMultiplyAccumulate", NULL, 0, run);
    if (ip->address_nodes) {
        free(run);
        return ok; /* its values are no address's */
    }
    const kf__var *a = &w->vars[s->ref], *l = &w->vars[s->d];
    kf_scalar as = a->type.scalar, ls = l->type.scalar;
    for (uint32_t g = 0; ok && g * ip->sg < ip->lanes; g++) {
        if (!run[g]) {
            continue;
        }
        uint32_t *acc = sgmat_at(ip, s->ref, g);
        const uint32_t *lm = sgmat_at(ip, s->d, g), *rm = sgmat_at(ip, s->e, g);
        for (uint32_t r = 0; r < a->rows; r++) {
            for (uint32_t c = 0; c < a->cols; c++) {
                uint32_t *e = acc + r * a->cols + c;
                if (is_float(as)) {
                    double sum = fresh ? 0 : fw(*e);
                    for (uint32_t q = 0; q < l->cols; q++) {
                        uint32_t x = lm[r * l->cols + q], y = rm[q * a->cols + c];
                        sum += is_float(ls)          ? (double)fw(x) * fw(y)
                               : ls == KF_SCALAR_I32 ? (double)(int32_t)x * (int32_t)y
                                                     : (double)x * y;
                    }
                    *e = wfloat(as, (float)sum);
                } else {
                    uint32_t sum = fresh ? 0 : *e;
                    for (uint32_t q = 0; q < l->cols; q++) {
                        uint32_t x = lm[r * l->cols + q], y = rm[q * a->cols + c];
                        sum +=
                            is_float(ls) ? convert1(as, KF_SCALAR_F32, wf32(fw(x) * fw(y))) : x * y;
                    }
                    *e = sum;
                }
            }
        }
    }
    free(run);
    return ok;
}

static bool exec_stmt(interp *ip, uint32_t sid, const uint8_t *m) {
    const kf_kernel *w = ip->w;
    const kf__stmt *s = &w->stmts[sid];
    switch ((kf__stmt_kind)s->kind) {
    case KF__STMT_LET:
        return compute(ip, s->ref, m);
    case KF__STMT_VAR:
        if (w->vars[s->ref].sgmat) {
            const kf__var *v = &w->vars[s->ref];
            uint8_t *run = calloc(ip->lanes / ip->sg + 1, 1);
            if (!run) {
                return fail(ip, KF_ERROR_OUT_OF_MEMORY, "out of memory");
            }
            bool ok = sgmat_groups(ip, m, "a subgroup matrix's declaration", NULL, 0, run);
            for (uint32_t g = 0; ok && g * ip->sg < ip->lanes; g++) {
                if (run[g]) {
                    memset(sgmat_at(ip, s->ref, g), 0,
                           (size_t)v->cols * v->rows * sizeof(uint32_t));
                }
            }
            free(run);
            return ok;
        }
        /* fall through */
    case KF__STMT_ASSIGN: {
        uint32_t words = kf__type_words(w->vars[s->ref].type);
        if (s->a && !eval(ip, s->a, m)) {
            return false;
        }
        FOR_LANES(ip, m, l) {
            uint32_t *dst = ip->vars + ip->var_slot[s->ref] + (size_t)l * words;
            if (s->a) {
                memcpy(dst, V(ip, s->a, l), words * sizeof *dst);
            } else {
                memset(dst, 0, words * sizeof *dst);
            }
        }
        return true;
    }
    case KF__STMT_STORE:
    case KF__STMT_SHARED_STORE:
        return store(ip, s, m);
    case KF__STMT_SGMAT_LOAD:
    case KF__STMT_SGMAT_STORE:
        return sgmat_access(ip, s, m);
    case KF__STMT_SGMAT_MMA:
        return sgmat_mma(ip, s, m);
    case KF__STMT_IF: {
        if (!eval(ip, s->a, m)) {
            return false;
        }
        uint8_t *branch = mask_push(ip);
        if (!branch) {
            return fail(ip, KF_ERROR_OUT_OF_MEMORY, "out of memory");
        }
        for (uint32_t l = 0; l < ip->lanes; l++) {
            branch[l] = m[l] && V(ip, s->a, l)[0];
        }
        bool ok = exec_block(ip, s->body, branch);
        if (ok && s->else_body) {
            for (uint32_t l = 0; l < ip->lanes; l++) {
                branch[l] = m[l] && !V(ip, s->a, l)[0];
            }
            ok = exec_block(ip, s->else_body, branch);
        }
        mask_pop(ip, branch);
        return ok;
    }
    case KF__STMT_FOR:
    case KF__STMT_LOOP:
        return exec_loop(ip, s, m);
    case KF__STMT_BREAK_UNLESS:
        if (!eval(ip, s->a, m)) {
            return false;
        }
        FOR_LANES(ip, m, l) {
            if (!V(ip, s->a, l)[0]) {
                ip->state[l] = LANE_BROKE;
            }
        }
        return true;
    case KF__STMT_BREAK:
    case KF__STMT_CONTINUE:
        FOR_LANES(ip, m, l) {
            ip->state[l] = s->kind == KF__STMT_BREAK ? LANE_BROKE : LANE_CONTINUED;
        }
        return true;
    case KF__STMT_BARRIER:
        for (uint32_t l = 0; l < ip->lanes; l++) {
            if (!m[l]) {
                return fail(ip, KF_ERROR_INVALID_ARGUMENT,
                            "workgroupBarrier reached by only some invocations (invocation %u is "
                            "not there): a barrier needs uniform control flow",
                            (unsigned)l);
            }
        }
        ip->epoch++;
        return true;
    default:
        return fail(ip, KF_ERROR_INTERNAL, "cannot run a statement of kind %d", (int)s->kind);
    }
}

static bool exec_block(interp *ip, uint32_t block, const uint8_t *mask) {
    uint8_t *eff = mask_push(ip);
    if (!eff) {
        return fail(ip, KF_ERROR_OUT_OF_MEMORY, "out of memory");
    }
    bool ok = true;
    for (uint32_t s = ip->w->blocks[block].first; s && ok; s = ip->w->stmts[s].next) {
        uint32_t active = 0;
        for (uint32_t l = 0; l < ip->lanes; l++) {
            eff[l] = mask[l] && ip->state[l] == LANE_RUN;
            active += eff[l];
        }
        if (!active) {
            break;
        }
        ip->work += active;
        ok = exec_stmt(ip, s, eff);
    }
    mask_pop(ip, eff);
    return ok;
}

/* ======================================================================================== */
/* setup                                                                                    */
/* ======================================================================================== */

static uint32_t override_bits(kf_type t, double v) {
    switch (t.scalar) {
    case KF_SCALAR_F32:
        return wf32((float)v);
    case KF_SCALAR_F16:
        return wf32(r16((float)v));
    case KF_SCALAR_I32:
        return (uint32_t)(int32_t)v;
    case KF_SCALAR_U32:
        return (uint32_t)v;
    case KF_SCALAR_BOOL:
        return v != 0;
    default:
        return 0;
    }
}

static kf_status setup(interp *ip, const kf_interp_desc *desc) {
    const kf_kernel *w = ip->w;
    kf_kernel *k = ip->user;
    uint32_t nb = w->binding_count - 1;
    if (desc->buffer_count != nb || (nb && !desc->buffers)) {
        return kf__run_fail(k, KF_ERROR_INVALID_ARGUMENT,
                            "kf_kernel_interpret: the kernel has %u bindings, %u buffers given",
                            (unsigned)nb, (unsigned)desc->buffer_count);
    }
    ip->bufs = calloc(w->binding_count, sizeof *ip->bufs);
    if (!ip->bufs) {
        return KF_ERROR_OUT_OF_MEMORY;
    }
    char ts[48];
    for (uint32_t i = 1; i < w->binding_count; i++) {
        const kf__binding *b = &w->bindings[i];
        const kf_host_buffer *hb = &desc->buffers[i - 1];
        ibuf *buf = &ip->bufs[i];
        buf->data = hb->data;
        buf->size = hb->size;
        buf->name = kf__str(w, b->name);
        if (hb->size && !hb->data) {
            return kf__run_fail(k, KF_ERROR_INVALID_ARGUMENT,
                                "kf_kernel_interpret: buffer %u ('%s') has a size but no data",
                                (unsigned)(i - 1), buf->name);
        }
        if (b->kind == KF_BINDING_UNIFORM) {
            if (hb->size < kf__type_size(b->type)) {
                return kf__run_fail(k, KF_ERROR_INVALID_ARGUMENT,
                                    "kf_kernel_interpret: uniform '%s' is %s (%u bytes), its "
                                    "buffer has %llu",
                                    buf->name, kf_type_str(b->type, ts, sizeof ts),
                                    (unsigned)kf__type_size(b->type), (unsigned long long)hb->size);
            }
        } else {
            buf->stride = kf__type_stride(b->type);
            buf->length = hb->size / buf->stride;
            uint64_t declared = kf__kernel_binding_length(k, i - 1);
            if (buf->length < declared) {
                return kf__run_fail(k, KF_ERROR_INVALID_ARGUMENT,
                                    "kf_kernel_interpret: buffer %u ('%s') holds %llu elements; "
                                    "the kernel is proved in bounds for %llu "
                                    "(kf_kernel_set_binding_length)",
                                    (unsigned)(i - 1), buf->name, (unsigned long long)buf->length,
                                    (unsigned long long)declared);
            }
        }
    }
    ip->sg = desc->subgroup_size ? desc->subgroup_size : 32;
    if (ip->sg > 128 || (ip->sg & (ip->sg - 1))) {
        return kf__run_fail(k, KF_ERROR_INVALID_ARGUMENT,
                            "kf_kernel_interpret: subgroup size %u is not a power of two up to 128",
                            (unsigned)ip->sg);
    }
    /* constants: the desc's, then kf_elements from the elements, then defaults */
    ip->override_bits = calloc(w->override_count, sizeof *ip->override_bits);
    if (!ip->override_bits) {
        return KF_ERROR_OUT_OF_MEMORY;
    }
    bool *set = calloc(w->override_count, sizeof *set);
    if (!set) {
        return KF_ERROR_OUT_OF_MEMORY;
    }
    for (uint32_t c = 0; c < desc->constant_count; c++) {
        const char *nm = desc->constants[c].name ? desc->constants[c].name : "";
        uint32_t o = kf__override_find(w, nm);
        if (!o) {
            free(set);
            return kf__run_fail(k, KF_ERROR_INVALID_ARGUMENT,
                                "kf_kernel_interpret: constant '%s' is not an override of the "
                                "kernel",
                                nm);
        }
        ip->override_bits[o] = override_bits(w->overrides[o].type, desc->constants[c].value);
        set[o] = true;
    }
    uint64_t elements = desc->elements;
    uint32_t in = kf__binding_find(w, "in");
    bool stage = in && w->bindings[in].role == KF__ROLE_IN;
    if (!elements && stage) {
        elements = ip->bufs[in].length;
    }
    uint32_t eo = kf__override_find(w, "kf_elements");
    if (eo && !set[eo] && !ip->faithful) {
        if (elements > UINT32_MAX) {
            free(set);
            return kf__run_fail(k, KF_ERROR_LIMIT,
                                "kf_kernel_interpret: %llu elements (kernels index in u32)",
                                (unsigned long long)elements);
        }
        ip->override_bits[eo] = (uint32_t)elements;
        set[eo] = true;
    }
    for (uint32_t o = 1; o < w->override_count; o++) {
        if (!set[o]) {
            if (!w->overrides[o].has_default) {
                free(set);
                return kf__run_fail(k, KF_ERROR_INVALID_ARGUMENT,
                                    "kf_kernel_interpret: override '%s' has no default and no "
                                    "constant was given",
                                    kf__str(w, w->overrides[o].name));
            }
            ip->override_bits[o] = override_bits(w->overrides[o].type, w->overrides[o].value);
        }
    }
    free(set);
    /* the grid */
    uint64_t wg_total = (uint64_t)w->workgroup[0] * w->workgroup[1] * w->workgroup[2];
    bool zero = !desc->groups[0] && !desc->groups[1] && !desc->groups[2];
    if (zero && (w->grid[0] || w->grid[1] || w->grid[2])) {
        for (int i = 0; i < 3; i++) {
            ip->nwg[i] = w->grid[i] ? w->grid[i] : 1;
        }
    } else if (zero) {
        if (eo) {
            elements = ip->override_bits[eo];
        } else if (!elements) {
            uint32_t out = kf__binding_find(w, "out");
            elements = out && w->bindings[out].role == KF__ROLE_OUT ? ip->bufs[out].length : 1;
        }
        uint64_t groups = (elements + wg_total - 1) / wg_total;
        if (groups > UINT32_MAX) {
            return kf__run_fail(k, KF_ERROR_LIMIT, "kf_kernel_interpret: too many workgroups");
        }
        ip->nwg[0] = groups ? (uint32_t)groups : 1;
        ip->nwg[1] = ip->nwg[2] = 1;
    } else {
        for (int i = 0; i < 3; i++) {
            ip->nwg[i] = desc->groups[i] ? desc->groups[i] : 1;
        }
    }
    /* storage for values */
    ip->lanes = (uint32_t)wg_total;
    ip->slot = calloc(w->node_count, sizeof *ip->slot);
    ip->var_slot = calloc(w->var_count, sizeof *ip->var_slot);
    ip->shared_slot = calloc(w->shared_count, sizeof *ip->shared_slot);
    ip->state = calloc(ip->lanes, 1);
    if (!ip->slot || !ip->var_slot || !ip->shared_slot || !ip->state) {
        return KF_ERROR_OUT_OF_MEMORY;
    }
    ip->words = calloc(w->node_count, sizeof *ip->words);
    uint32_t depth = 0;
    for (uint32_t b = 1; b < w->block_count; b++) {
        uint32_t d = 0;
        for (uint32_t up = b; w->blocks[up].parent && d < w->block_count;
             up = w->blocks[up].parent) {
            d++;
        }
        depth = d > depth ? d : depth;
    }
    /* a block's mask and a branch's or loop's, per level of nesting */
    ip->mask_cap = ((size_t)depth + 2) * 3 * ip->lanes;
    ip->masks = malloc(ip->mask_cap);
    if (!ip->words || !ip->masks) {
        return KF_ERROR_OUT_OF_MEMORY;
    }
    size_t total = 0;
    for (uint32_t i = 1; i < w->node_count; i++) {
        ip->slot[i] = total;
        ip->words[i] = kf__type_words(w->nodes[i].type);
        total += (size_t)ip->words[i] * ip->lanes;
    }
    ip->vals = calloc(total ? total : 1, sizeof *ip->vals);
    total = 0;
    uint32_t subgroups = (ip->lanes + ip->sg - 1) / ip->sg;
    for (uint32_t i = 1; i < w->var_count; i++) {
        const kf__var *v = &w->vars[i];
        ip->var_slot[i] = total;
        /* a subgroup matrix is kept whole, once per subgroup */
        total += v->sgmat ? (size_t)v->cols * v->rows * subgroups
                          : (size_t)kf__type_words(v->type) * ip->lanes;
    }
    ip->vars = calloc(total ? total : 1, sizeof *ip->vars);
    total = 0;
    for (uint32_t i = 1; i < w->shared_count; i++) {
        ip->shared_slot[i] = total;
        total += (size_t)kf__type_words(w->shareds[i].elem) * w->shareds[i].count;
    }
    ip->shared_words = total;
    ip->shared = calloc(total ? total : 1, sizeof *ip->shared);
    if (!ip->vals || !ip->vars || !ip->shared) {
        return KF_ERROR_OUT_OF_MEMORY;
    }
    const char *races = getenv("KF_CHECK_RACES");
    if (total && !(races && !strcmp(races, "0"))) {
        ip->race = calloc(total, sizeof *ip->race);
        if (!ip->race) {
            return KF_ERROR_OUT_OF_MEMORY;
        }
    }
    ip->f16_wide = desc->f16_casts_unrounded;
    return KF_OK;
}

/* Runs workgroup (x, y, z) with every invocation active. */
static void run_workgroup(interp *ip, const uint8_t *all, uint32_t x, uint32_t y, uint32_t z) {
    ip->wid[0] = x;
    ip->wid[1] = y;
    ip->wid[2] = z;
    memset(ip->state, LANE_RUN, ip->lanes);
    memset(ip->shared, 0, ip->shared_words * sizeof *ip->shared);
    ip->epoch++; /* the last workgroup's accesses race with none of this one's */
    ip->mask_top = 0;
    exec_block(ip, 1, all);
}

/* Frees what setup allocated (not the prepared kernel). */
static void interp_free(interp *ip) {
    free(ip->bufs);
    free(ip->override_bits);
    free(ip->slot);
    free(ip->vals);
    free(ip->var_slot);
    free(ip->vars);
    free(ip->shared_slot);
    free(ip->shared);
    free(ip->race);
    free(ip->state);
    free(ip->words);
    free(ip->masks);
}

kf_status kf_kernel_interpret(kf_kernel *k, const kf_interp_desc *desc) {
    if (!k) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    k->run_error[0] = '\0';
    if (!desc) {
        return kf__run_fail(k, KF_ERROR_INVALID_ARGUMENT, "kf_kernel_interpret: desc is NULL");
    }
    if (k->status != KF_OK) {
        return k->status;
    }
    kf_kernel *w = kf__kernel_prepare(k);
    if (!w) {
        return kf__run_fail(k, KF_ERROR_OUT_OF_MEMORY, "kf_kernel_interpret: out of memory");
    }
    if (w->status != KF_OK) {
        k->status = w->status;
        memcpy(k->error, w->error, sizeof k->error);
        kf_status st = w->status;
        kf_kernel_destroy(w);
        return st;
    }
    interp ip;
    memset(&ip, 0, sizeof ip);
    ip.w = w;
    ip.user = k;
    kf_status st = setup(&ip, desc);
    if (st == KF_ERROR_OUT_OF_MEMORY && !k->run_error[0]) {
        kf__run_fail(k, st, "kf_kernel_interpret: out of memory");
    }
    uint8_t *all = st == KF_OK ? malloc(ip.lanes) : NULL;
    if (st == KF_OK && !all) {
        st = kf__run_fail(k, KF_ERROR_OUT_OF_MEMORY, "kf_kernel_interpret: out of memory");
    }
    if (st == KF_OK) {
        memset(all, 1, ip.lanes);
        for (uint32_t z = 0; z < ip.nwg[2] && ip.st == KF_OK; z++) {
            for (uint32_t y = 0; y < ip.nwg[1] && ip.st == KF_OK; y++) {
                for (uint32_t x = 0; x < ip.nwg[0] && ip.st == KF_OK; x++) {
                    run_workgroup(&ip, all, x, y, z);
                }
            }
        }
        st = ip.st;
    }
    free(all);
    interp_free(&ip);
    kf_kernel_destroy(w);
    return st;
}

/* ======================================================================================== */
/* the bounds check of a dispatch (KF_CHECK_BOUNDS)                                         */
/* ======================================================================================== */

struct kf__checker {
    kf_kernel *user;        /* a copy of the dispatched kernel: its name, lengths and messages */
    kf_kernel *prepared;    /* its runnable form, made once */
    kf__bounds *proof;      /* what the emitter proved of it (which accesses the GPU guards) */
    uint8_t *address_nodes; /* per node: an address depends on it (NULL when needs_data) */
    bool compute_all;       /* kf__checker_compute_all: address_nodes unused */
    bool needs_data;        /* an index, subgroup lane or condition depends on a storage load */
    uint64_t *seen;         /* launches already checked, by signature (data-independent kernels) */
    uint32_t seen_count, seen_cap;
};

typedef struct slicer {
    const kf_kernel *w;
    uint8_t *node, *var, *shared;
    uint32_t *stack;
    uint32_t depth;
    bool data;
} slicer;

static void slice_mark(slicer *sl, uint32_t n) {
    if (n && !sl->node[n]) {
        sl->node[n] = 1;
        sl->stack[sl->depth++] = n;
    }
}

/* The value of variable v (or the contents of workgroup array a) feeds an address: so does
 * everything assigned to (stored into) it. */
static void slice_writers(slicer *sl, uint32_t v, uint32_t a) {
    const kf_kernel *w = sl->w;
    for (uint32_t i = 1; i < w->stmt_count; i++) {
        const kf__stmt *s = &w->stmts[i];
        if (v && (s->kind == KF__STMT_ASSIGN || s->kind == KF__STMT_VAR) && s->ref == v) {
            slice_mark(sl, s->a);
        } else if (a && s->kind == KF__STMT_SHARED_STORE && s->ref == a) {
            slice_mark(sl, s->b);
        } else if (a && s->kind == KF__STMT_SGMAT_STORE && !(s->flags & KF__SGMAT_STORAGE) &&
                   s->d == a) {
            sl->data = true; /* a subgroup matrix's values (from loads) reach the array */
        }
    }
}

/* Does any index, subgroup lane or branch condition of prepared kernel w depend on a value
 * loaded from storage (through arithmetic, variables and workgroup arrays)? If not, the
 * addresses a launch touches are set by its grid, constants, uniforms and buffer sizes alone,
 * so the check may run on zeros, compute only what addresses depend on (*address_nodes, per
 * node), and skip a repeat of a checked launch. True (conservatively) when out of memory. */
static bool addresses_need_data(const kf_kernel *w, uint8_t **address_nodes) {
    *address_nodes = NULL;
    slicer sl = {w,
                 calloc(w->node_count + 1, 1),
                 calloc(w->var_count + 1, 1),
                 calloc(w->shared_count + 1, 1),
                 calloc(w->node_count + 1, sizeof(uint32_t)),
                 0,
                 false};
    if (!sl.node || !sl.var || !sl.shared || !sl.stack) {
        sl.data = true;
        goto done;
    }
    for (uint32_t i = 1; i < w->node_count; i++) {
        const kf__ir_node *n = &w->nodes[i];
        if ((n->kind == KF__NODE_LOAD || n->kind == KF__NODE_SHARED_LOAD) && n->nargs) {
            slice_mark(&sl, n->args[0]);
        } else if (n->kind == KF__NODE_SUBGROUP && n->nargs > 1) {
            slice_mark(&sl, n->args[1]);
        }
    }
    for (uint32_t i = 1; i < w->stmt_count; i++) {
        const kf__stmt *s = &w->stmts[i];
        switch ((kf__stmt_kind)s->kind) {
        case KF__STMT_STORE:
        case KF__STMT_SHARED_STORE:
        case KF__STMT_FOR:
        case KF__STMT_SGMAT_LOAD:
        case KF__STMT_SGMAT_STORE:
            slice_mark(&sl, s->a);
            slice_mark(&sl, s->c);
            if (s->kind != KF__STMT_STORE && s->kind != KF__STMT_SHARED_STORE) {
                slice_mark(&sl, s->b);
            }
            break;
        case KF__STMT_IF:
        case KF__STMT_BREAK_UNLESS:
            slice_mark(&sl, s->a);
            break;
        default:
            break;
        }
    }
    while (sl.depth && !sl.data) {
        const kf__ir_node *n = &w->nodes[sl.stack[--sl.depth]];
        for (uint32_t i = 0; i < n->nargs; i++) {
            slice_mark(&sl, n->args[i]);
        }
        if (n->kind == KF__NODE_LOAD && w->bindings[n->ref].kind != KF_BINDING_UNIFORM) {
            sl.data = true;
        } else if (n->kind == KF__NODE_READ && !sl.var[n->ref]) {
            sl.var[n->ref] = 1;
            slice_writers(&sl, n->ref, 0);
        } else if (n->kind == KF__NODE_SHARED_LOAD && !sl.shared[n->ref]) {
            sl.shared[n->ref] = 1;
            slice_writers(&sl, 0, n->ref);
        }
    }
done:
    if (!sl.data) {
        *address_nodes = sl.node;
        sl.node = NULL;
    }
    free(sl.node);
    free(sl.var);
    free(sl.shared);
    free(sl.stack);
    return sl.data;
}

kf__checker *kf__checker_new(const kf_kernel *k, const uint64_t *lengths, const uint32_t grid[3]) {
    if (!k || k->status != KF_OK) {
        return NULL;
    }
    kf__checker *c = calloc(1, sizeof *c);
    if (!c) {
        return NULL;
    }
    c->user = kf_kernel_clone(k);
    c->prepared = c->user ? kf__kernel_proved(c->user, lengths, grid, &c->proof) : NULL;
    if (!c->prepared || c->prepared->status != KF_OK) {
        kf__checker_free(c);
        return NULL;
    }
    c->needs_data = addresses_need_data(c->prepared, &c->address_nodes);
    return c;
}

void kf__checker_free(kf__checker *c) {
    if (c) {
        kf_kernel_destroy(c->prepared);
        kf__bounds_free(c->proof);
        free(c->address_nodes);
        kf_kernel_destroy(c->user);
        free(c->seen);
        free(c);
    }
}

void kf__checker_compute_all(kf__checker *c, bool all) {
    c->compute_all = all;
    c->seen_count = 0;
}

bool kf__checker_fits(const kf__checker *c, const uint64_t *sizes, uint32_t count) {
    const kf_kernel *w = c->prepared;
    if (count + 1 != w->binding_count) {
        return false;
    }
    for (uint32_t i = 1; i < w->binding_count; i++) {
        const kf__binding *b = &w->bindings[i];
        if (b->kind != KF_BINDING_UNIFORM &&
            sizes[i - 1] / kf__type_stride(b->type) < kf__kernel_binding_length(c->user, i - 1)) {
            return false;
        }
    }
    return true;
}

bool kf__checker_needs_data(const kf__checker *c) {
    return c->needs_data;
}

const char *kf__checker_kernel_name(const kf__checker *c) {
    return kf_kernel_name(c->user);
}

const char *kf__checker_message(const kf__checker *c) {
    /* the interpreter's message without its "kernel 'name': kf_kernel_interpret: " (the check
     * names the kernel itself) */
    const char *m = c->user->run_error;
    char head[KF__KERNEL_ERROR_SIZE];
    snprintf(head, sizeof head, "kernel '%s': ", c->user->name ? c->user->name : "kernel");
    if (!strncmp(m, head, strlen(head))) {
        m += strlen(head);
    }
    const char *prefix = "kf_kernel_interpret: ";
    return strncmp(m, prefix, strlen(prefix)) ? m : m + strlen(prefix);
}

static uint64_t mix(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        h = (h ^ b[i]) * 1099511628211ull;
    }
    return h;
}

/* What decides a data-independent launch's addresses: grid, subgroup size, constants, buffer
 * sizes and uniform contents. */
static uint64_t launch_signature(const kf_kernel *w, const kf_interp_desc *d) {
    uint64_t h = mix(1469598103934665603ull, d->groups, sizeof d->groups);
    h = mix(h, &d->subgroup_size, sizeof d->subgroup_size);
    for (uint32_t i = 0; i < d->constant_count; i++) {
        const char *nm = d->constants[i].name ? d->constants[i].name : "";
        h = mix(h, nm, strlen(nm) + 1);
        h = mix(h, &d->constants[i].value, sizeof d->constants[i].value);
    }
    for (uint32_t i = 0; i < d->buffer_count; i++) {
        h = mix(h, &d->buffers[i].size, sizeof d->buffers[i].size);
        if (i + 1 < w->binding_count && w->bindings[i + 1].kind == KF_BINDING_UNIFORM &&
            d->buffers[i].data) {
            h = mix(h, d->buffers[i].data, (size_t)d->buffers[i].size);
        }
    }
    return h;
}

/* Workgroup `linear` (x fastest) of grid g. */
static void unlinear(const uint32_t g[3], uint64_t linear, uint32_t out[3]) {
    out[0] = (uint32_t)(linear % g[0]);
    out[1] = (uint32_t)(linear / g[0] % g[1]);
    out[2] = (uint32_t)(linear / ((uint64_t)g[0] * g[1]));
}

kf_status kf__checker_run(kf__checker *c, const kf_interp_desc *desc, uint64_t budget,
                          kf__check_result *res) {
    memset(res, 0, sizeof *res);
    kf_kernel *k = c->user;
    k->run_error[0] = '\0';
    uint64_t sig = c->needs_data ? 0 : launch_signature(c->prepared, desc);
    for (uint32_t i = 0; i < c->seen_count; i++) {
        if (c->seen[i] == sig) {
            res->repeat = true;
            return KF_OK;
        }
    }
    interp ip;
    memset(&ip, 0, sizeof ip);
    ip.w = c->prepared;
    ip.user = k;
    ip.faithful = true;
    ip.node_verdict = c->proof->node_verdict;
    ip.stmt_verdict = c->proof->stmt_verdict;
    ip.address_nodes = c->compute_all ? NULL : c->address_nodes;
    kf_status st = setup(&ip, desc);
    uint8_t *all = st == KF_OK ? malloc(ip.lanes) : NULL;
    if (st == KF_OK && !all) {
        st = KF_ERROR_OUT_OF_MEMORY;
    }
    if (st == KF_OK) {
        memset(all, 1, ip.lanes);
        const uint32_t *g = ip.nwg;
        uint64_t total = (uint64_t)g[0] * g[1] * g[2];
        res->workgroups = total;
        /* The first and the last workgroup always; then, while the budget of work lasts, the
         * other workgroups at the grid's edges (each dimension's first and last, every
         * combination) and the last but one in linear order, where ragged tiles and a folded
         * grid's spare workgroups are; then all the others, spread over the grid by a stride
         * coprime with its size. */
        uint64_t edge[11];
        uint32_t ne = 0;
        edge[ne++] = 0;
        edge[ne++] = total - 1;
        for (uint32_t corner = 1; corner < 8; corner++) {
            uint32_t at[3];
            for (int d = 0; d < 3; d++) {
                at[d] = corner >> d & 1u ? g[d] - 1 : 0;
            }
            edge[ne++] = at[0] + (uint64_t)g[0] * (at[1] + (uint64_t)g[1] * at[2]);
        }
        edge[ne++] = total > 1 ? total - 2 : 0;
        uint32_t first_edges = 0;
        for (uint32_t i = 0; i < ne; i++) {
            bool dup = false;
            for (uint32_t j = 0; j < first_edges; j++) {
                dup = dup || edge[j] == edge[i];
            }
            if (!dup) {
                edge[first_edges++] = edge[i];
            }
        }
        for (uint32_t i = 0;
             i < first_edges && ip.st == KF_OK && (i < 2 || !budget || ip.work < budget); i++) {
            uint32_t at[3];
            unlinear(g, edge[i], at);
            run_workgroup(&ip, all, at[0], at[1], at[2]);
            res->checked++;
        }
        uint64_t stride = total > 2 ? (uint64_t)((double)total * 0.6180339887) | 1u : 1u;
        while (kf__gcd_u64(stride, total) != 1) {
            stride++;
        }
        uint64_t linear = 0;
        for (uint64_t j = 0; j < total && ip.st == KF_OK && (!budget || ip.work < budget); j++) {
            bool dup = false;
            for (uint32_t e = 0; e < first_edges; e++) {
                dup = dup || edge[e] == linear;
            }
            if (!dup) {
                uint32_t at[3];
                unlinear(g, linear, at);
                run_workgroup(&ip, all, at[0], at[1], at[2]);
                res->checked++;
            }
            linear = (linear + stride) % total;
        }
        st = ip.st;
    }
    res->work = ip.work;
    res->guards_fired = ip.guards_fired;
    res->address_hash = ip.address_hash;
    free(all);
    interp_free(&ip);
    if (st == KF_ERROR_OUT_OF_MEMORY && !k->run_error[0]) {
        kf__run_fail(k, st, "out of memory");
    }
    /* a repeat would check the same accesses again (the same sample, too) */
    if (st == KF_OK && !c->needs_data) {
        if (c->seen_count == c->seen_cap) {
            uint32_t cap = c->seen_cap ? 2 * c->seen_cap : 8;
            uint64_t *grown = realloc(c->seen, cap * sizeof *grown);
            if (grown) {
                c->seen = grown;
                c->seen_cap = cap;
            }
        }
        if (c->seen_count < c->seen_cap) {
            c->seen[c->seen_count++] = sig;
        }
    }
    return st;
}

/* ======================================================================================== */
/* constant folding                                                                         */
/* ======================================================================================== */

struct kf__folder {
    interp ip;
};

kf__folder *kf__folder_new(const kf_kernel *w) {
    kf__folder *f = calloc(1, sizeof *f);
    if (!f) {
        return NULL;
    }
    f->ip.w = w;
    f->ip.lanes = 1;
    f->ip.sg = 1;
    f->ip.slot = calloc(w->node_count, sizeof *f->ip.slot);
    size_t total = 0;
    for (uint32_t i = 1; f->ip.slot && i < w->node_count; i++) {
        f->ip.slot[i] = total;
        total += kf__type_words(w->nodes[i].type);
    }
    f->ip.vals = calloc(total ? total : 1, sizeof *f->ip.vals);
    f->ip.state = calloc(1, 1);
    if (!f->ip.slot || !f->ip.vals || !f->ip.state) {
        kf__folder_free(f);
        return NULL;
    }
    return f;
}

bool kf__folder_eval(kf__folder *f, uint32_t id, uint32_t *out) {
    static const uint8_t one = 1;
    f->ip.st = KF_OK;
    if (!compute(&f->ip, id, &one)) {
        return false;
    }
    memcpy(out, V(&f->ip, id, 0), kf__type_words(f->ip.w->nodes[id].type) * sizeof *out);
    return true;
}

void kf__folder_free(kf__folder *f) {
    if (f) {
        free(f->ip.slot);
        free(f->ip.vals);
        free(f->ip.state);
        free(f);
    }
}

/* The kernel IR's data (src/ir): the arrays a kernel owns (nodes, statements, blocks, bindings,
 * variables, workgroup arrays, overrides), struct kf_kernel itself, and the in-bounds proof's
 * verdicts, with inline readers. Types only: no function of src/ir is declared here, so the WGSL
 * emitter (src/wgsl), a layer below the IR's code, reads a kernel through this header without
 * calling up into the IR (docs/architecture.md, "The folders"; the layering test holds this
 * header to it). The IR's functions are in ir/ir_internal.h.
 *
 * A kernel owns flat, growing arrays: nodes (values), statements, blocks, bindings, variables,
 * workgroup arrays and override constants. Public handles are indices into them plus the
 * kernel's tag, so a handle from another kernel is caught. Index 0 of every array is unused:
 * id 0 is the invalid handle.
 *
 * Values come in two sorts:
 *   - pure nodes (literals, arithmetic, calls, casts, builtins, overrides, loop variables) have no
 *     effect and are written inline where they are used, or named by a `let` when used more than
 *     once (decided by kf__kernel_prepare, so emitter and interpreter agree);
 *   - materialized nodes (named lets, loads, workgroup loads, variable reads, subgroup operations,
 *     array lengths) read state, so a KF__STMT_LET defines them where they were created.
 * A node's `scope` is the innermost block in which it may be used: for a materialized node, the
 * block of its let; for a pure node, the deepest scope among its operands.
 *
 * Statements form singly linked lists, one per block; if/for/loop statements own nested blocks.
 * The builder's current block is where new statements go; kf_end returns to its parent.
 */
#ifndef KF_IR_TYPES_H
#define KF_IR_TYPES_H

#include "kfuse.h"

typedef enum kf__ir_node_kind {
    KF__NODE_NONE = 0,
    /* pure */
    KF__NODE_LIT,      /* bits: the value (f32 and f16 as the bits of an f32) */
    KF__NODE_UNARY,    /* op: kf_op; args[0] */
    KF__NODE_BINARY,   /* op: kf_op; args[0], args[1] */
    KF__NODE_CALL,     /* op: kf_fn; args */
    KF__NODE_CAST,     /* args[0] converted to type */
    KF__NODE_BITCAST,  /* args[0] reinterpreted as type */
    KF__NODE_SPLAT,    /* args[0] in every lane */
    KF__NODE_VEC,      /* args[0..lanes) */
    KF__NODE_EXTRACT,  /* args[0] lane/element `ref` */
    KF__NODE_BUILTIN,  /* op: kf_builtin */
    KF__NODE_OVERRIDE, /* ref: override */
    KF__NODE_STAGE_IN, /* a stage's In (replaced when the kernel is lowered) */
    KF__NODE_INDEX,    /* a stage's element index (replaced when the kernel is lowered) */
    KF__NODE_LOOP_VAR, /* ref: the for statement */
    /* materialized: a KF__STMT_LET defines them */
    KF__NODE_NAMED,       /* kf_let: args[0] */
    KF__NODE_LOAD,        /* ref: binding; args[0]: index (0 for a whole uniform) */
    KF__NODE_SHARED_LOAD, /* ref: workgroup array; args[0]: index */
    KF__NODE_READ,        /* ref: variable */
    KF__NODE_SUBGROUP,    /* op: kf_subgroup_op; args[0]: value; args[1]: lane or 0 */
    KF__NODE_LENGTH       /* ref: binding */
} kf__ir_node_kind;

typedef struct kf__ir_node {
    uint8_t kind;
    uint8_t op;
    uint8_t nargs;
    uint8_t materialized; /* a let defines it (always for the materialized kinds) */
    kf_type type;
    uint32_t args[4];
    uint32_t ref;
    uint32_t bits;
    uint32_t name;  /* string-pool offset of the user's name or a naming hint; 0: none */
    uint32_t scope; /* innermost block where it may be used */
    uint32_t depth; /* expression nesting (1 for leaves and materialized values) */
    /* Where it was created: the block and the statement it came after (0: the block's start).
     * kf__kernel_prepare puts the let of a shared pure value there (or before the statement
     * holding that point, in an outer block). */
    uint32_t at_block;
    uint32_t at_stmt;
} kf__ir_node;

typedef enum kf__stmt_kind {
    KF__STMT_NONE = 0,
    KF__STMT_LET,          /* ref: node */
    KF__STMT_VAR,          /* ref: variable; a: init or 0 (zero) */
    KF__STMT_ASSIGN,       /* ref: variable; a: value */
    KF__STMT_STORE,        /* ref: binding; a: index; b: value */
    KF__STMT_SHARED_STORE, /* ref: workgroup array; a: index; b: value; c: the vector lane
                            written (a value), 0 for the whole element */
    KF__STMT_IF,           /* a: condition; body; else_body (0: none) */
    KF__STMT_FOR,          /* ref: loop-variable node; a: start; b: end; c: step; body */
    KF__STMT_LOOP,         /* body */
    KF__STMT_BREAK_UNLESS, /* a: condition (kf_while_cond) */
    KF__STMT_BREAK,
    KF__STMT_CONTINUE,
    KF__STMT_BARRIER,
    KF__STMT_YIELD,       /* a: value; b: index */
    KF__STMT_SGMAT_LOAD,  /* ref: matrix variable; a: offset; b: stride; d: the workgroup array
                             (or binding, with KF__SGMAT_STORAGE); flags */
    KF__STMT_SGMAT_STORE, /* ref: matrix variable; a, b, d, flags as for the load */
    KF__STMT_SGMAT_MMA    /* ref: the result matrix; d: left; e: right (variables); flags:
                             KF__SGMAT_FRESH for acc = left * right */
} kf__stmt_kind;

/* kf__stmt.flags of subgroup-matrix loads and stores */
/* KF__SGMAT_FRESH: an MMA that does not read its accumulator (acc = left * right) */
enum { KF__SGMAT_COL_MAJOR = 1u << 0, KF__SGMAT_STORAGE = 1u << 1, KF__SGMAT_FRESH = 1u << 2 };
/* kf__stmt.flags of a barrier: the one workgroupUniformLoad holds (kf_shared_load_uniform: the
 * interpreter runs it, the emitter prints none, the uniform load being one) */
enum { KF__BARRIER_OF_UNIFORM_LOAD = 1u << 0 };
/* kf__ir_node.op of a KF__NODE_SHARED_LOAD: 1 for workgroupUniformLoad */
enum { KF__SHARED_LOAD_UNIFORM = 1u };

typedef struct kf__stmt {
    uint8_t kind;
    uint8_t hoisted; /* a let kf__kernel_prepare added for a shared pure value */
    uint8_t flags;   /* subgroup-matrix loads and stores: KF__SGMAT_*; barriers: KF__BARRIER_* */
    uint32_t ref;
    uint32_t a, b, c;
    uint32_t d, e; /* subgroup-matrix statements: memory and matrix references (not values) */
    uint32_t body, else_body;
    uint32_t block; /* the block holding it */
    uint32_t next;  /* next statement of its block, 0 at the end */
} kf__stmt;

typedef struct kf__block {
    uint32_t parent; /* 0 for the kernel's body (block 1) */
    uint32_t owner;  /* the if/for/loop statement that owns it; 0 for the body */
    uint32_t first, last;
    uint32_t depth; /* 0 for the body */
} kf__block;

typedef enum kf__binding_role {
    KF__ROLE_DECLARED = 0, /* kf_kernel_storage / kf_kernel_uniform */
    KF__ROLE_IN,           /* a stage's "in", added when lowered */
    KF__ROLE_OUT           /* the store phase's "out", added when lowered */
} kf__binding_role;

typedef struct kf__binding {
    uint32_t name;
    uint8_t kind; /* kf_binding_kind */
    uint8_t role;
    kf_type type; /* storage: the element type; uniform: the whole type */
    /* Elements every launch binds at least (kf_kernel_set_binding_length; 0: unknown). The
     * in-bounds proof (bounds.c) relies on it and every launch checks it. */
    uint64_t length;
} kf__binding;

typedef struct kf__var {
    uint32_t name;
    kf_type type;   /* a subgroup matrix: its component type (a scalar) */
    uint32_t scope; /* the block of its declaration */
    uint8_t sgmat;  /* kf_sgmat_kind; 0 for an ordinary variable */
    uint32_t cols, rows;
} kf__var;

typedef struct kf__shared {
    uint32_t name;
    kf_type elem;
    uint32_t count;
} kf__shared;

typedef struct kf__override {
    uint32_t name;
    kf_type type;
    bool has_default;
    double value;
} kf__override;

/* What a kernel uses, for composition checks and the emitter's `enable`s. */
enum {
    KF__USES_BARRIER = 1u << 0,
    KF__USES_SUBGROUP = 1u << 1,  /* subgroup operations or builtins */
    KF__USES_BUILTIN = 1u << 2,   /* any invocation builtin */
    KF__USES_WORKGROUP = 1u << 3, /* workgroup memory */
    KF__USES_F16 = 1u << 4
};

#define KF__KERNEL_ERROR_SIZE 512
#define KF__MAX_DEPTH 1000 /* expression nesting; deeper ones must be named with kf_let */

struct kf_kernel {
    uint32_t tag; /* ties handles to this kernel */
    char *name;
    kf_type input, output;
    uint32_t workgroup[3];
    uint32_t grid[3];
    kf_status status;
    char error[KF__KERNEL_ERROR_SIZE];
    char run_error[KF__KERNEL_ERROR_SIZE]; /* the last failed run or interpretation */
    uint32_t cur_block;
    uint32_t uses;
    uint32_t input_node, index_node;
    uint32_t builtin_nodes[KF_BUILTIN_SUBGROUP_SIZE + 1]; /* one node per builtin */
    uint64_t version; /* bumped by every change; keys the cached WGSL */
    char *wgsl;
    uint64_t wgsl_version;
    uint64_t wgsl_key; /* what the cached WGSL was proved for: binding lengths and grid */
    /* kf_kernel_set_binding_length for a stage's "in" and a store phase's "out", which exist
     * only once the kernel is lowered (declared bindings keep theirs in kf__binding.length) */
    uint64_t in_length, out_length;

    kf__ir_node *nodes;
    uint32_t node_count, node_cap;
    kf__stmt *stmts;
    uint32_t stmt_count, stmt_cap;
    kf__block *blocks;
    uint32_t block_count, block_cap;
    kf__binding *bindings;
    uint32_t binding_count, binding_cap;
    kf__var *vars;
    uint32_t var_count, var_cap;
    kf__shared *shareds;
    uint32_t shared_count, shared_cap;
    kf__override *overrides;
    uint32_t override_count, override_cap;
    char *strings; /* offset 0 is "" */
    uint32_t string_len, string_cap;
};

/* The string-pool entry at `off` (0: ""). */
static inline const char *kf__str(const kf_kernel *k, uint32_t off) {
    return k->strings + off;
}

/* Lanes of a value type: 1 for scalars. */
static inline uint32_t kf__type_lanes(kf_type t) {
    return t.lanes <= 1 ? 1 : t.lanes;
}

static inline bool kf__type_uses_f16(kf_type t) {
    return t.scalar == KF_SCALAR_F16;
}

/* ---- the in-bounds proof's verdicts (ir/bounds.c computes them, the emitter reads them) ---- */

/* What the proof says of one access (a load, store, workgroup access or subgroup-matrix move). */
enum { KF__ACCESS_NONE = 0, KF__ACCESS_PROVED, KF__ACCESS_GUARDED };

typedef struct kf__bounds {
    uint8_t *node_verdict; /* per node of the prepared kernel: storage and workgroup loads */
    uint8_t *stmt_verdict; /* per statement: stores, workgroup stores, subgroup-matrix moves */
    uint32_t accesses, proved, guarded;
    char *report; /* one line per access, when asked for; NULL otherwise */
} kf__bounds;

#endif

/* Kernel objects: their arrays, strings, first error, accessors, cloning and binding lists. */
#include "ir/ir_internal.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tags only need to differ between kernels alive at the same time; a process-wide counter does
 * that without any global state a user could observe. */
static atomic_uint g_next_tag = 1;

static uint32_t new_tag(void) {
    uint32_t t;
    do {
        t = (uint32_t)atomic_fetch_add(&g_next_tag, 1u);
    } while (t == 0);
    return t;
}

bool kf__ok(const kf_kernel *k) {
    return k && k->status == KF_OK;
}

void kf__failv(kf_kernel *k, kf_status status, const char *fmt, va_list ap) {
    if (!k || k->status != KF_OK) {
        return;
    }
    k->status = status;
    int n = snprintf(k->error, sizeof k->error, "kernel '%s': ", k->name ? k->name : "kernel");
    if (n < 0 || (size_t)n >= sizeof k->error) {
        n = 0;
    }
    vsnprintf(k->error + n, sizeof k->error - (size_t)n, fmt, ap);
    k->version++;
}

void kf__fail(kf_kernel *k, kf_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    kf__failv(k, status, fmt, ap);
    va_end(ap);
}

kf_status kf__run_fail(kf_kernel *k, kf_status status, const char *fmt, ...) {
    if (k) {
        va_list ap;
        va_start(ap, fmt);
        int n = snprintf(k->run_error, sizeof k->run_error,
                         "kernel '%s': ", k->name ? k->name : "kernel");
        if (n < 0 || (size_t)n >= sizeof k->run_error) {
            n = 0;
        }
        vsnprintf(k->run_error + n, sizeof k->run_error - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return status;
}

/* Grows an array so that index `need` fits. */
static bool grow(kf_kernel *k, void **arr, uint32_t *cap, uint32_t need, size_t elem) {
    if (need < *cap) {
        return true;
    }
    uint32_t ncap = *cap ? *cap : 16;
    while (ncap <= need) {
        if (ncap > UINT32_MAX / 2) {
            kf__fail(k, KF_ERROR_OUT_OF_MEMORY, "too many IR objects");
            return false;
        }
        ncap *= 2;
    }
    void *p = realloc(*arr, (size_t)ncap * elem);
    if (!p) {
        kf__fail(k, KF_ERROR_OUT_OF_MEMORY, "out of memory while building");
        return false;
    }
    memset((char *)p + (size_t)*cap * elem, 0, (size_t)(ncap - *cap) * elem);
    *arr = p;
    *cap = ncap;
    return true;
}

#define GROW(k, arr, count, cap)                                                                   \
    grow((k), (void **)&(k)->arr, &(k)->cap, (k)->count, sizeof *(k)->arr)

uint32_t kf__string_add(kf_kernel *k, const char *s) {
    if (!s || !*s) {
        return 0;
    }
    size_t len = strlen(s);
    if (len > 4096) {
        len = 4096;
    }
    uint32_t need = k->string_len + (uint32_t)len + 1;
    if (need > k->string_cap) {
        uint32_t ncap = k->string_cap ? k->string_cap : 256;
        while (ncap < need) {
            ncap *= 2;
        }
        char *p = realloc(k->strings, ncap);
        if (!p) {
            kf__fail(k, KF_ERROR_OUT_OF_MEMORY, "out of memory while building");
            return 0;
        }
        k->strings = p;
        k->string_cap = ncap;
    }
    uint32_t off = k->string_len;
    memcpy(k->strings + off, s, len);
    k->strings[off + len] = '\0';
    k->string_len = need;
    return off;
}

uint32_t kf__node_new(kf_kernel *k, kf__ir_node_kind kind, kf_type type) {
    if (!GROW(k, nodes, node_count, node_cap)) {
        return 0;
    }
    uint32_t id = k->node_count++;
    kf__ir_node *n = &k->nodes[id];
    memset(n, 0, sizeof *n);
    n->kind = (uint8_t)kind;
    n->type = type;
    n->depth = 1;
    k->version++;
    return id;
}

uint32_t kf__stmt_new(kf_kernel *k, kf__stmt_kind kind) {
    if (!GROW(k, stmts, stmt_count, stmt_cap)) {
        return 0;
    }
    uint32_t id = k->stmt_count++;
    kf__stmt *s = &k->stmts[id];
    memset(s, 0, sizeof *s);
    s->kind = (uint8_t)kind;
    s->block = k->cur_block;
    kf__block *b = &k->blocks[k->cur_block];
    if (b->last) {
        k->stmts[b->last].next = id;
    } else {
        b->first = id;
    }
    b->last = id;
    k->version++;
    return id;
}

uint32_t kf__block_new(kf_kernel *k, uint32_t parent, uint32_t owner) {
    if (!GROW(k, blocks, block_count, block_cap)) {
        return 0;
    }
    uint32_t id = k->block_count++;
    kf__block *b = &k->blocks[id];
    memset(b, 0, sizeof *b);
    b->parent = parent;
    b->owner = owner;
    b->depth = parent ? k->blocks[parent].depth + 1 : 0;
    return id;
}

uint32_t kf__binding_new(kf_kernel *k, const char *name, kf_binding_kind kind, kf_type type,
                         kf__binding_role role) {
    if (!GROW(k, bindings, binding_count, binding_cap)) {
        return 0;
    }
    uint32_t nm = kf__string_add(k, name);
    if (!kf__ok(k)) {
        return 0;
    }
    uint32_t id = k->binding_count++;
    kf__binding *b = &k->bindings[id];
    b->name = nm;
    b->kind = (uint8_t)kind;
    b->role = (uint8_t)role;
    b->type = type;
    k->version++;
    return id;
}

uint32_t kf__var_new(kf_kernel *k, const char *name, kf_type type) {
    if (!GROW(k, vars, var_count, var_cap)) {
        return 0;
    }
    uint32_t nm = kf__string_add(k, name);
    if (!kf__ok(k)) {
        return 0;
    }
    uint32_t id = k->var_count++;
    k->vars[id].name = nm;
    k->vars[id].type = type;
    k->vars[id].scope = k->cur_block;
    k->version++;
    return id;
}

uint32_t kf__sgmat_var_new(kf_kernel *k, const char *name, kf_sgmat_kind kind, kf_scalar component,
                           uint32_t cols, uint32_t rows) {
    uint32_t id = kf__var_new(k, name, kf_type_scalar(component));
    if (id) {
        k->vars[id].sgmat = (uint8_t)kind;
        k->vars[id].cols = cols;
        k->vars[id].rows = rows;
    }
    return id;
}

uint32_t kf__shared_new(kf_kernel *k, const char *name, kf_type elem, uint32_t count) {
    if (!GROW(k, shareds, shared_count, shared_cap)) {
        return 0;
    }
    uint32_t nm = kf__string_add(k, name);
    if (!kf__ok(k)) {
        return 0;
    }
    uint32_t id = k->shared_count++;
    k->shareds[id].name = nm;
    k->shareds[id].elem = elem;
    k->shareds[id].count = count;
    k->uses |= KF__USES_WORKGROUP;
    k->version++;
    return id;
}

uint32_t kf__override_new(kf_kernel *k, const char *name, kf_type type, bool has_default,
                          double value) {
    if (!GROW(k, overrides, override_count, override_cap)) {
        return 0;
    }
    uint32_t nm = kf__string_add(k, name);
    if (!kf__ok(k)) {
        return 0;
    }
    uint32_t id = k->override_count++;
    k->overrides[id].name = nm;
    k->overrides[id].type = type;
    k->overrides[id].has_default = has_default;
    k->overrides[id].value = value;
    k->version++;
    return id;
}

uint32_t kf__override_find(const kf_kernel *k, const char *name) {
    for (uint32_t i = 1; i < k->override_count; i++) {
        if (!strcmp(kf__str(k, k->overrides[i].name), name)) {
            return i;
        }
    }
    return 0;
}

uint32_t kf__binding_find(const kf_kernel *k, const char *name) {
    for (uint32_t i = 1; i < k->binding_count; i++) {
        if (!strcmp(kf__str(k, k->bindings[i].name), name)) {
            return i;
        }
    }
    return 0;
}

bool kf__block_within(const kf_kernel *k, uint32_t inner, uint32_t outer) {
    if (outer == 0) {
        return true; /* module scope: literals, overrides, builtins */
    }
    while (inner && k->blocks[inner].depth > k->blocks[outer].depth) {
        inner = k->blocks[inner].parent;
    }
    return inner == outer;
}

uint32_t kf__block_deeper(const kf_kernel *k, uint32_t a, uint32_t b) {
    if (a == 0) {
        return b;
    }
    if (b == 0) {
        return a;
    }
    return k->blocks[a].depth >= k->blocks[b].depth ? a : b;
}

const char *kf__open_block_str(const kf_kernel *k, char *buf, size_t size) {
    const kf__block *b = &k->blocks[k->cur_block];
    const kf__stmt *s = &k->stmts[b->owner];
    switch ((kf__stmt_kind)s->kind) {
    case KF__STMT_IF:
        snprintf(buf, size, "%s", k->cur_block == s->else_body ? "else" : "if");
        break;
    case KF__STMT_FOR:
        snprintf(buf, size, "for '%s'", kf__str(k, k->nodes[s->ref].name));
        break;
    case KF__STMT_LOOP:
        snprintf(buf, size, "while");
        break;
    default:
        snprintf(buf, size, "block");
        break;
    }
    return buf;
}

static bool io_type_ok(kf_type t) {
    return t.scalar == KF_SCALAR_VOID ||
           (kf__type_valid(t) && t.scalar != KF_SCALAR_BOOL && t.count == 0);
}

kf_kernel *kf__kernel_new(const kf_kernel_desc *desc) {
    kf_kernel_desc d = {0};
    if (desc) {
        d = *desc;
    }
    kf_kernel *k = calloc(1, sizeof *k);
    if (!k) {
        return NULL;
    }
    k->tag = new_tag();
    const char *name = d.name && *d.name ? d.name : "kernel";
    k->name = malloc(strlen(name) + 1);
    if (!k->name) {
        free(k);
        return NULL;
    }
    strcpy(k->name, name);
    k->input = d.input;
    k->output = d.output;
    bool all_zero = !d.workgroup_size[0] && !d.workgroup_size[1] && !d.workgroup_size[2];
    for (int i = 0; i < 3; i++) {
        k->workgroup[i] =
            all_zero ? (i == 0 ? 256u : 1u) : (d.workgroup_size[i] ? d.workgroup_size[i] : 1u);
    }
    /* index 0 of every array is the invalid handle; string offset 0 is "" */
    k->strings = malloc(256);
    if (!k->strings) {
        free(k->name);
        free(k);
        return NULL;
    }
    k->strings[0] = '\0';
    k->string_len = 1;
    k->string_cap = 256;
    kf__node_new(k, KF__NODE_NONE, kf_type_scalar(KF_SCALAR_VOID));
    kf__block_new(k, 0, 0);
    kf__block_new(k, 0, 0); /* block 1: the body */
    k->cur_block = 1;
    if (GROW(k, stmts, stmt_count, stmt_cap)) {
        k->stmt_count = 1;
    }
    if (GROW(k, bindings, binding_count, binding_cap)) {
        k->binding_count = 1;
    }
    if (GROW(k, vars, var_count, var_cap)) {
        k->var_count = 1;
    }
    if (GROW(k, shareds, shared_count, shared_cap)) {
        k->shared_count = 1;
    }
    if (GROW(k, overrides, override_count, override_cap)) {
        k->override_count = 1;
    }
    if (k->status == KF_ERROR_OUT_OF_MEMORY) {
        kf_kernel_destroy(k);
        return NULL;
    }
    char ti[48], to[48];
    uint64_t total = (uint64_t)k->workgroup[0] * k->workgroup[1] * k->workgroup[2];
    if (!io_type_ok(d.input) || !io_type_ok(d.output)) {
        kf__fail(k, KF_ERROR_TYPE,
                 "kf_kernel_create: input %s and output %s: each must be void or a scalar or "
                 "vector of f32, f16, i32 or u32 (a type a buffer can hold)",
                 kf_type_str(d.input, ti, sizeof ti), kf_type_str(d.output, to, sizeof to));
    } else if (total > 1024 || k->workgroup[2] > 64) {
        kf__fail(k, KF_ERROR_LIMIT,
                 "kf_kernel_create: workgroup size %ux%ux%u is above what WebGPU allows (at most "
                 "1024 invocations, z at most 64)",
                 (unsigned)k->workgroup[0], (unsigned)k->workgroup[1], (unsigned)k->workgroup[2]);
    }
    if (kf__type_uses_f16(d.input) || kf__type_uses_f16(d.output)) {
        k->uses |= KF__USES_F16;
    }
    return k;
}

kf_kernel *kf_kernel_create(const kf_kernel_desc *desc) {
    return kf__kernel_new(desc);
}

void kf_kernel_destroy(kf_kernel *k) {
    if (!k) {
        return;
    }
    free(k->name);
    free(k->wgsl);
    free(k->nodes);
    free(k->stmts);
    free(k->blocks);
    free(k->bindings);
    free(k->vars);
    free(k->shareds);
    free(k->overrides);
    free(k->strings);
    free(k);
}

static bool dup_array(void **dst, const void *src, uint32_t cap, size_t elem) {
    *dst = NULL;
    if (!src || cap == 0) {
        return true;
    }
    *dst = malloc((size_t)cap * elem);
    if (!*dst) {
        return false;
    }
    memcpy(*dst, src, (size_t)cap * elem);
    return true;
}

kf_kernel *kf_kernel_clone(const kf_kernel *k) {
    if (!k) {
        return NULL;
    }
    kf_kernel *c = calloc(1, sizeof *c);
    if (!c) {
        return NULL;
    }
    *c = *k;
    c->tag = new_tag();
    c->wgsl = NULL;
    c->name = NULL;
    c->nodes = NULL;
    c->stmts = NULL;
    c->blocks = NULL;
    c->bindings = NULL;
    c->vars = NULL;
    c->shareds = NULL;
    c->overrides = NULL;
    c->strings = NULL;
    c->name = malloc(strlen(k->name) + 1);
    bool ok = c->name != NULL;
    if (ok) {
        strcpy(c->name, k->name);
    }
    ok = ok && dup_array((void **)&c->nodes, k->nodes, k->node_cap, sizeof *k->nodes);
    ok = ok && dup_array((void **)&c->stmts, k->stmts, k->stmt_cap, sizeof *k->stmts);
    ok = ok && dup_array((void **)&c->blocks, k->blocks, k->block_cap, sizeof *k->blocks);
    ok = ok && dup_array((void **)&c->bindings, k->bindings, k->binding_cap, sizeof *k->bindings);
    ok = ok && dup_array((void **)&c->vars, k->vars, k->var_cap, sizeof *k->vars);
    ok = ok && dup_array((void **)&c->shareds, k->shareds, k->shared_cap, sizeof *k->shareds);
    ok = ok &&
         dup_array((void **)&c->overrides, k->overrides, k->override_cap, sizeof *k->overrides);
    ok = ok && dup_array((void **)&c->strings, k->strings, k->string_cap, 1);
    if (!ok) {
        kf_kernel_destroy(c);
        return NULL;
    }
    return c;
}

kf_status kf_kernel_status(const kf_kernel *k) {
    return k ? k->status : KF_ERROR_INVALID_ARGUMENT;
}

const char *kf_kernel_error(const kf_kernel *k) {
    if (!k) {
        return "no kernel (NULL)";
    }
    return k->status != KF_OK ? k->error : k->run_error;
}

const char *kf_kernel_name(const kf_kernel *k) {
    return k ? k->name : "";
}

kf_type kf_kernel_input_type(const kf_kernel *k) {
    return k ? k->input : kf_type_scalar(KF_SCALAR_VOID);
}

kf_type kf_kernel_output_type(const kf_kernel *k) {
    return k ? k->output : kf_type_scalar(KF_SCALAR_VOID);
}

void kf_kernel_workgroup_size(const kf_kernel *k, uint32_t out[3]) {
    if (!out) {
        return;
    }
    for (int i = 0; i < 3; i++) {
        out[i] = k ? k->workgroup[i] : 0;
    }
}

void kf_kernel_set_grid(kf_kernel *k, const uint32_t groups[3]) {
    if (!k) {
        return;
    }
    for (int i = 0; i < 3; i++) {
        k->grid[i] = groups ? groups[i] : 0;
    }
}

void kf_kernel_grid(const kf_kernel *k, uint32_t out[3]) {
    if (!out) {
        return;
    }
    for (int i = 0; i < 3; i++) {
        out[i] = k ? k->grid[i] : 0;
    }
}

/* ---- bindings as emitted: "in" (stages), declared ones, "out" (kernels with output) ---- */

static bool is_stage(const kf_kernel *k) {
    return k->input.scalar != KF_SCALAR_VOID;
}

static bool has_output(const kf_kernel *k) {
    return k->output.scalar != KF_SCALAR_VOID;
}

uint32_t kf_kernel_binding_count(const kf_kernel *k) {
    if (!k) {
        return 0;
    }
    return (is_stage(k) ? 1u : 0u) + (k->binding_count - 1) + (has_output(k) ? 1u : 0u);
}

kf_status kf_kernel_binding_info(const kf_kernel *k, uint32_t index, kf_binding_info *out) {
    if (!k || !out) {
        if (k) {
            snprintf(((kf_kernel *)k)->run_error, sizeof k->run_error,
                     "kf_kernel_binding_info: out is NULL");
        }
        return KF_ERROR_INVALID_ARGUMENT;
    }
    uint32_t i = index;
    if (is_stage(k)) {
        if (i == 0) {
            out->name = "in";
            out->kind = KF_BINDING_STORAGE_READ;
            out->elem = k->input;
            return KF_OK;
        }
        i--;
    }
    if (i < k->binding_count - 1) {
        const kf__binding *b = &k->bindings[i + 1];
        out->name = kf__str(k, b->name);
        out->kind = (kf_binding_kind)b->kind;
        out->elem = b->type;
        return KF_OK;
    }
    i -= k->binding_count - 1;
    if (has_output(k) && i == 0) {
        out->name = "out";
        out->kind = KF_BINDING_STORAGE_READ_WRITE;
        out->elem = k->output;
        return KF_OK;
    }
    /* A failed query is reported like a failed run (run_error), not as a building error, which
     * would poison the kernel; the message is the caller's even through a const handle. */
    snprintf(((kf_kernel *)k)->run_error, sizeof k->run_error,
             "kf_kernel_binding_info: binding %u of '%s', which has %u bindings", index, k->name,
             kf_kernel_binding_count(k));
    return KF_ERROR_INVALID_ARGUMENT;
}

uint32_t kf_kernel_binding_kinds(const kf_kernel *k, kf_binding_kind *out, uint32_t capacity) {
    uint32_t n = kf_kernel_binding_count(k);
    for (uint32_t i = 0; i < n && i < capacity && out; i++) {
        kf_binding_info info;
        if (kf_kernel_binding_info(k, i, &info) == KF_OK) {
            out[i] = info.kind;
        }
    }
    return n;
}

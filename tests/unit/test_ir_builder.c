/* The kernel builder: types, handles, and every error path. Each error must come back as the
 * kernel's status with a message naming the operation and the types, stay the first error, and
 * turn later calls into no-ops returning the invalid handle. (The asan-ubsan preset runs these
 * too: nothing may leak on any path.) */
#include <string.h>

#include "harness.h"

static const kf_val NONE = {0, 0};

static kf_type f32(void) {
    return kf_type_scalar(KF_SCALAR_F32);
}
static kf_type u32(void) {
    return kf_type_scalar(KF_SCALAR_U32);
}

static kf_kernel *producer(const char *name, kf_type output) {
    kf_kernel_desc d = {0};
    d.name = name;
    d.output = output;
    return kf_kernel_create(&d);
}

static kf_kernel *stage(const char *name, kf_type t) {
    kf_kernel_desc d = {0};
    d.name = name;
    d.input = d.output = t;
    return kf_kernel_create(&d);
}

/* Checks k's status and that its message holds every fragment; destroys k. */
static bool expect(kf_kernel *k, kf_status status, const char *const *fragments, int line) {
    bool ok = true;
    if (!k) {
        kt_fail(__FILE__, line, "no kernel");
        return false;
    }
    /* emitting is where an unclosed block shows; an invalid kernel gives NULL */
    char *w = kf_kernel_emit_wgsl(k);
    if (status != KF_OK && w) {
        kt_fail(__FILE__, line, "an invalid kernel emitted WGSL");
        ok = false;
    }
    kf_free(w);
    if (kf_kernel_status(k) != status) {
        kt_fail(__FILE__, line, "status %s, expected %s (message: %s)",
                kf_status_str(kf_kernel_status(k)), kf_status_str(status), kf_kernel_error(k));
        ok = false;
    }
    for (const char *const *f = fragments; ok && *f; f++) {
        if (!strstr(kf_kernel_error(k), *f)) {
            kt_fail(__FILE__, line, "message '%s' lacks '%s'", kf_kernel_error(k), *f);
            ok = false;
        }
    }
    kf_kernel_destroy(k);
    return ok;
}

#define EXPECT(k, status, ...)                                                                     \
    do {                                                                                           \
        static const char *const frags_[] = {__VA_ARGS__, NULL};                                   \
        if (!expect((k), (status), frags_, __LINE__))                                              \
            return;                                                                                \
    } while (0)

KT_CPU_TEST(unit, ir_types) {
    char buf[48];
    KT_CHECK(!strcmp(kf_type_str(kf_type_vec(KF_SCALAR_F16, 4), buf, sizeof buf), "vec4<f16>"),
             "%s", buf);
    KT_CHECK(!strcmp(kf_type_str(kf_type_array(u32(), 8), buf, sizeof buf), "array<u32, 8>"), "%s",
             buf);
    KT_CHECK(!strcmp(kf_type_str(kf_type_array(kf_type_vec(KF_SCALAR_F32, 4), 3), buf, sizeof buf),
                     "array<vec4<f32>, 3>"),
             "%s", buf);
    KT_CHECK(kf_type_eq(kf_type_vec(KF_SCALAR_I32, 1), kf_type_scalar(KF_SCALAR_I32)),
             "vec1 is the scalar");
    KT_CHECK(!kf_type_eq(kf_type_vec(KF_SCALAR_I32, 2), kf_type_vec(KF_SCALAR_U32, 2)),
             "i32 vs u32");
}

KT_CPU_TEST(unit, ir_kernel_basics) {
    kf_kernel *k = stage("scale", f32());
    KT_CHECK(k && kf_kernel_status(k) == KF_OK, "create");
    KT_CHECK(!strcmp(kf_kernel_name(k), "scale") && !strcmp(kf_kernel_error(k), ""), "name");
    uint32_t wg[3];
    kf_kernel_workgroup_size(k, wg);
    KT_CHECK(wg[0] == 256 && wg[1] == 1 && wg[2] == 1, "default workgroup %ux%ux%u", wg[0], wg[1],
             wg[2]);
    kf_binding bias = kf_kernel_storage(k, "bias", f32(), KF_ACCESS_READ);
    kf_val y = kf_add(k, kf_kernel_input(k), kf_load(k, bias, kf_kernel_index(k)));
    KT_CHECK(kf_type_eq(kf_val_type(k, y), f32()), "type of y");
    kf_kernel_yield(k, y, kf_kernel_index(k));
    /* bindings in emission order: in, declared, out */
    KT_CHECK(kf_kernel_binding_count(k) == 3, "%u bindings", kf_kernel_binding_count(k));
    static const char *const names[] = {"in", "bias", "out"};
    static const kf_binding_kind kinds[] = {KF_BINDING_STORAGE_READ, KF_BINDING_STORAGE_READ,
                                            KF_BINDING_STORAGE_READ_WRITE};
    for (uint32_t i = 0; i < 3; i++) {
        kf_binding_info info;
        KT_CHECK_OK(kf_kernel_binding_info(k, i, &info));
        KT_CHECK(!strcmp(info.name, names[i]) && info.kind == kinds[i], "binding %u is %s", i,
                 info.name);
    }
    kf_binding_info info;
    KT_CHECK(kf_kernel_binding_info(k, 3, &info) == KF_ERROR_INVALID_ARGUMENT, "binding 3");
    /* a clone is equal but separate: its WGSL is the same, its handles its own */
    kf_kernel *c = kf_kernel_clone(k);
    char *a = kf_kernel_emit_wgsl(k), *b = kf_kernel_emit_wgsl(c);
    KT_CHECK(a && b && !strcmp(a, b), "clone emits other WGSL");
    kf_free(a);
    kf_free(b);
    kf_add(c, y, y);
    KT_CHECK(kf_kernel_status(c) == KF_ERROR_TYPE && strstr(kf_kernel_error(c), "another kernel"),
             "a handle of the original in the clone: %s", kf_kernel_error(c));
    KT_CHECK(kf_kernel_status(k) == KF_OK, "the original is untouched");
    kf_kernel_destroy(c);
    kf_kernel_destroy(k);
    kf_kernel_destroy(NULL);
    KT_CHECK(kf_kernel_status(NULL) == KF_ERROR_INVALID_ARGUMENT, "NULL kernel status");
}

KT_CPU_TEST(unit, ir_error_operand_types) {
    kf_kernel *k = producer("mix", kf_type_scalar(KF_SCALAR_VOID));
    kf_val s = kf_add(k, kf_lit_f32(k, 1.0f), kf_lit_u32(k, 2));
    KT_CHECK(s.id == 0, "a failed call returns the invalid handle");
    EXPECT(k, KF_ERROR_TYPE, "kernel 'mix'", "kf_add", "operand types differ", "f32 + u32");

    k = producer("cmp", kf_type_scalar(KF_SCALAR_VOID));
    kf_binary(k, KF_OP_LT, kf_lit_bool(k, true), kf_lit_bool(k, false));
    EXPECT(k, KF_ERROR_TYPE, "kf_binary(<)", "bool values have no order");

    k = producer("shift", kf_type_scalar(KF_SCALAR_VOID));
    kf_binary(k, KF_OP_SHL, kf_lit_u32(k, 1), kf_lit_i32(k, 2));
    EXPECT(k, KF_ERROR_TYPE, "kf_binary(<<)", "u32 << i32");

    k = producer("neg", kf_type_scalar(KF_SCALAR_VOID));
    kf_unary(k, KF_OP_NEG, kf_lit_u32(k, 1));
    EXPECT(k, KF_ERROR_TYPE, "kf_unary(-)", "cannot negate u32", "got u32");

    k = producer("vecs", kf_type_scalar(KF_SCALAR_VOID));
    kf_val v3 = kf_splat(k, kf_type_vec(KF_SCALAR_F32, 3), kf_lit_f32(k, 1));
    kf_val v2 = kf_splat(k, kf_type_vec(KF_SCALAR_F32, 2), kf_lit_f32(k, 1));
    kf_add(k, v3, v2);
    EXPECT(k, KF_ERROR_TYPE, "vec3<f32> + vec2<f32>");
}

KT_CPU_TEST(unit, ir_error_calls) {
    kf_kernel *k = producer("calls", kf_type_scalar(KF_SCALAR_VOID));
    kf_val args[2] = {kf_lit_f32(k, 1), kf_lit_f32(k, 2)};
    kf_call(k, KF_FN_CLAMP, args, 2);
    EXPECT(k, KF_ERROR_TYPE, "kf_call(clamp)", "expects 3 arguments, got 2");

    k = producer("calls", kf_type_scalar(KF_SCALAR_VOID));
    kf_call1(k, KF_FN_EXP, kf_lit_i32(k, 1));
    EXPECT(k, KF_ERROR_TYPE, "kf_call(exp)", "expects a float", "got i32");

    k = producer("calls", kf_type_scalar(KF_SCALAR_VOID));
    kf_call2(k, KF_FN_MAX, kf_lit_f32(k, 1), kf_lit_f16(k, 2));
    EXPECT(k, KF_ERROR_TYPE, "kf_call(max)", "(f32, f16)");

    k = producer("calls", kf_type_scalar(KF_SCALAR_VOID));
    kf_select(k, kf_lit_f32(k, 1), kf_lit_f32(k, 2), kf_lit_u32(k, 1));
    EXPECT(k, KF_ERROR_TYPE, "kf_call(select)", "(f32, f32, u32)");

    k = producer("calls", kf_type_scalar(KF_SCALAR_VOID));
    kf_call2(k, KF_FN_DOT, kf_lit_f32(k, 1), kf_lit_f32(k, 2));
    EXPECT(k, KF_ERROR_TYPE, "kf_call(dot)", "vectors");

    k = producer("calls", kf_type_scalar(KF_SCALAR_VOID));
    kf_call1(k, (kf_fn)99, kf_lit_f32(k, 1));
    EXPECT(k, KF_ERROR_INVALID_ARGUMENT, "kf_call", "99 is not a kf_fn");
}

KT_CPU_TEST(unit, ir_error_conversions) {
    kf_kernel *k = producer("conv", kf_type_scalar(KF_SCALAR_VOID));
    kf_cast(k, kf_type_vec(KF_SCALAR_F32, 2), kf_lit_u32(k, 1));
    EXPECT(k, KF_ERROR_TYPE, "kf_cast", "u32 to vec2<f32>", "lane counts differ");

    k = producer("conv", kf_type_scalar(KF_SCALAR_VOID));
    kf_bitcast(k, kf_type_scalar(KF_SCALAR_F16), kf_lit_u32(k, 1));
    EXPECT(k, KF_ERROR_TYPE, "kf_bitcast", "u32 as f16");

    k = producer("conv", kf_type_scalar(KF_SCALAR_VOID));
    kf_val lanes[3] = {kf_lit_f32(k, 1), kf_lit_f32(k, 2), kf_lit_i32(k, 3)};
    kf_vec(k, kf_type_vec(KF_SCALAR_F32, 3), lanes, 3);
    EXPECT(k, KF_ERROR_TYPE, "kf_vec", "lane 2 of vec3<f32> is i32");

    k = producer("conv", kf_type_scalar(KF_SCALAR_VOID));
    kf_val l2[2] = {kf_lit_f32(k, 1), kf_lit_f32(k, 2)};
    kf_vec(k, kf_type_vec(KF_SCALAR_F32, 3), l2, 2);
    EXPECT(k, KF_ERROR_TYPE, "kf_vec", "needs 3 lanes, got 2");

    k = producer("conv", kf_type_scalar(KF_SCALAR_VOID));
    kf_extract(k, kf_splat(k, kf_type_vec(KF_SCALAR_U32, 2), kf_lit_u32(k, 1)), 2);
    EXPECT(k, KF_ERROR_TYPE, "kf_extract", "index 2 is out of range for vec2<u32>");

    k = producer("conv", kf_type_scalar(KF_SCALAR_VOID));
    kf_extract(k, kf_lit_u32(k, 1), 0);
    EXPECT(k, KF_ERROR_TYPE, "kf_extract", "u32 is not a vector or array");

    k = producer("conv", kf_type_scalar(KF_SCALAR_VOID));
    kf_splat(k, kf_type_vec(KF_SCALAR_F32, 4), kf_lit_u32(k, 1));
    EXPECT(k, KF_ERROR_TYPE, "kf_splat", "vec4<f32> and u32");
}

KT_CPU_TEST(unit, ir_error_handles) {
    kf_kernel *a = producer("a", kf_type_scalar(KF_SCALAR_VOID));
    kf_kernel *b = producer("b", kf_type_scalar(KF_SCALAR_VOID));
    kf_val x = kf_lit_f32(a, 1.0f);
    kf_add(b, x, kf_lit_f32(b, 2.0f));
    kf_kernel_destroy(a);
    EXPECT(b, KF_ERROR_TYPE, "kernel 'b'", "kf_add", "argument 1 is a value from another kernel");

    kf_kernel *k = producer("k", kf_type_scalar(KF_SCALAR_VOID));
    kf_mul(k, kf_lit_f32(k, 1.0f), NONE);
    EXPECT(k, KF_ERROR_INVALID_ARGUMENT, "kf_mul", "argument 2 is the invalid value");

    /* sticky: the first error stays, later calls do nothing */
    k = producer("sticky", kf_type_scalar(KF_SCALAR_VOID));
    kf_add(k, kf_lit_f32(k, 1.0f), kf_lit_i32(k, 2));
    kf_val later = kf_lit_f32(k, 3.0f);
    KT_CHECK(later.id == 0, "a literal after an error is still the invalid handle");
    kf_barrier(k);
    kf_if(k, later);
    kf_end(k);
    kf_kernel_storage(k, "x", f32(), KF_ACCESS_READ);
    EXPECT(k, KF_ERROR_TYPE, "kf_add", "f32 + i32");

    k = producer("bindings", kf_type_scalar(KF_SCALAR_VOID));
    kf_kernel *other = producer("other", kf_type_scalar(KF_SCALAR_VOID));
    kf_binding ob = kf_kernel_storage(other, "x", f32(), KF_ACCESS_READ);
    kf_load(k, ob, kf_lit_u32(k, 0));
    kf_kernel_destroy(other);
    EXPECT(k, KF_ERROR_TYPE, "kf_load", "a binding from another kernel");
}

KT_CPU_TEST(unit, ir_error_scopes) {
    kf_kernel *k = producer("scope", kf_type_scalar(KF_SCALAR_VOID));
    kf_binding x = kf_kernel_storage(k, "x", f32(), KF_ACCESS_READ);
    kf_if(k, kf_lit_bool(k, true));
    kf_val inner = kf_load(k, x, kf_lit_u32(k, 0));
    kf_end(k);
    kf_add(k, inner, inner);
    EXPECT(k, KF_ERROR_TYPE, "kf_add", "used outside the block that defines it", "kf_declare");

    k = producer("loopvar", kf_type_scalar(KF_SCALAR_VOID));
    kf_val i = kf_for(k, "i", kf_lit_u32(k, 0), kf_lit_u32(k, 4), kf_lit_u32(k, 1));
    kf_end(k);
    kf_mul(k, i, i);
    EXPECT(k, KF_ERROR_TYPE, "kf_mul", "outside the block");

    k = producer("var", kf_type_scalar(KF_SCALAR_VOID));
    kf_while(k);
    kf_var v = kf_declare(k, "acc", f32(), NONE);
    kf_break(k);
    kf_end(k);
    kf_read(k, v);
    EXPECT(k, KF_ERROR_TYPE, "kf_read", "variable 'acc' is used outside the block");

    /* pure values of outer blocks stay usable after an inner block closes */
    k = producer("ok", kf_type_scalar(KF_SCALAR_VOID));
    kf_val a = kf_let(k, "a", kf_lit_f32(k, 2.0f));
    kf_if(k, kf_lit_bool(k, true));
    kf_val twice = kf_mul(k, a, kf_lit_f32(k, 2.0f));
    kf_end(k);
    kf_let(k, "b", kf_add(k, twice, a));
    EXPECT(k, KF_OK, "");
}

KT_CPU_TEST(unit, ir_error_statements) {
    kf_kernel *k = producer("st", kf_type_scalar(KF_SCALAR_VOID));
    kf_else(k);
    EXPECT(k, KF_ERROR_INVALID_ARGUMENT, "kf_else", "the kernel's body, not an if");

    k = producer("st", kf_type_scalar(KF_SCALAR_VOID));
    kf_for(k, "i", kf_lit_u32(k, 0), kf_lit_u32(k, 4), kf_lit_u32(k, 1));
    kf_else(k);
    EXPECT(k, KF_ERROR_INVALID_ARGUMENT, "kf_else", "for 'i', not an if");

    k = producer("st", kf_type_scalar(KF_SCALAR_VOID));
    kf_if(k, kf_lit_bool(k, true));
    kf_else(k);
    kf_else(k);
    EXPECT(k, KF_ERROR_INVALID_ARGUMENT, "kf_else", "already has an else");

    k = producer("st", kf_type_scalar(KF_SCALAR_VOID));
    kf_end(k);
    EXPECT(k, KF_ERROR_INVALID_ARGUMENT, "kf_end", "no if, for or while is open");

    k = producer("st", kf_type_scalar(KF_SCALAR_VOID));
    kf_break(k);
    EXPECT(k, KF_ERROR_INVALID_ARGUMENT, "kf_break", "not inside a while or for");

    k = producer("st", kf_type_scalar(KF_SCALAR_VOID));
    kf_if(k, kf_lit_bool(k, true));
    kf_continue(k);
    EXPECT(k, KF_ERROR_INVALID_ARGUMENT, "kf_continue", "not inside a while or for");

    k = producer("st", kf_type_scalar(KF_SCALAR_VOID));
    kf_while_cond(k, kf_lit_bool(k, true));
    EXPECT(k, KF_ERROR_INVALID_ARGUMENT, "kf_while_cond", "not inside");

    k = producer("st", kf_type_scalar(KF_SCALAR_VOID));
    kf_if(k, kf_lit_u32(k, 1));
    EXPECT(k, KF_ERROR_TYPE, "kf_if", "must be a bool, got u32");

    k = producer("st", kf_type_scalar(KF_SCALAR_VOID));
    kf_for(k, "i", kf_lit_u32(k, 0), kf_lit_i32(k, 4), kf_lit_u32(k, 1));
    EXPECT(k, KF_ERROR_TYPE, "kf_for", "u32, i32, u32");

    k = producer("st", kf_type_scalar(KF_SCALAR_VOID));
    kf_var v = kf_declare(k, "v", f32(), kf_lit_u32(k, 1));
    (void)v;
    EXPECT(k, KF_ERROR_TYPE, "kf_declare", "'v' is f32, its initial value is u32");

    k = producer("st", kf_type_scalar(KF_SCALAR_VOID));
    kf_var w = kf_declare(k, "w", f32(), NONE);
    kf_assign(k, w, kf_lit_f16(k, 1));
    EXPECT(k, KF_ERROR_TYPE, "kf_assign", "'w' is f32, the value is f16");

    /* a block left open is reported when the kernel is emitted */
    k = producer("open", kf_type_scalar(KF_SCALAR_VOID));
    kf_if(k, kf_lit_bool(k, true));
    kf_while(k);
    EXPECT(k, KF_ERROR_INVALID_ARGUMENT, "2 block(s) still open", "while", "kf_end");
}

KT_CPU_TEST(unit, ir_error_bindings) {
    kf_kernel *k = producer("b", kf_type_scalar(KF_SCALAR_VOID));
    kf_binding x = kf_kernel_storage(k, "x", f32(), KF_ACCESS_READ);
    kf_store(k, x, kf_lit_u32(k, 0), kf_lit_f32(k, 1));
    EXPECT(k, KF_ERROR_TYPE, "kf_store", "'x' is read-only");

    k = producer("b", kf_type_scalar(KF_SCALAR_VOID));
    kf_binding p = kf_kernel_uniform(k, "p", kf_type_vec(KF_SCALAR_F32, 4));
    kf_store(k, p, kf_lit_u32(k, 0), kf_lit_f32(k, 1));
    EXPECT(k, KF_ERROR_TYPE, "kf_store", "'p' is a uniform");

    k = producer("b", kf_type_scalar(KF_SCALAR_VOID));
    kf_binding y = kf_kernel_storage(k, "y", f32(), KF_ACCESS_READ_WRITE);
    kf_store(k, y, kf_lit_u32(k, 0), kf_lit_u32(k, 1));
    EXPECT(k, KF_ERROR_TYPE, "kf_store", "'y' holds f32, the value is u32");

    k = producer("b", kf_type_scalar(KF_SCALAR_VOID));
    kf_binding z = kf_kernel_storage(k, "z", f32(), KF_ACCESS_READ);
    kf_load(k, z, kf_lit_f32(k, 0));
    EXPECT(k, KF_ERROR_TYPE, "kf_load", "index into 'z' must be an i32 or u32, got f32");

    k = producer("b", kf_type_scalar(KF_SCALAR_VOID));
    kf_kernel_storage(k, "x", f32(), KF_ACCESS_READ);
    kf_kernel_storage(k, "x", u32(), KF_ACCESS_READ);
    EXPECT(k, KF_ERROR_INVALID_ARGUMENT, "kf_kernel_storage", "'x' already exists");

    k = stage("s", f32());
    kf_kernel_storage(k, "in", f32(), KF_ACCESS_READ);
    EXPECT(k, KF_ERROR_INVALID_ARGUMENT, "'in' is the stage's input binding");

    k = producer("b", f32());
    kf_kernel_storage(k, "out", f32(), KF_ACCESS_READ_WRITE);
    EXPECT(k, KF_ERROR_INVALID_ARGUMENT, "'out' is the kernel's output binding");

    k = producer("b", kf_type_scalar(KF_SCALAR_VOID));
    kf_kernel_storage(k, "flags", kf_type_scalar(KF_SCALAR_BOOL), KF_ACCESS_READ);
    EXPECT(k, KF_ERROR_TYPE, "kf_kernel_storage", "'flags'", "bool cannot be stored");

    k = producer("b", kf_type_scalar(KF_SCALAR_VOID));
    kf_kernel_uniform(k, "u", kf_type_array(f32(), 4));
    EXPECT(k, KF_ERROR_TYPE, "kf_kernel_uniform", "array<f32, 4>", "16-byte stride");

    k = producer("b", kf_type_scalar(KF_SCALAR_VOID));
    kf_binding s = kf_kernel_uniform(k, "s", kf_type_scalar(KF_SCALAR_U32));
    kf_load(k, s, kf_lit_u32(k, 0));
    EXPECT(k, KF_ERROR_TYPE, "kf_load", "uniform 's' is not an array");

    k = producer("b", kf_type_scalar(KF_SCALAR_VOID));
    kf_binding ua = kf_kernel_uniform(k, "ua", kf_type_array(kf_type_vec(KF_SCALAR_F32, 4), 2));
    kf_load(k, ua, kf_lit_u32(k, 2));
    EXPECT(k, KF_ERROR_TYPE, "kf_load", "index 2 is out of range for 'ua'");

    k = producer("b", kf_type_scalar(KF_SCALAR_VOID));
    kf_binding_length(k, kf_kernel_uniform(k, "q", u32()));
    EXPECT(k, KF_ERROR_TYPE, "kf_binding_length", "'q' is a uniform");

    k = producer("b", kf_type_scalar(KF_SCALAR_VOID));
    kf_kernel_storage(k, NULL, f32(), KF_ACCESS_READ);
    EXPECT(k, KF_ERROR_INVALID_ARGUMENT, "a binding needs a name");
}

KT_CPU_TEST(unit, ir_error_overrides) {
    kf_kernel *k = producer("o", kf_type_scalar(KF_SCALAR_VOID));
    kf_kernel_override(k, "block size", u32(), 4);
    EXPECT(k, KF_ERROR_INVALID_ARGUMENT, "kf_kernel_override", "'block size' is not usable");

    k = producer("o", kf_type_scalar(KF_SCALAR_VOID));
    kf_kernel_override(k, "let", u32(), 4);
    EXPECT(k, KF_ERROR_INVALID_ARGUMENT, "'let' is not usable");

    k = producer("o", kf_type_scalar(KF_SCALAR_VOID));
    kf_kernel_override(k, "kf_elements", u32(), 4);
    EXPECT(k, KF_ERROR_INVALID_ARGUMENT, "not starting with kf_");

    k = producer("o", kf_type_scalar(KF_SCALAR_VOID));
    kf_kernel_override(k, "n", u32(), 4);
    kf_kernel_override(k, "n", u32(), 4);
    EXPECT(k, KF_ERROR_INVALID_ARGUMENT, "'n' is declared twice");

    k = producer("o", kf_type_scalar(KF_SCALAR_VOID));
    kf_kernel_override(k, "n", u32(), -1);
    EXPECT(k, KF_ERROR_TYPE, "'n': default -1 is not a u32");

    k = producer("o", kf_type_scalar(KF_SCALAR_VOID));
    kf_kernel_override(k, "v", kf_type_vec(KF_SCALAR_F32, 2), 0);
    EXPECT(k, KF_ERROR_TYPE, "'v': type vec2<f32> is not a scalar");
}

KT_CPU_TEST(unit, ir_error_workgroup_and_subgroups) {
    kf_kernel *k = producer("w", kf_type_scalar(KF_SCALAR_VOID));
    kf_kernel_workgroup(k, "tile", f32(), 0);
    EXPECT(k, KF_ERROR_INVALID_ARGUMENT, "kf_kernel_workgroup", "'tile': 0 elements");

    k = producer("w", kf_type_scalar(KF_SCALAR_VOID));
    kf_shared t = kf_kernel_workgroup(k, "tile", f32(), 16);
    kf_shared_store(k, t, kf_lit_u32(k, 16), kf_lit_f32(k, 0));
    EXPECT(k, KF_ERROR_TYPE, "kf_shared_store", "index 16 is out of range for 'tile' (16");

    k = producer("w", kf_type_scalar(KF_SCALAR_VOID));
    kf_shared t2 = kf_kernel_workgroup(k, "tile", f32(), 16);
    kf_shared_store(k, t2, kf_lit_u32(k, 1), kf_lit_u32(k, 0));
    EXPECT(k, KF_ERROR_TYPE, "kf_shared_store", "'tile' holds f32, the value is u32");

    k = producer("w", kf_type_scalar(KF_SCALAR_VOID));
    kf_shared t3 = kf_kernel_workgroup(k, "tile", f32(), 16);
    kf_shared_store_lane(k, t3, kf_lit_u32(k, 1), kf_lit_u32(k, 0), kf_lit_f32(k, 0));
    EXPECT(k, KF_ERROR_TYPE, "kf_shared_store_lane", "'tile' holds f32, which has no lanes");

    k = producer("w", kf_type_scalar(KF_SCALAR_VOID));
    kf_shared t4 = kf_kernel_workgroup(k, "tile", kf_type_vec(KF_SCALAR_F32, 4), 16);
    kf_shared_store_lane(k, t4, kf_lit_u32(k, 1), kf_lit_u32(k, 4), kf_lit_f32(k, 0));
    EXPECT(k, KF_ERROR_TYPE, "kf_shared_store_lane", "index 4 is out of range for the lanes of");

    k = producer("w", kf_type_scalar(KF_SCALAR_VOID));
    kf_shared t5 = kf_kernel_workgroup(k, "tile", kf_type_vec(KF_SCALAR_F32, 4), 16);
    kf_shared_store_lane(k, t5, kf_lit_u32(k, 1), kf_lit_f32(k, 1), kf_lit_f32(k, 0));
    EXPECT(k, KF_ERROR_TYPE, "kf_shared_store_lane", "must be an i32 or u32, got f32");

    k = producer("w", kf_type_scalar(KF_SCALAR_VOID));
    kf_shared t6 = kf_kernel_workgroup(k, "tile", kf_type_vec(KF_SCALAR_F32, 4), 16);
    kf_shared_store_lane(k, t6, kf_lit_u32(k, 1), kf_lit_u32(k, 2), kf_lit_u32(k, 0));
    EXPECT(k, KF_ERROR_TYPE, "kf_shared_store_lane", "'tile' has lanes of f32, the value is u32");

    k = stage("st", f32());
    kf_barrier(k);
    EXPECT(k, KF_ERROR_TYPE, "kf_barrier", "a stage runs per element under a bounds check");

    k = stage("st", f32());
    kf_subgroup(k, KF_SUBGROUP_ADD, kf_kernel_input(k), NONE);
    EXPECT(k, KF_ERROR_TYPE, "subgroupAdd", "uniform control flow");

    k = producer("sg", kf_type_scalar(KF_SCALAR_VOID));
    kf_val lane = kf_let(k, "lane", kf_lit_u32(k, 1));
    kf_subgroup(k, KF_SUBGROUP_BROADCAST, kf_lit_f32(k, 1), lane);
    EXPECT(k, KF_ERROR_TYPE, "subgroupBroadcast", "must be a literal", "KF_SUBGROUP_SHUFFLE");

    k = producer("sg", kf_type_scalar(KF_SCALAR_VOID));
    kf_subgroup(k, KF_SUBGROUP_ADD, kf_lit_bool(k, true), NONE);
    EXPECT(k, KF_ERROR_TYPE, "subgroupAdd", "got bool");
}

KT_CPU_TEST(unit, ir_error_store_phase) {
    kf_kernel *k = producer("p", kf_type_scalar(KF_SCALAR_VOID));
    kf_kernel_input(k);
    EXPECT(k, KF_ERROR_TYPE, "kf_kernel_input", "producer (input void)");

    k = producer("p", kf_type_scalar(KF_SCALAR_VOID));
    kf_kernel_index(k);
    EXPECT(k, KF_ERROR_TYPE, "kf_kernel_index", "kf_global_linear");

    k = producer("p", kf_type_scalar(KF_SCALAR_VOID));
    kf_kernel_yield(k, kf_lit_f32(k, 1), kf_lit_u32(k, 0));
    EXPECT(k, KF_ERROR_TYPE, "kf_kernel_yield", "output type is void");

    k = producer("p", f32());
    kf_kernel_yield(k, kf_lit_u32(k, 1), kf_lit_u32(k, 0));
    EXPECT(k, KF_ERROR_TYPE, "kf_kernel_yield", "outputs f32, the value is u32");

    k = producer("p", f32());
    kf_kernel_yield(k, kf_lit_f32(k, 1), kf_lit_i32(k, 0));
    EXPECT(k, KF_ERROR_TYPE, "kf_kernel_yield", "index must be a u32, got i32");

    kf_kernel_desc d = {0};
    d.name = "bad";
    d.output = kf_type_scalar(KF_SCALAR_BOOL);
    EXPECT(kf_kernel_create(&d), KF_ERROR_TYPE, "kf_kernel_create", "output bool");

    kf_kernel_desc big = {0};
    big.workgroup_size[0] = 64;
    big.workgroup_size[1] = 32;
    EXPECT(kf_kernel_create(&big), KF_ERROR_LIMIT, "workgroup size 64x32x1");

    /* expressions deeper than the limit ask for a kf_let */
    k = producer("deep", kf_type_scalar(KF_SCALAR_VOID));
    kf_val v = kf_lit_f32(k, 1);
    for (int i = 0; i < 1100; i++) {
        v = kf_add(k, v, kf_lit_f32(k, 1));
    }
    EXPECT(k, KF_ERROR_LIMIT, "nested", "kf_let");
}

static kf_val wrong_type(kf_kernel *k, kf_val x, void *user) {
    (void)user;
    return kf_cast(k, kf_type_scalar(KF_SCALAR_U32), x);
}

static kf_val leaves_open(kf_kernel *k, kf_val x, void *user) {
    (void)user;
    kf_if(k, kf_lit_bool(k, true));
    return x;
}

KT_CPU_TEST(unit, ir_error_map) {
    EXPECT(kf_kernel_map("m", f32(), f32(), NULL, NULL, NULL), KF_ERROR_INVALID_ARGUMENT,
           "kf_kernel_map", "NULL");
    EXPECT(kf_kernel_map("m", f32(), f32(), NULL, wrong_type, NULL), KF_ERROR_TYPE,
           "kf_kernel_yield", "outputs f32, the value is u32");
    EXPECT(kf_kernel_map("m", f32(), f32(), NULL, leaves_open, NULL), KF_ERROR_INVALID_ARGUMENT,
           "left an if, for or while open");
    EXPECT(kf_kernel_map("m", kf_type_scalar(KF_SCALAR_VOID), f32(), NULL, wrong_type, NULL),
           KF_ERROR_TYPE, "must not be void");
}

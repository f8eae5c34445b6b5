/* .npy reading and writing: files numpy wrote (tests/data/npy, made by numpy 1.24's np.save) are
 * read exactly, files kfuse writes are byte-identical to numpy's, f16 conversion is exact and
 * rounds to nearest even, and damaged files of every kind are refused with a message. */
#include "harness.h"
#include "core/half.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NPY_DATA KF_SOURCE_DIR "/tests/data/npy/"

/* A scratch folder per test run, removed at exit with whatever a failed test left in it. */
static char scratch[64];

static void scratch_remove(void) {
    DIR *d = opendir(scratch);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        char path[512];
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            snprintf(path, sizeof path, "%s/%s", scratch, e->d_name);
            remove(path);
        }
    }
    if (d) {
        closedir(d);
    }
    rmdir(scratch);
}

static const char *scratch_dir(void) {
    if (!scratch[0]) {
        snprintf(scratch, sizeof scratch, "/tmp/kfuse-npy-XXXXXX");
        if (!mkdtemp(scratch)) {
            scratch[0] = '\0';
            return NULL;
        }
        atexit(scratch_remove);
    }
    return scratch;
}

static bool scratch_path(char *buf, size_t size, const char *name) {
    const char *dir = scratch_dir();
    if (!dir) {
        return false;
    }
    snprintf(buf, size, "%s/%s", dir, name);
    return true;
}

static unsigned char *read_bytes(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        return NULL;
    }
    size_t cap = 1024, n = 0;
    unsigned char *buf = malloc(cap);
    for (;;) {
        if (n == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        if (!got) {
            break;
        }
        n += got;
    }
    fclose(f);
    *size = n;
    return buf;
}

static bool write_bytes(const char *path, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        return false;
    }
    bool ok = fwrite(data, 1, size, f) == size;
    return fclose(f) == 0 && ok;
}

/* Reads a file that must fail; returns the message (static) or NULL after reporting. */
static const char *read_must_fail(const char *path, kf_status *status) {
    static char msg[512];
    kf_tensor *t = (kf_tensor *)1;
    *status = kf_npy_read(path, &t, msg, sizeof msg);
    if (*status == KF_OK || t != NULL || !msg[0]) {
        kt_fail(__FILE__, __LINE__, "%s: expected an error with a message, got %s (msg '%s')", path,
                kf_status_str(*status), msg);
        kf_tensor_destroy(*status == KF_OK ? t : NULL);
        return NULL;
    }
    return msg;
}

KT_CPU_TEST(unit, npy_reads_numpy_files) {
    static const struct {
        const char *file;
        uint32_t rank;
        uint32_t dims[4];
        float values[12];
        uint32_t count;
    } cases[] = {
        {"f32_2x3.npy", 2, {2, 3}, {-1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f}, 6},
        {"f16_3.npy", 1, {3}, {1.0f, -2.5f, 65504.0f}, 3},
        {"f32_scalar.npy", 0, {0}, {3.25f}, 1},
        {"f32_7_v2.npy", 1, {7}, {0, 1, 2, 3, 4, 5, 6}, 7},
        {"i32_4.npy", 1, {4}, {0, 3, -2, 7}, 4},
        {"f32_4d.npy", 4, {2, 1, 3, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 12},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char path[512], msg[256];
        snprintf(path, sizeof path, "%s%s", NPY_DATA, cases[c].file);
        kf_tensor *t = NULL;
        kf_status st = kf_npy_read(path, &t, msg, sizeof msg);
        KT_CHECK(st == KF_OK, "%s: %s: %s", cases[c].file, kf_status_str(st), msg);
        KT_CHECK(t->shape.rank == cases[c].rank, "%s: rank %u", cases[c].file, t->shape.rank);
        for (uint32_t d = 0; d < cases[c].rank; d++) {
            KT_CHECK(t->shape.dims[d] == cases[c].dims[d], "%s: dim %u is %u", cases[c].file, d,
                     t->shape.dims[d]);
        }
        KT_CHECK(kf_tensor_size(t) == cases[c].count, "%s: size", cases[c].file);
        for (uint32_t i = 0; i < cases[c].count; i++) {
            KT_CHECK(t->data[i] == cases[c].values[i], "%s: [%u] = %g, expected %g", cases[c].file,
                     i, (double)t->data[i], (double)cases[c].values[i]);
        }
        kf_tensor_destroy(t);
    }
}

/* What kfuse writes is what numpy writes, byte for byte (numpy reads it back for the same
 * reason). */
KT_CPU_TEST(unit, npy_write_matches_numpy_bytes) {
    static const struct {
        const char *file;
        kf_dtype dtype;
    } cases[] = {
        {"f32_2x3.npy", KF_DTYPE_F32},    {"f16_3.npy", KF_DTYPE_F16},
        {"f32_scalar.npy", KF_DTYPE_F32}, {"i32_4.npy", KF_DTYPE_I32},
        {"f32_4d.npy", KF_DTYPE_F32},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char ref[512], out[512], msg[256];
        snprintf(ref, sizeof ref, "%s%s", NPY_DATA, cases[c].file);
        KT_CHECK(scratch_path(out, sizeof out, cases[c].file), "no scratch folder");
        kf_tensor *t = NULL;
        KT_CHECK_OK(kf_npy_read(ref, &t, msg, sizeof msg));
        kf_status st = kf_npy_write(out, t, cases[c].dtype);
        kf_tensor_destroy(t);
        KT_CHECK(st == KF_OK, "write %s: %s", out, kf_status_str(st));
        size_t ref_size = 0, out_size = 0;
        unsigned char *a = read_bytes(ref, &ref_size);
        unsigned char *b = read_bytes(out, &out_size);
        bool same = a && b && ref_size == out_size && !memcmp(a, b, ref_size);
        size_t first = 0;
        while (a && b && first < ref_size && first < out_size && a[first] == b[first]) {
            first++;
        }
        free(a);
        free(b);
        remove(out);
        KT_CHECK(same, "%s: %zu bytes written, numpy's has %zu; first difference at byte %zu",
                 cases[c].file, out_size, ref_size, first);
    }
}

KT_CPU_TEST(unit, npy_roundtrip_edge_shapes) {
    static const kf_shape shapes[] = {
        {0, {0}},       {1, {1}},          {1, {7}},      {2, {1, 1}},     {2, {13, 17}},
        {3, {2, 3, 5}}, {4, {3, 1, 2, 7}}, {1, {100003}}, {2, {1, 65537}},
    };
    char path[512];
    KT_CHECK(scratch_path(path, sizeof path, "roundtrip.npy"), "no scratch folder");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        for (int h = 0; h < 2; h++) {
            kf_dtype dtype = h ? KF_DTYPE_F16 : KF_DTYPE_F32;
            kf_tensor *t = NULL, *back = NULL;
            KT_CHECK_OK(kf_tensor_create(&shapes[s], &t));
            for (uint64_t i = 0; i < kf_tensor_size(t); i++) {
                t->data[i] = kt_rand_f32(-100.0f, 100.0f);
            }
            KT_CHECK_OK(kf_npy_write(path, t, dtype));
            char msg[256];
            kf_status st = kf_npy_read(path, &back, msg, sizeof msg);
            KT_CHECK(st == KF_OK, "shape %zu: %s", s, msg);
            KT_CHECK(kf_shape_eq(&t->shape, &back->shape), "shape %zu changed", s);
            /* f32 comes back exactly; f16 comes back as the nearest half */
            for (uint64_t i = 0; i < kf_tensor_size(t); i++) {
                float want = h ? kf__half_to_float(kf__half_from_float(t->data[i])) : t->data[i];
                KT_CHECK(back->data[i] == want, "shape %zu %s [%llu]: %g, expected %g", s,
                         h ? "f16" : "f32", (unsigned long long)i, (double)back->data[i],
                         (double)want);
            }
            kf_tensor_destroy(t);
            kf_tensor_destroy(back);
        }
    }
    remove(path);
}

/* Every half value written from its exact f32 comes back bit for bit (NaNs as NaNs), and read
 * back it is that same float: the file holds the half the spec says. */
KT_CPU_TEST(unit, npy_f16_all_values_exact) {
    kf_shape shape = kf_shape_1d(65536);
    kf_tensor *t = NULL;
    KT_CHECK_OK(kf_tensor_create(&shape, &t));
    for (uint32_t i = 0; i < 65536; i++) {
        t->data[i] = kf__half_to_float((uint16_t)i);
    }
    char path[512];
    KT_CHECK(scratch_path(path, sizeof path, "all_halves.npy"), "no scratch folder");
    KT_CHECK_OK(kf_npy_write(path, t, KF_DTYPE_F16));
    size_t size = 0;
    unsigned char *bytes = read_bytes(path, &size);
    KT_CHECK(bytes && size == 128 + 2 * 65536, "file size %zu", size);
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)(bytes[128 + 2 * i] | bytes[128 + 2 * i + 1] << 8);
        bool nan = (i & 0x7c00u) == 0x7c00u && (i & 0x3ffu);
        KT_CHECK(nan ? ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) : h == i,
                 "half 0x%04x written as 0x%04x", i, h);
    }
    free(bytes);
    kf_tensor *back = NULL;
    char msg[256];
    KT_CHECK_OK(kf_npy_read(path, &back, msg, sizeof msg));
    for (uint32_t i = 0; i < 65536; i++) {
        float a = t->data[i], b = back->data[i];
        KT_CHECK((isnan(a) && isnan(b)) || (a == b && signbit(a) == signbit(b)),
                 "half 0x%04x: %g read as %g", i, (double)a, (double)b);
    }
    kf_tensor_destroy(t);
    kf_tensor_destroy(back);
    remove(path);
}

KT_CPU_TEST(unit, npy_f16_rounding) {
    static const struct {
        float in;
        uint16_t half;
    } cases[] = {
        {1.0f, 0x3c00},
        {1.0f + 1.0f / 2048.0f, 0x3c00},                   /* halfway: to even (down) */
        {1.0f + 3.0f / 2048.0f, 0x3c02},                   /* halfway: to even (up) */
        {1.0f + 1.0f / 2048.0f + 1.0f / 65536.0f, 0x3c01}, /* just above halfway */
        {65504.0f, 0x7bff},
        {65519.0f, 0x7bff}, /* below the halfway point to 65536 */
        {65520.0f, 0x7c00}, /* halfway: rounds to even, which is infinity */
        {1e10f, 0x7c00},
        {-1e10f, 0xfc00},
        {0x1p-24f, 0x0001},   /* the smallest subnormal */
        {0x1p-25f, 0x0000},   /* halfway between 0 and 2^-24: to even */
        {0x1.8p-25f, 0x0001}, /* above that halfway point */
        {0x1p-14f, 0x0400},   /* the smallest normal */
        {-0.0f, 0x8000},
        {-2.5f, 0xc100},
        {INFINITY, 0x7c00},
    };
    size_t n = sizeof cases / sizeof cases[0];
    kf_shape shape = kf_shape_1d((uint32_t)n);
    kf_tensor *t = NULL;
    KT_CHECK_OK(kf_tensor_create(&shape, &t));
    for (size_t i = 0; i < n; i++) {
        t->data[i] = cases[i].in;
    }
    char path[512];
    KT_CHECK(scratch_path(path, sizeof path, "rounding.npy"), "no scratch folder");
    KT_CHECK_OK(kf_npy_write(path, t, KF_DTYPE_F16));
    kf_tensor_destroy(t);
    size_t size = 0;
    unsigned char *bytes = read_bytes(path, &size);
    remove(path);
    KT_CHECK(bytes && size == 128 + 2 * n, "file size %zu", size);
    for (size_t i = 0; i < n; i++) {
        uint16_t h = (uint16_t)(bytes[128 + 2 * i] | bytes[128 + 2 * i + 1] << 8);
        KT_CHECK(h == cases[i].half, "%.9g written as 0x%04x, expected 0x%04x", (double)cases[i].in,
                 h, cases[i].half);
    }
    free(bytes);
}

KT_CPU_TEST(unit, npy_refuses_unsupported_files) {
    static const struct {
        const char *file;
        const char *needle;
    } cases[] = {
        {"f32_fortran.npy", "Fortran order"},
        {"f64_2.npy", "'<f8' is not supported"},
        {"f32_be.npy", "big-endian"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char path[512];
        snprintf(path, sizeof path, "%s%s", NPY_DATA, cases[c].file);
        kf_status st;
        const char *msg = read_must_fail(path, &st);
        KT_CHECK(msg, "%s", cases[c].file);
        KT_CHECK(st == KF_ERROR_IO, "%s: %s", cases[c].file, kf_status_str(st));
        KT_CHECK(strstr(msg, cases[c].needle) && strstr(msg, cases[c].file),
                 "%s: message '%s' lacks '%s' or the path", cases[c].file, msg, cases[c].needle);
    }
    kf_status st;
    const char *msg = read_must_fail("/nonexistent/kfuse/x.npy", &st);
    KT_CHECK(msg && st == KF_ERROR_IO && strstr(msg, "/nonexistent/kfuse/x.npy"),
             "missing file: %s", msg ? msg : "");
}

/* A valid header with one field changed at a time: each must be refused, saying what. */
KT_CPU_TEST(unit, npy_refuses_bad_headers) {
    static const struct {
        const char *header; /* NULL data size: computed as 4 bytes * 6 */
        const char *needle;
    } cases[] = {
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", NULL},
        {"{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", "Fortran"},
        {"{'descr': '<i8', 'fortran_order': False, 'shape': (2, 3), }", "'<i8' is not supported"},
        {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2, 3), }", "structured"},
        {"{'descr': '<f4', 'shape': (2, 3), }", "lacks 'fortran_order'"},
        {"{'descr': '<f4', 'fortran_order': False, }", "lacks 'shape'"},
        {"{'fortran_order': False, 'shape': (2, 3), }", "lacks 'descr'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}", "unexpected key"},
        {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}", "twice"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 3), }", "negative"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 1, 3, 1), }", "more than 4"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 1), }", "above"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (0, 3), }", "empty arrays"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (65536, 65536), }", "elements"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (65536, 65535), }", "truncated"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } x", "after the header"},
        {"{'descr': '<f4, 'fortran_order': False, 'shape': (2, 3), }", "expected"},
        {"{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2, 3), }", "True or False"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2 3), }", "expected ','"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3], }", "expected '('"},
        {"['descr', '<f4']", "expected '{'"},
        {"{'descr': '<f4'", "expected ',' or '}'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'descr", "unterminated"},
        {"", "implausible header length 0"},
    };
    char path[512];
    KT_CHECK(scratch_path(path, sizeof path, "header.npy"), "no scratch folder");
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        unsigned char file[512] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
        size_t hlen = strlen(cases[c].header);
        file[8] = (unsigned char)hlen;
        file[9] = 0;
        memcpy(file + 10, cases[c].header, hlen);
        size_t size = 10 + hlen;
        for (int i = 0; i < 6; i++) { /* the data of a 2x3 f32 array */
            float v = (float)i;
            memcpy(file + size, &v, 4);
            size += 4;
        }
        KT_CHECK(write_bytes(path, file, size), "cannot write %s", path);
        if (!cases[c].needle) {
            kf_tensor *t = NULL;
            char msg[256];
            KT_CHECK(kf_npy_read(path, &t, msg, sizeof msg) == KF_OK, "the valid base case: %s",
                     msg);
            KT_CHECK(t->shape.rank == 2 && t->data[5] == 5.0f, "base case values");
            kf_tensor_destroy(t);
            continue;
        }
        kf_status st;
        const char *msg = read_must_fail(path, &st);
        KT_CHECK(msg, "case %zu: %s", c, cases[c].header);
        KT_CHECK(strstr(msg, cases[c].needle), "case %zu: message '%s' lacks '%s'", c, msg,
                 cases[c].needle);
    }
    /* the prefix itself: magic, version, header length */
    static const struct {
        unsigned char bytes[12];
        size_t size;
        const char *needle;
    } prefixes[] = {
        {{'N', 'U', 'M', 'P', 'Y', 0, 1, 0, 0, 0}, 10, "not a .npy file"},
        {{0x93, 'N', 'U', 'M', 'P', 'Y', 9, 0, 0, 0}, 10, "version 9.0"},
        {{0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0xff, 0xff, 0xff, 0xff}, 12, "implausible"},
        {{0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0x76}, 9, "truncated"},
        {{0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0x76, 0}, 10, "truncated"},
        {{0x93, 'N', 'U'}, 3, "not a .npy file"},
        {{0}, 0, "not a .npy file"},
    };
    for (size_t c = 0; c < sizeof prefixes / sizeof prefixes[0]; c++) {
        KT_CHECK(write_bytes(path, prefixes[c].bytes, prefixes[c].size), "cannot write");
        kf_status st;
        const char *msg = read_must_fail(path, &st);
        KT_CHECK(msg && strstr(msg, prefixes[c].needle), "prefix %zu: '%s' lacks '%s'", c,
                 msg ? msg : "", prefixes[c].needle);
    }
    remove(path);
}

/* Every truncation of a real file, trailing garbage, and random corruption: no crash, and each
 * read either succeeds with a consistent tensor or fails with a message. */
KT_CPU_TEST(unit, npy_damaged_files_never_crash) {
    size_t size = 0;
    unsigned char *good = read_bytes(NPY_DATA "f32_4d.npy", &size);
    KT_CHECK(good && size == 176, "fixture missing");
    char path[512];
    KT_CHECK(scratch_path(path, sizeof path, "damaged.npy"), "no scratch folder");
    for (size_t cut = 0; cut < size; cut++) {
        KT_CHECK(write_bytes(path, good, cut), "cannot write");
        kf_status st;
        KT_CHECK(read_must_fail(path, &st), "truncated to %zu bytes", cut);
    }
    unsigned char *longer = malloc(size + 3);
    memcpy(longer, good, size);
    memcpy(longer + size, "abc", 3);
    KT_CHECK(write_bytes(path, longer, size + 3), "cannot write");
    free(longer);
    kf_status st;
    const char *msg = read_must_fail(path, &st);
    KT_CHECK(msg && strstr(msg, "trailing bytes"), "trailing bytes: %s", msg ? msg : "");

    unsigned char *bad = malloc(size);
    int ok_reads = 0;
    for (int round = 0; round < 600; round++) {
        memcpy(bad, good, size);
        int flips = 1 + (int)(kt_rand_u64() % 4);
        for (int f = 0; f < flips; f++) {
            /* mostly the prefix and header: that is where parsing happens */
            size_t at = kt_rand_u64() % (kt_rand_u64() % 4 ? 128 : size);
            bad[at] = (unsigned char)kt_rand_u64();
        }
        KT_CHECK(write_bytes(path, bad, size), "cannot write");
        kf_tensor *t = NULL;
        char m[256] = "";
        kf_status s = kf_npy_read(path, &t, m, sizeof m);
        if (s == KF_OK) {
            ok_reads++;
            KT_CHECK(t && kf_tensor_size(t) * 4 + 128 == size, "round %d: inconsistent size",
                     round);
            kf_tensor_destroy(t);
        } else {
            KT_CHECK(!t && m[0], "round %d: error %s without a message", round, kf_status_str(s));
        }
    }
    free(bad);
    free(good);
    remove(path);
    KT_CHECK(ok_reads < 600, "corruption was never detected");
}

KT_CPU_TEST(unit, npy_write_errors) {
    kf_shape shape = kf_shape_1d(3);
    kf_tensor *t = NULL;
    KT_CHECK_OK(kf_tensor_create(&shape, &t));
    t->data[0] = 1.0f;
    t->data[1] = 2.5f;
    t->data[2] = 3.0f;
    KT_CHECK(kf_npy_write("/nonexistent/kfuse/out.npy", t, KF_DTYPE_F32) == KF_ERROR_IO,
             "unwritable path");
    KT_CHECK(kf_npy_write(NULL, t, KF_DTYPE_F32) == KF_ERROR_INVALID_ARGUMENT, "NULL path");
    KT_CHECK(kf_npy_write("x.npy", NULL, KF_DTYPE_F32) == KF_ERROR_INVALID_ARGUMENT, "NULL t");
    char path[512];
    KT_CHECK(scratch_path(path, sizeof path, "i32.npy"), "no scratch folder");
    /* 2.5 is no int32: refused, and no file is left behind */
    KT_CHECK(kf_npy_write(path, t, KF_DTYPE_I32) == KF_ERROR_INVALID_ARGUMENT, "2.5 as i32");
    KT_CHECK(access(path, F_OK) != 0, "a refused write left a file");
    kf_tensor_destroy(t);

    char msg[64];
    kf_tensor *out = (kf_tensor *)1;
    KT_CHECK(kf_npy_read(NULL, &out, msg, sizeof msg) == KF_ERROR_INVALID_ARGUMENT && !out,
             "NULL path");
    KT_CHECK(kf_npy_read(NPY_DATA "f32_2x3.npy", NULL, msg, sizeof msg) ==
                 KF_ERROR_INVALID_ARGUMENT,
             "NULL out");
    /* a message buffer too small, or none, is fine */
    KT_CHECK(kf_npy_read(NPY_DATA "f64_2.npy", &out, msg, 4) == KF_ERROR_IO && strlen(msg) == 3,
             "short message buffer");
    KT_CHECK(kf_npy_read(NPY_DATA "f64_2.npy", &out, NULL, 0) == KF_ERROR_IO, "no buffer");
}

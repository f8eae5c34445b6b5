/* The matmul autotuner: time the register-blocked kernel's tile configurations on the device in
 * use, keep the fastest per shape class in the context and in a cache file on disk. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ops/matmul_blocked.h"
#include "runtime/runtime.h"

#define TUNE_MAX_ENTRIES 64

typedef struct tune_entry {
    uint32_t class_mn, class_k;
    kf__mm_config cfg;
    double ms;
} tune_entry;

struct kf__matmul_tuning {
    bool loaded;
    char key[720]; /* the adapter: vendor|device|driver|backend */
    tune_entry entries[TUNE_MAX_ENTRIES];
    uint32_t count;
    kf__mm_config forced; /* $KF_MM_CONFIG, parsed */
};

/* The configurations the tuner tries (each valid for kf__matmul_blocked). */
static const kf__mm_config candidates[] = {
    {128, 128, 8, 8, 8, 1, 0, 0},  {128, 128, 8, 8, 8, 2, 0, 0},  {128, 128, 16, 8, 8, 1, 0, 0},
    {128, 128, 16, 8, 8, 2, 0, 0}, {128, 64, 16, 8, 4, 2, 0, 0},  {64, 128, 16, 4, 8, 2, 0, 0},
    {128, 64, 8, 8, 8, 2, 0, 0},   {64, 128, 8, 8, 8, 2, 0, 0},   {64, 64, 16, 4, 4, 2, 0, 0},
    {64, 64, 8, 8, 4, 2, 0, 0},    {32, 32, 16, 4, 4, 1, 0, 0},   {32, 32, 16, 4, 4, 2, 0, 0},
    {64, 64, 16, 8, 8, 2, 0, 0},   {128, 256, 8, 8, 16, 1, 0, 0}, {256, 128, 8, 16, 8, 1, 0, 0},
};

static void tuning_free(void *t) {
    free(t);
}

/* The key of the context's slot for the table (kf__context_extension). */
static const char tuning_slot = 0;

static uint32_t ceil_log2(uint64_t v) {
    uint32_t r = 0;
    while ((1ull << r) < v && r < 63) {
        r++;
    }
    return r;
}

/* The shape class: ceil(log2(m * n)) and ceil(log2(k)), the latter plus 256 when K is not a
 * multiple of 4 (a's rows then load as scalars) and plus 512 when N is not (b's rows): those
 * shapes want other tiles than their aligned neighbours (on an H200 the best 4096^3 tile runs a
 * 4095 x 4097 x 4093 product 30% slower than the best ragged one). */
static void shape_class(uint32_t m, uint32_t k, uint32_t n, uint32_t *mn, uint32_t *kc) {
    *mn = ceil_log2((uint64_t)m * n);
    *kc = ceil_log2(k) | (k % 4 ? 256u : 0u) | (n % 4 ? 512u : 0u);
}

/* The cache file: $KF_CACHE_DIR, else $XDG_CACHE_HOME/kfuse, else $HOME/.cache/kfuse. */
static bool cache_path(char *dir, size_t dir_size, char *file, size_t file_size) {
    const char *env = getenv("KF_CACHE_DIR");
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    int n;
    if (env && *env) {
        n = snprintf(dir, dir_size, "%s", env);
    } else if (xdg && *xdg) {
        n = snprintf(dir, dir_size, "%s/kfuse", xdg);
    } else if (home && *home) {
        n = snprintf(dir, dir_size, "%s/.cache/kfuse", home);
    } else {
        return false;
    }
    if (n < 0 || (size_t)n >= dir_size) {
        return false;
    }
    n = snprintf(file, file_size, "%s/matmul-tiles.txt", dir);
    return n > 0 && (size_t)n < file_size;
}

static void put_entry(struct kf__matmul_tuning *t, const tune_entry *e) {
    for (uint32_t i = 0; i < t->count; i++) {
        if (t->entries[i].class_mn == e->class_mn && t->entries[i].class_k == e->class_k) {
            t->entries[i] = *e; /* the latest measurement wins */
            return;
        }
    }
    if (t->count < TUNE_MAX_ENTRIES) {
        t->entries[t->count++] = *e;
    }
}

/* Loads this adapter's lines of the cache file (once):
 * "mm4|key<TAB>mn k<TAB>bm bn bk tm tn stages raster edge<TAB>ms". The "mm4|" prefix is the
 * generation of the kernel, of the shape classes and of the line: lines with another prefix are
 * ignored (mm3 had no raster and edge). */
static struct kf__matmul_tuning *tuning_of(kf_context *ctx) {
    struct kf__matmul_tuning *t = kf__context_extension(ctx, &tuning_slot);
    if (!t) {
        t = calloc(1, sizeof *t);
        if (!t || kf__context_extension_set(ctx, &tuning_slot, t, tuning_free) != KF_OK) {
            free(t);
            return NULL;
        }
    }
    if (t->loaded) {
        return t;
    }
    t->loaded = true;
    kf_adapter_info info = {0};
    kf_context_adapter_info(ctx, &info);
    snprintf(t->key, sizeof t->key, "mm4|%s|%s|%s|%s", info.vendor, info.device, info.description,
             info.backend);
    for (char *c = t->key; *c; c++) {
        if (*c == '\t' || *c == '\n') {
            *c = ' ';
        }
    }
    char dir[1024], file[1100];
    if (!cache_path(dir, sizeof dir, file, sizeof file)) {
        return t;
    }
    FILE *f = fopen(file, "r");
    if (!f) {
        return t;
    }
    char line[1200];
    while (fgets(line, sizeof line, f)) {
        char *tab = strchr(line, '\t');
        if (!tab) {
            continue;
        }
        *tab = '\0';
        if (strcmp(line, t->key) != 0) {
            continue;
        }
        tune_entry e = {0};
        if (sscanf(tab + 1, "%u %u\t%u %u %u %u %u %u %u %u\t%lf", &e.class_mn, &e.class_k,
                   &e.cfg.bm, &e.cfg.bn, &e.cfg.bk, &e.cfg.tm, &e.cfg.tn, &e.cfg.stages,
                   &e.cfg.raster, &e.cfg.edge, &e.ms) == 11 &&
            kf__matmul_blocked_valid(&e.cfg)) {
            put_entry(t, &e);
        }
    }
    fclose(f);
    return t;
}

const kf__mm_config *kf__matmul_config_for(kf_context *ctx, uint32_t m, uint32_t k, uint32_t n) {
    struct kf__matmul_tuning *t = ctx ? tuning_of(ctx) : NULL;
    if (!t) {
        return NULL;
    }
    /* $KF_MM_CONFIG forces one tile for every product, for measuring variants side by side;
     * one that does not parse is ignored. */
    const char *env = getenv("KF_MM_CONFIG");
    if (env && *env && kf__mm_config_parse(env, &t->forced)) {
        return &t->forced;
    }
    uint32_t mn, kc;
    shape_class(m, k, n, &mn, &kc);
    for (uint32_t i = 0; i < t->count; i++) {
        if (t->entries[i].class_mn == mn && t->entries[i].class_k == kc) {
            return &t->entries[i].cfg;
        }
    }
    return NULL;
}

static bool save_entry(const struct kf__matmul_tuning *t, const tune_entry *e) {
    char dir[1024], file[1100];
    if (!cache_path(dir, sizeof dir, file, sizeof file)) {
        return false;
    }
    /* mkdir -p, one level at a time */
    for (char *c = dir + 1; *c; c++) {
        if (*c == '/') {
            *c = '\0';
            if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
                return false;
            }
            *c = '/';
        }
    }
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        return false;
    }
    FILE *f = fopen(file, "a");
    if (!f) {
        return false;
    }
    int n = fprintf(f, "%s\t%u %u\t%u %u %u %u %u %u %u %u\t%.6f\n", t->key, e->class_mn,
                    e->class_k, e->cfg.bm, e->cfg.bn, e->cfg.bk, e->cfg.tm, e->cfg.tn,
                    e->cfg.stages ? e->cfg.stages : 1, e->cfg.raster, e->cfg.edge, e->ms);
    return fclose(f) == 0 && n > 0;
}

/* Median time of one configuration on the bound buffers; a negative value when it cannot run. */
static double time_config(kf_context *ctx, uint32_t m, uint32_t k, uint32_t n,
                          const kf__mm_config *cfg, kf_buffer *const *bufs) {
    kf_kernel *kernel = kf__matmul_blocked(m, k, n, cfg);
    if (!kernel) {
        return -1.0;
    }
    kf_kernel_launch launch = {.buffers = bufs, .buffer_count = 3};
    kf_dispatch d;
    kf_timing timing;
    double ms = -1.0;
    if (kf_kernel_dispatch(ctx, kernel, &launch, &d) == KF_OK &&
        kf_context_time(ctx, &d, 1, 5, &timing) == KF_OK) {
        ms = timing.median_ms;
    }
    kf_kernel_destroy(kernel);
    return ms;
}

kf_status kf_matmul_tune(kf_context *ctx, uint32_t m, uint32_t k, uint32_t n,
                         kf_matmul_tuning *out) {
    if (!ctx || !out || !m || !k || !n) {
        kf__context_set_error(ctx, KF_ERROR_INVALID_ARGUMENT,
                              "matmul tune: %s (m %u, k %u, n %u: each at least 1)",
                              !out ? "out is NULL" : "a dimension is 0", m, k, n);
        return KF_ERROR_INVALID_ARGUMENT;
    }
    memset(out, 0, sizeof *out);
    if ((uint64_t)m * n >= (1ull << 32) || (uint64_t)m * k >= (1ull << 32) ||
        (uint64_t)k * n >= (1ull << 32)) {
        kf__context_set_error(ctx, KF_ERROR_LIMIT, "matmul tune: %ux%ux%u is too large", m, k, n);
        return KF_ERROR_LIMIT;
    }
    struct kf__matmul_tuning *t = tuning_of(ctx);
    if (!t) {
        return KF_ERROR_OUT_OF_MEMORY;
    }
    kf_buffer *bufs[3] = {0};
    uint64_t sizes[3] = {4ull * m * k, 4ull * k * n, 4ull * m * n};
    kf_status st = KF_OK;
    for (int i = 0; i < 3 && st == KF_OK; i++) {
        st = kf_buffer_create(ctx, sizes[i], &bufs[i]);
        if (st == KF_OK && i < 2) {
            st = kf_buffer_fill_u32(bufs[i], 0x3f000000u); /* 0.5: timing needs no randomness */
        }
    }
    tune_entry best = {0};
    best.ms = -1.0;
    const kf__mm_config *builtin = kf__mm_default_config(m, k, n);
    for (size_t c = 0; st == KF_OK && c < sizeof candidates / sizeof candidates[0]; c++) {
        /* Tiles are what is tuned; the tile order and the edge path are the built-in's. */
        kf__mm_config cand = candidates[c];
        cand.raster = builtin->raster;
        cand.edge = builtin->edge;
        double ms = time_config(ctx, m, k, n, &cand, bufs);
        if (ms < 0.0) {
            continue;
        }
        out->candidates++;
        if (!memcmp(&cand, builtin, sizeof *builtin)) {
            out->default_ms = ms;
        }
        if (best.ms < 0.0 || ms < best.ms) {
            best.ms = ms;
            best.cfg = cand;
        }
    }
    for (int i = 0; i < 3; i++) {
        kf_buffer_destroy(bufs[i]);
    }
    if (st != KF_OK) {
        return st;
    }
    if (best.ms < 0.0) {
        kf__context_set_error(ctx, KF_ERROR_UNSUPPORTED,
                              "matmul tune: no tile configuration ran on this device");
        return KF_ERROR_UNSUPPORTED;
    }
    shape_class(m, k, n, &best.class_mn, &best.class_k);
    put_entry(t, &best);
    out->bm = best.cfg.bm;
    out->bn = best.cfg.bn;
    out->bk = best.cfg.bk;
    out->tm = best.cfg.tm;
    out->tn = best.cfg.tn;
    out->stages = best.cfg.stages ? best.cfg.stages : 1;
    out->raster = best.cfg.raster;
    out->edge = best.cfg.edge;
    out->best_ms = best.ms;
    out->saved = save_entry(t, &best);
    return KF_OK;
}

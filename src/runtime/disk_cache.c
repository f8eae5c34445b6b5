/* A persistent pipeline cache across processes, through Dawn's cache interface
 * (DawnCacheDeviceDescriptor: Dawn hands kfuse opaque key/value blobs, its compiled shaders and
 * pipeline caches, to store, and asks for them again when it would compile the same thing).
 *
 * Where: kf_context_desc.pipeline_cache_dir, else $KF_PIPELINE_CACHE, else
 * $XDG_CACHE_HOME/kfuse/pipelines, else $HOME/.cache/kfuse/pipelines. "off" (or "0", or
 * disable_pipeline_cache) turns it off. Entries live in a folder per partition: the
 * implementation (library path, size, modification time), the adapter (vendor, device,
 * architecture, backend, ids) and the driver (the adapter's description, which holds its
 * version), so a new driver or Dawn never reads an old one's blobs.
 *
 * One file per entry: a header (magic, version, key and value sizes, an FNV-1a checksum of key
 * and value), the key (compared whole, so a hash collision is a miss) and the value. A file that
 * is short, long, of another version or whose checksum fails is a miss and is removed, so a
 * crash mid-write or a damaged disk never reaches Dawn. Writes go to a temporary file renamed
 * into place, so readers (other processes included) see whole entries or none. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/runtime.h"

#define KF__CACHE_MAGIC 0x4350464bu /* "KFPC" */
#define KF__CACHE_VERSION 1u
#define KF__CACHE_MAX_VALUE (256ull << 20)

typedef struct entry_header {
    uint32_t magic;
    uint32_t version;
    uint64_t key_size;
    uint64_t value_size;
    uint64_t checksum;
} entry_header;

struct kf__disk_cache {
    wg_dawn_cache_device_desc desc;
    char dir[1024];       /* the partition's folder */
    char partition[2048]; /* what it is keyed by; also Dawn's isolation key */
    atomic_uint_fast64_t loads, stores, rejected;
    atomic_uint_fast64_t sequence; /* names of temporary files */
};

static uint64_t fnv(uint64_t h, const void *data, size_t size) {
    const unsigned char *p = data;
    for (size_t i = 0; i < size; i++) {
        h = (h ^ p[i]) * 1099511628211ull;
    }
    return h;
}

static void entry_path(const struct kf__disk_cache *c, const void *key, size_t key_size, char *out,
                       size_t size) {
    uint64_t h = fnv(14695981039346656037ull, key, key_size);
    snprintf(out, size, "%s/%016llx.bin", c->dir, (unsigned long long)h);
}

static bool make_dirs(const char *path) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, 0700) != 0 && errno != EEXIST) {
                return false;
            }
            *p = '/';
        }
    }
    return mkdir(buf, 0700) == 0 || errno == EEXIST;
}

/* Reads and checks the entry for key; value NULL asks only for its size. Returns the value's
 * size, or 0 for a miss (a damaged entry is removed). */
static size_t read_entry(struct kf__disk_cache *c, const void *key, size_t key_size, void *value,
                         size_t value_size) {
    char path[1200];
    entry_path(c, key, key_size, path, sizeof path);
    FILE *f = fopen(path, "rb");
    if (!f) {
        return 0;
    }
    entry_header h;
    size_t result = 0;
    bool damaged = true;
    struct stat st;
    unsigned char *data = NULL;
    if (fstat(fileno(f), &st) != 0 || fread(&h, sizeof h, 1, f) != 1) {
        goto done;
    }
    if (h.magic != KF__CACHE_MAGIC || h.version != KF__CACHE_VERSION ||
        h.value_size > KF__CACHE_MAX_VALUE || h.key_size > KF__CACHE_MAX_VALUE ||
        (uint64_t)st.st_size != sizeof h + h.key_size + h.value_size) {
        goto done; /* truncated, grown or of another version */
    }
    if (h.key_size != key_size) {
        damaged = false; /* another key with the same hash: a miss, the entry is fine */
        goto done;
    }
    data = malloc((size_t)(h.key_size + h.value_size) + 1);
    if (!data || fread(data, 1, (size_t)(h.key_size + h.value_size), f) !=
                     (size_t)(h.key_size + h.value_size)) {
        damaged = data != NULL;
        goto done;
    }
    if (fnv(14695981039346656037ull, data, (size_t)(h.key_size + h.value_size)) != h.checksum) {
        goto done;
    }
    damaged = false;
    if (memcmp(data, key, key_size) != 0) {
        goto done;
    }
    if (value && value_size == h.value_size) {
        memcpy(value, data + key_size, value_size);
    } else if (value) {
        goto done; /* Dawn asks for the size it was told: anything else is a miss */
    }
    result = (size_t)h.value_size;
done:
    free(data);
    fclose(f);
    if (damaged) {
        atomic_fetch_add(&c->rejected, 1);
        remove(path);
    }
    return result;
}

static size_t on_load(const void *key, size_t key_size, void *value, size_t value_size,
                      void *userdata) {
    struct kf__disk_cache *c = userdata;
    size_t n = read_entry(c, key, key_size, value, value_size);
    if (n && value) {
        atomic_fetch_add(&c->loads, 1);
    }
    return n;
}

static void on_store(const void *key, size_t key_size, const void *value, size_t value_size,
                     void *userdata) {
    struct kf__disk_cache *c = userdata;
    if (value_size > KF__CACHE_MAX_VALUE || !make_dirs(c->dir)) {
        return;
    }
    char path[1200], tmp[1300];
    entry_path(c, key, key_size, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.%ld.%llu.tmp", path, (long)getpid(),
             (unsigned long long)atomic_fetch_add(&c->sequence, 1));
    entry_header h = {KF__CACHE_MAGIC, KF__CACHE_VERSION, key_size, value_size, 0};
    h.checksum = fnv(fnv(14695981039346656037ull, key, key_size), value, value_size);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        return;
    }
    bool ok = fwrite(&h, sizeof h, 1, f) == 1 && fwrite(key, 1, key_size, f) == key_size &&
              fwrite(value, 1, value_size, f) == value_size;
    ok = fclose(f) == 0 && ok;
    if (ok && rename(tmp, path) == 0) {
        atomic_fetch_add(&c->stores, 1);
    } else {
        remove(tmp);
    }
}

/* The folder from the descriptor, the environment or the XDG default; false when off. */
static bool cache_root(const kf_context_desc *desc, char *out, size_t size) {
    if (desc->disable_pipeline_cache) {
        return false;
    }
    const char *dir = desc->pipeline_cache_dir;
    if (!dir) {
        dir = getenv("KF_PIPELINE_CACHE");
    }
    if (dir && (!dir[0] || !strcmp(dir, "off") || !strcmp(dir, "0"))) {
        return false;
    }
    if (dir) {
        snprintf(out, size, "%s", dir);
        return true;
    }
    const char *xdg = getenv("XDG_CACHE_HOME");
    if (xdg && xdg[0] == '/') {
        snprintf(out, size, "%s/kfuse/pipelines", xdg);
        return true;
    }
    const char *home = getenv("HOME");
    if (home && home[0] == '/') {
        snprintf(out, size, "%s/.cache/kfuse/pipelines", home);
        return true;
    }
    return false;
}

wg_chain *kf__disk_cache_chain(kf_context *ctx, const kf_context_desc *desc, wg_chain *next) {
    char root[800];
    if (!ctx->impl->stype_cache_device || !cache_root(desc, root, sizeof root)) {
        return next;
    }
    struct kf__disk_cache *c = calloc(1, sizeof *c);
    if (!c) {
        return next; /* no cache is no error */
    }
    wg_adapter_info ai;
    memset(&ai, 0, sizeof ai);
    char vendor[128] = "", arch[128] = "", device[256] = "", description[256] = "";
    if (ctx->api.adapter_get_info(ctx->adapter, &ai) == WG_STATUS_SUCCESS) {
        kf__wg_string_copy(vendor, sizeof vendor, ai.vendor);
        kf__wg_string_copy(arch, sizeof arch, ai.architecture);
        kf__wg_string_copy(device, sizeof device, ai.device);
        kf__wg_string_copy(description, sizeof description, ai.description);
        ctx->api.adapter_info_free_members(ai);
    }
    struct stat lib;
    memset(&lib, 0, sizeof lib);
    stat(ctx->library_path, &lib);
    snprintf(c->partition, sizeof c->partition,
             "kfuse pipeline cache %u\nimplementation %s %lld %lld\nadapter %s|%s|%s|backend "
             "%u|%04x:%04x\ndriver %s\n",
             KF__CACHE_VERSION, ctx->library_path, (long long)lib.st_size, (long long)lib.st_mtime,
             vendor, arch, device, ai.backend_type, ai.vendor_id, ai.device_id, description);
    uint64_t h = fnv(14695981039346656037ull, c->partition, strlen(c->partition));
    snprintf(c->dir, sizeof c->dir, "%s/%016llx", root, (unsigned long long)h);
    c->desc.chain = (wg_chain){next, ctx->impl->stype_cache_device};
    c->desc.isolation_key = (wg_string){c->partition, WG_STRLEN};
    c->desc.load = on_load;
    c->desc.store = on_store;
    c->desc.userdata = c;
    ctx->disk_cache = c;
    return &c->desc.chain;
}

void kf__disk_cache_destroy(kf_context *ctx) {
    free(ctx->disk_cache);
    ctx->disk_cache = NULL;
}

void kf__disk_cache_stats(const kf_context *ctx, kf_context_stats *out) {
    struct kf__disk_cache *c = ctx->disk_cache;
    out->disk_cache_loads = c ? (uint64_t)atomic_load(&c->loads) : 0;
    out->disk_cache_stores = c ? (uint64_t)atomic_load(&c->stores) : 0;
    out->disk_cache_rejected = c ? (uint64_t)atomic_load(&c->rejected) : 0;
}

const char *kf__disk_cache_dir(const kf_context *ctx) {
    return ctx->disk_cache ? ctx->disk_cache->dir : "";
}

/* .npy files: numpy's array format (numpy/lib/format.py), read and written without numpy.
 *
 * A file is the magic "\x93NUMPY", a major and minor version byte, the header length (2 bytes
 * little-endian for version 1, 4 bytes for versions 2 and 3), then the header: a Python dict
 * literal such as {'descr': '<f4', 'fortran_order': False, 'shape': (64, 128), } padded with
 * spaces and a final '\n', then the raw elements.
 *
 * Files come from anywhere, so every field is checked before it is trusted: the header length
 * before allocating, the data size against the file size before allocating the tensor. A bad file
 * gets a message naming the file and what is wrong with it, never a crash. */
#include "core/half.h"

#include "kfuse.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

/* numpy writes headers of about 128 bytes; a longer one than this is damage, not data. */
#define NPY_MAX_HEADER (1u << 16)
/* Elements converted per chunk when the file's dtype is not f32. */
#define NPY_CHUNK 16384u

static const char npy_magic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

typedef enum npy_type { NPY_F32 = 1, NPY_F16, NPY_I32 } npy_type;

typedef struct npy_reader {
    const char *path;
    char *msg;
    size_t msg_size;
} npy_reader;

static kf_status npy_fail(const npy_reader *r, kf_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static kf_status npy_fail(const npy_reader *r, kf_status st, const char *fmt, ...) {
    if (r->msg && r->msg_size) {
        int n = snprintf(r->msg, r->msg_size, "%s: ", r->path);
        if (n >= 0 && (size_t)n < r->msg_size) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(r->msg + n, r->msg_size - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return st;
}

static bool host_is_little_endian(void) {
    uint16_t one = 1;
    unsigned char first;
    memcpy(&first, &one, 1);
    return first == 1;
}

static void swap_bytes(unsigned char *p, size_t count, size_t width) {
    for (size_t i = 0; i < count; i++, p += width) {
        for (size_t a = 0, b = width - 1; a < b; a++, b--) {
            unsigned char t = p[a];
            p[a] = p[b];
            p[b] = t;
        }
    }
}

/* ---- the header dict ------------------------------------------------------------------------ */

typedef struct header_parser {
    const char *s;
    size_t len;
    size_t pos;
    char problem[160];
} header_parser;

static bool header_fail(header_parser *h, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static bool header_fail(header_parser *h, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->problem, sizeof h->problem, fmt, ap);
    va_end(ap);
    return false;
}

static char hpeek(const header_parser *h) {
    return h->pos < h->len ? h->s[h->pos] : '\0';
}

static void hskip_space(header_parser *h) {
    while (h->pos < h->len && (h->s[h->pos] == ' ' || h->s[h->pos] == '\t' ||
                               h->s[h->pos] == '\n' || h->s[h->pos] == '\r')) {
        h->pos++;
    }
}

static bool hexpect(header_parser *h, char c, const char *where) {
    hskip_space(h);
    if (hpeek(h) != c) {
        return header_fail(h, "expected '%c' %s at byte %zu of the header", c, where, h->pos);
    }
    h->pos++;
    return true;
}

/* A Python string literal without escapes (numpy never writes any in these keys and values). */
static bool hstring(header_parser *h, char *out, size_t size) {
    hskip_space(h);
    char quote = hpeek(h);
    if (quote != '\'' && quote != '"') {
        return header_fail(h, "expected a quoted string at byte %zu of the header", h->pos);
    }
    h->pos++;
    size_t n = 0;
    while (h->pos < h->len && h->s[h->pos] != quote) {
        char c = h->s[h->pos++];
        if (c == '\\' || c == '\n' || c == '\0') {
            return header_fail(h, "unsupported character in a header string");
        }
        if (n + 1 >= size) {
            return header_fail(h, "header string longer than %zu characters", size - 1);
        }
        out[n++] = c;
    }
    if (h->pos >= h->len) {
        return header_fail(h, "unterminated string in the header");
    }
    h->pos++;
    out[n] = '\0';
    return true;
}

static bool hword(header_parser *h, const char *word) {
    size_t n = strlen(word);
    if (h->len - h->pos >= n && !memcmp(h->s + h->pos, word, n)) {
        h->pos += n;
        return true;
    }
    return false;
}

static bool hbool(header_parser *h, bool *out) {
    hskip_space(h);
    if (hword(h, "True")) {
        *out = true;
    } else if (hword(h, "False")) {
        *out = false;
    } else {
        return header_fail(h, "'fortran_order' must be True or False");
    }
    return true;
}

static bool hshape(header_parser *h, kf_shape *shape) {
    if (!hexpect(h, '(', "to open 'shape'")) {
        return false;
    }
    memset(shape, 0, sizeof *shape);
    for (;;) {
        hskip_space(h);
        if (hpeek(h) == ')') {
            h->pos++;
            return true;
        }
        char c = hpeek(h);
        if (c == '-') {
            return header_fail(h, "negative dimension in 'shape'");
        }
        if (c < '0' || c > '9') {
            return header_fail(h, "expected a dimension or ')' in 'shape' at byte %zu", h->pos);
        }
        uint64_t v = 0;
        while (hpeek(h) >= '0' && hpeek(h) <= '9') {
            v = v * 10 + (uint64_t)(hpeek(h) - '0');
            if (v > UINT32_MAX) {
                return header_fail(h, "a dimension in 'shape' is above %u", UINT32_MAX);
            }
            h->pos++;
        }
        if (hpeek(h) == 'L') { /* Python 2's long literals, in files numpy wrote long ago */
            h->pos++;
        }
        if (shape->rank == KF_MAX_DIMS) {
            return header_fail(h, "'shape' has more than %d dimensions", KF_MAX_DIMS);
        }
        shape->dims[shape->rank++] = (uint32_t)v;
        hskip_space(h);
        if (hpeek(h) == ',') {
            h->pos++;
        } else if (hpeek(h) != ')') {
            return header_fail(h, "expected ',' or ')' in 'shape' at byte %zu", h->pos);
        }
    }
}

typedef struct npy_header {
    char descr[32];
    bool fortran_order;
    kf_shape shape;
} npy_header;

static bool parse_header(header_parser *h, npy_header *out) {
    bool seen_descr = false, seen_order = false, seen_shape = false;
    if (!hexpect(h, '{', "at the start")) {
        return false;
    }
    for (;;) {
        hskip_space(h);
        if (hpeek(h) == '}') {
            h->pos++;
            break;
        }
        char key[32];
        if (!hstring(h, key, sizeof key) || !hexpect(h, ':', "after a key")) {
            return false;
        }
        hskip_space(h);
        bool *seen;
        if (!strcmp(key, "descr")) {
            seen = &seen_descr;
            if (hpeek(h) == '[') {
                return header_fail(h, "structured arrays are not supported");
            }
            if (!hstring(h, out->descr, sizeof out->descr)) {
                return false;
            }
        } else if (!strcmp(key, "fortran_order")) {
            seen = &seen_order;
            if (!hbool(h, &out->fortran_order)) {
                return false;
            }
        } else if (!strcmp(key, "shape")) {
            seen = &seen_shape;
            if (!hshape(h, &out->shape)) {
                return false;
            }
        } else {
            return header_fail(h, "unexpected key '%s' in the header", key);
        }
        if (*seen) {
            return header_fail(h, "key '%s' appears twice in the header", key);
        }
        *seen = true;
        hskip_space(h);
        if (hpeek(h) == ',') {
            h->pos++;
        } else if (hpeek(h) != '}') {
            return header_fail(h, "expected ',' or '}' after '%s' at byte %zu", key, h->pos);
        }
    }
    hskip_space(h);
    if (h->pos != h->len) {
        return header_fail(h, "unexpected bytes after the header's '}'");
    }
    if (!seen_descr || !seen_order || !seen_shape) {
        return header_fail(h, "the header lacks '%s'",
                           !seen_descr   ? "descr"
                           : !seen_order ? "fortran_order"
                                         : "shape");
    }
    return true;
}

/* ---- reading -------------------------------------------------------------------------------- */

static kf_status read_elements(const npy_reader *r, FILE *f, npy_type type, kf_tensor *t,
                               uint64_t count) {
    if (type == NPY_F32) {
        if (fread(t->data, 4, (size_t)count, f) != count) {
            return npy_fail(r, KF_ERROR_IO, "truncated: expected %llu elements of data",
                            (unsigned long long)count);
        }
        if (!host_is_little_endian()) {
            swap_bytes((unsigned char *)t->data, (size_t)count, 4);
        }
        return KF_OK;
    }
    size_t width = type == NPY_F16 ? 2 : 4;
    unsigned char *chunk = malloc(NPY_CHUNK * width);
    if (!chunk) {
        return npy_fail(r, KF_ERROR_OUT_OF_MEMORY, "out of memory");
    }
    kf_status st = KF_OK;
    for (uint64_t done = 0; done < count && st == KF_OK;) {
        size_t n = count - done < NPY_CHUNK ? (size_t)(count - done) : NPY_CHUNK;
        if (fread(chunk, width, n, f) != n) {
            st = npy_fail(r, KF_ERROR_IO, "truncated: expected %llu elements of data",
                          (unsigned long long)count);
            break;
        }
        for (size_t i = 0; i < n; i++) {
            const unsigned char *b = chunk + i * width;
            if (type == NPY_F16) {
                t->data[done + i] = kf__half_to_float((uint16_t)(b[0] | b[1] << 8));
            } else {
                int32_t v = (int32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                                      (uint32_t)b[3] << 24);
                /* A CPU tensor holds integers as floats: refuse what would not come back. */
                if (v > (1 << 24) || v < -(1 << 24)) {
                    st = npy_fail(r, KF_ERROR_IO,
                                  "element %llu is %d: int32 data must lie within +-2^24 to "
                                  "be held exactly as f32",
                                  (unsigned long long)(done + i), v);
                    break;
                }
                t->data[done + i] = (float)v;
            }
        }
        done += n;
    }
    free(chunk);
    return st;
}

static kf_status read_file(const npy_reader *r, FILE *f, kf_tensor **out) {
    unsigned char prefix[12];
    size_t got = fread(prefix, 1, 8, f);
    if (got < 8 && ferror(f)) {
        return npy_fail(r, KF_ERROR_IO, "cannot read: %s", strerror(errno));
    }
    if (got < 8 || memcmp(prefix, npy_magic, sizeof npy_magic) != 0) {
        return npy_fail(r, KF_ERROR_IO, "not a .npy file (it does not start with \\x93NUMPY)");
    }
    unsigned major = prefix[6], minor = prefix[7];
    size_t len_bytes = major == 1 ? 2 : (major == 2 || major == 3) ? 4 : 0;
    if (!len_bytes) {
        return npy_fail(r, KF_ERROR_IO, "unsupported .npy version %u.%u (known: 1.0, 2.0, 3.0)",
                        major, minor);
    }
    if (fread(prefix + 8, 1, len_bytes, f) != len_bytes) {
        return npy_fail(r, KF_ERROR_IO, "truncated before the header length");
    }
    uint32_t header_len = (uint32_t)prefix[8] | (uint32_t)prefix[9] << 8;
    if (len_bytes == 4) {
        header_len |= (uint32_t)prefix[10] << 16 | (uint32_t)prefix[11] << 24;
    }
    if (header_len == 0 || header_len > NPY_MAX_HEADER) {
        return npy_fail(r, KF_ERROR_IO, "implausible header length %u", header_len);
    }
    char *text = malloc(header_len);
    if (!text) {
        return npy_fail(r, KF_ERROR_OUT_OF_MEMORY, "out of memory");
    }
    if (fread(text, 1, header_len, f) != header_len) {
        free(text);
        return npy_fail(r, KF_ERROR_IO, "truncated inside the %u-byte header", header_len);
    }
    header_parser hp = {.s = text, .len = header_len};
    npy_header hdr = {0};
    bool parsed = parse_header(&hp, &hdr);
    free(text);
    if (!parsed) {
        return npy_fail(r, KF_ERROR_IO, "bad header: %s", hp.problem);
    }

    npy_type type;
    if (!strcmp(hdr.descr, "<f4")) {
        type = NPY_F32;
    } else if (!strcmp(hdr.descr, "<f2")) {
        type = NPY_F16;
    } else if (!strcmp(hdr.descr, "<i4")) {
        type = NPY_I32;
    } else if (hdr.descr[0] == '>') {
        return npy_fail(r, KF_ERROR_IO,
                        "big-endian data ('%s') is not supported; save a.astype('<%s')", hdr.descr,
                        hdr.descr + 1);
    } else {
        return npy_fail(r, KF_ERROR_IO,
                        "dtype '%s' is not supported: kfuse reads float32 ('<f4'), float16 "
                        "('<f2') and int32 ('<i4'); save a.astype(np.float32)",
                        hdr.descr);
    }
    if (hdr.fortran_order) {
        return npy_fail(r, KF_ERROR_IO,
                        "the array is in Fortran order; kfuse reads C order: save "
                        "np.ascontiguousarray(a)");
    }
    uint64_t count = 1;
    for (uint32_t i = 0; i < hdr.shape.rank; i++) {
        if (hdr.shape.dims[i] == 0) {
            return npy_fail(r, KF_ERROR_IO, "empty arrays (dimension %u is 0) are not supported",
                            i);
        }
        count *= hdr.shape.dims[i];
        if (count > UINT32_MAX) {
            return npy_fail(r, KF_ERROR_IO, "more than %u elements", UINT32_MAX);
        }
    }
    uint64_t width = type == NPY_F16 ? 2 : 4;
    uint64_t data_bytes = count * width;
    uint64_t data_start = 8 + len_bytes + header_len;

    /* The size check comes before the allocation: a 20-byte file claiming 4 GB of data must not
     * allocate 16 GB first. Pipes and other unsized files are checked while reading instead. */
    struct stat sb;
    bool sized = fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode);
    if (sized && (uint64_t)sb.st_size != data_start + data_bytes) {
        uint64_t have = (uint64_t)sb.st_size > data_start ? (uint64_t)sb.st_size - data_start : 0;
        return npy_fail(r, KF_ERROR_IO,
                        "%s: the header's shape needs %llu bytes of data, the file "
                        "has %llu",
                        have < data_bytes ? "truncated" : "trailing bytes",
                        (unsigned long long)data_bytes, (unsigned long long)have);
    }
    kf_tensor *t = NULL;
    kf_status st = kf_tensor_create(&hdr.shape, &t);
    if (st != KF_OK) {
        return npy_fail(r, st, "cannot create a tensor of %llu elements",
                        (unsigned long long)count);
    }
    st = read_elements(r, f, type, t, count);
    if (st == KF_OK && !sized && fgetc(f) != EOF) {
        st = npy_fail(r, KF_ERROR_IO, "trailing bytes after %llu bytes of data",
                      (unsigned long long)data_bytes);
    }
    if (st != KF_OK) {
        kf_tensor_destroy(t);
        return st;
    }
    *out = t;
    return KF_OK;
}

kf_status kf_npy_read(const char *path, kf_tensor **out, char *msg, size_t msg_size) {
    if (msg && msg_size) {
        msg[0] = '\0';
    }
    npy_reader r = {.path = path ? path : "(null)", .msg = msg, .msg_size = msg_size};
    if (!out) {
        return npy_fail(&r, KF_ERROR_INVALID_ARGUMENT, "kf_npy_read: out is NULL");
    }
    *out = NULL;
    if (!path) {
        return npy_fail(&r, KF_ERROR_INVALID_ARGUMENT, "kf_npy_read: path is NULL");
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        return npy_fail(&r, KF_ERROR_IO, "cannot open: %s", strerror(errno));
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
        fclose(f); /* Linux opens a directory for reading; reading it then fails with EISDIR */
        return npy_fail(&r, KF_ERROR_IO, "is a directory, not a .npy file");
    }
    kf_status st = read_file(&r, f, out);
    fclose(f);
    return st;
}

/* ---- writing -------------------------------------------------------------------------------- */

static bool write_elements(FILE *f, const float *data, uint64_t count, kf_dtype dtype) {
    if (dtype == KF_DTYPE_F32 && host_is_little_endian()) {
        return fwrite(data, 4, (size_t)count, f) == count;
    }
    size_t width = dtype == KF_DTYPE_F16 ? 2 : 4;
    unsigned char *chunk = malloc(NPY_CHUNK * width);
    if (!chunk) {
        errno = ENOMEM;
        return false;
    }
    bool ok = true;
    for (uint64_t done = 0; done < count && ok;) {
        size_t n = count - done < NPY_CHUNK ? (size_t)(count - done) : NPY_CHUNK;
        for (size_t i = 0; i < n; i++) {
            unsigned char *b = chunk + i * width;
            float v = data[done + i];
            uint32_t bits;
            if (dtype == KF_DTYPE_F16) {
                bits = kf__half_from_float(v);
            } else if (dtype == KF_DTYPE_I32) {
                bits = (uint32_t)(int32_t)v; /* range checked by the caller */
            } else {
                memcpy(&bits, &v, 4);
            }
            for (size_t k = 0; k < width; k++) {
                b[k] = (unsigned char)(bits >> (8 * k));
            }
        }
        ok = fwrite(chunk, width, n, f) == n;
        done += n;
    }
    free(chunk);
    return ok;
}

/* Creates a new file beside path (same folder) with a name no one else uses, as open(2) with
 * mode 0666 would (so the umask applies, as it would to path itself); -1 with errno set. A
 * directory at path is refused here, before anything is written (rename would refuse it later
 * with a less helpful EISDIR or ENOTEMPTY). */
static int open_temp_beside(const char *path, char **temp_out) {
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        errno = EISDIR;
        return -1;
    }
    const char *slash = strrchr(path, '/');
    size_t dir_len = slash ? (size_t)(slash - path) + 1 : 0;
    size_t size = dir_len + 48;
    char *temp = malloc(size);
    if (!temp) {
        errno = ENOMEM;
        return -1;
    }
    /* The tag only makes clashes unlikely (two threads hold different buffers at once);
     * open(O_EXCL) is what guarantees that no one else's file is taken. */
    for (unsigned attempt = 0; attempt < 100; attempt++) {
        unsigned long long tag = (unsigned long long)getpid() << 32 ^
                                 (unsigned long long)(uintptr_t)temp ^ attempt * 2654435761u;
        snprintf(temp, size, "%.*s.kfuse-%llx.npy.tmp", (int)dir_len, path, tag);
        int fd = open(temp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0) {
            *temp_out = temp;
            return fd;
        }
        if (errno != EEXIST) {
            break;
        }
    }
    int saved = errno;
    free(temp);
    errno = saved;
    return -1;
}

kf_status kf_npy_write(const char *path, const kf_tensor *t, kf_dtype dtype) {
    if (!path || !t || !t->data || t->shape.rank > KF_MAX_DIMS ||
        (dtype != KF_DTYPE_F32 && dtype != KF_DTYPE_F16 && dtype != KF_DTYPE_I32)) {
        return KF_ERROR_INVALID_ARGUMENT;
    }
    uint64_t count = kf_tensor_size(t);
    if (dtype == KF_DTYPE_I32) {
        for (uint64_t i = 0; i < count; i++) {
            float v = t->data[i];
            if (!(v >= -2147483648.0f && v < 2147483648.0f) || v != (float)(int32_t)v) {
                return KF_ERROR_INVALID_ARGUMENT; /* not a whole number int32 can hold */
            }
        }
    }
    /* numpy's own layout (numpy/lib/format.py, _write_array_header), byte for byte: version
     * 1.0, keys in this order, room for the first dimension to grow to 21 digits, then spaces up
     * to a 64-byte boundary and '\n' (a full 64 spaces when already aligned, as numpy does). */
    char shape[96] = "";
    size_t n = 0;
    for (uint32_t i = 0; i < t->shape.rank; i++) {
        n += (size_t)snprintf(shape + n, sizeof shape - n, "%s%u", i ? ", " : "", t->shape.dims[i]);
    }
    if (t->shape.rank == 1) {
        snprintf(shape + n, sizeof shape - n, ",");
    }
    const char *descr = dtype == KF_DTYPE_F16 ? "<f2" : dtype == KF_DTYPE_I32 ? "<i4" : "<f4";
    char header[256];
    int len = snprintf(header, sizeof header,
                       "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, shape);
    size_t growth = 0;
    if (t->shape.rank > 0) {
        char first[16];
        growth = 21 - (size_t)snprintf(first, sizeof first, "%u", t->shape.dims[0]);
    }
    size_t hlen = (size_t)len + growth + 1;
    size_t header_len = hlen + (64 - (10 + hlen) % 64);
    memset(header + len, ' ', header_len - (size_t)len - 1);
    header[header_len - 1] = '\n';

    unsigned char prefix[10];
    memcpy(prefix, npy_magic, sizeof npy_magic);
    prefix[6] = 1;
    prefix[7] = 0;
    prefix[8] = (unsigned char)(header_len & 0xff);
    prefix[9] = (unsigned char)(header_len >> 8);

    /* The file appears whole or not at all: written under a temporary name in the same folder
     * (so the rename stays on one file system) and renamed over path only once complete and on
     * disk. A kill at any moment leaves a previous file of that name as it was. */
    char *temp = NULL;
    int fd = open_temp_beside(path, &temp);
    if (fd < 0) {
        return KF_ERROR_IO;
    }
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        int saved = errno;
        close(fd);
        unlink(temp);
        free(temp);
        errno = saved;
        return KF_ERROR_IO;
    }
    bool ok = fwrite(prefix, 1, sizeof prefix, f) == sizeof prefix &&
              fwrite(header, 1, header_len, f) == header_len &&
              write_elements(f, t->data, count, dtype) && fflush(f) == 0 && fsync(fd) == 0;
    int saved = errno;
    if (fclose(f) != 0 && ok) {
        ok = false;
        saved = errno;
    }
    if (ok && rename(temp, path) != 0) {
        ok = false;
        saved = errno;
    }
    if (!ok) {
        unlink(temp); /* no half-written file, under either name */
        free(temp);
        errno = saved;
        return KF_ERROR_IO;
    }
    free(temp);
    return KF_OK;
}

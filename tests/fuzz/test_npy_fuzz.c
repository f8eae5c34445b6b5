/* Fuzzing the .npy reader: files numpy would write (every dtype kfuse reads, ranks 0 to 4,
 * versions 1 to 3) damaged at random (bytes flipped or set to header syntax, cut short, grown,
 * header fields swapped) and plain random bytes, read from a regular file and from a pipe (the
 * unsized path). Whatever the bytes: either a tensor whose size is its shape's, or KF_ERROR_IO
 * (or out of memory) with a message naming the path and no tensor. For a share of
 * KFUSE_FUZZ_SECONDS; the stream is the run's printed seed. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define NPY_SHARE 0.2
#define NPY_MAX_FILE 32768 /* a rank-4 7x7x7x7 f32 file is 9.7 KB; room to grow it */

static uint32_t pick(uint32_t n) {
    return n ? (uint32_t)(kt_rand_u64() % n) : 0;
}

/* A valid file, as numpy lays it out, into buf; returns its length. */
static size_t valid_file(unsigned char *buf) {
    static const char *const descrs[] = {"<f4", "<f2", "<i4"};
    uint32_t which = pick(3);
    uint32_t width = which == 1 ? 2 : 4;
    uint32_t rank = pick(5), dims[4] = {1, 1, 1, 1};
    uint64_t count = 1;
    char shape[64] = "";
    size_t sl = 0;
    for (uint32_t d = 0; d < rank; d++) {
        dims[d] = 1 + pick(7);
        count *= dims[d];
        sl += (size_t)snprintf(shape + sl, sizeof shape - sl, "%s%u", d ? ", " : "", dims[d]);
    }
    if (rank == 1) {
        snprintf(shape + sl, sizeof shape - sl, ",");
    }
    char header[256];
    int hl =
        snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
                 descrs[which], shape);
    unsigned major = 1 + pick(3);
    size_t prefix = major == 1 ? 10 : 12;
    size_t total_header = (size_t)hl + 1;
    total_header += (64 - (prefix + total_header) % 64) % 64;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    buf[7] = 0;
    buf[8] = (unsigned char)(total_header & 0xff);
    buf[9] = (unsigned char)(total_header >> 8);
    if (major > 1) {
        buf[10] = buf[11] = 0;
    }
    memcpy(buf + prefix, header, (size_t)hl);
    memset(buf + prefix + (size_t)hl, ' ', total_header - (size_t)hl - 1);
    buf[prefix + total_header - 1] = '\n';
    size_t at = prefix + total_header;
    for (uint64_t i = 0; i < count; i++, at += width) {
        uint32_t v = which == 2 ? pick(100) : (uint32_t)kt_rand_u64();
        if (which == 0) {
            float f = kt_rand_f32(-10.0f, 10.0f);
            memcpy(&v, &f, 4);
        }
        for (uint32_t b = 0; b < width; b++) {
            buf[at + b] = (unsigned char)(v >> (8 * b));
        }
    }
    return at;
}

static size_t damage(unsigned char *buf, size_t len) {
    static const char syntax[] = "{}():,'\" \nTrueFalse-0123456789L<>f4i2u8";
    int rounds = 1 + (int)pick(4);
    for (int r = 0; r < rounds; r++) {
        size_t at = len ? pick((uint32_t)len) : 0;
        switch (pick(6)) {
        case 0:
            if (len) {
                buf[at] = (unsigned char)kt_rand_u64();
            }
            break;
        case 1:
            if (len) {
                buf[at] = (unsigned char)syntax[pick(sizeof syntax - 1)];
            }
            break;
        case 2: /* cut short */
            len = at;
            break;
        case 3: /* grow */
            for (uint32_t n = 1 + pick(64); n-- && len < NPY_MAX_FILE;) {
                buf[len++] = (unsigned char)kt_rand_u64();
            }
            break;
        case 4: /* the header length bytes */
            if (len > 11) {
                buf[8 + pick(4)] = (unsigned char)kt_rand_u64();
            }
            break;
        default: /* a digit of the shape: sizes that do not match the data */
            for (size_t i = 10; i < len && i < 140; i++) {
                if (buf[i] >= '1' && buf[i] <= '9' && pick(3) == 0) {
                    buf[i] = (unsigned char)('0' + pick(10));
                    break;
                }
            }
            break;
        }
    }
    return len;
}

/* Reads the bytes as a file (regular, or a pipe's read end); false after reporting a finding. */
static bool read_checks(const char *path, size_t len, int *accepted) {
    char msg[512] = {0};
    kf_tensor *t = (kf_tensor *)1;
    kf_status st = kf_npy_read(path, &t, msg, sizeof msg);
    if (st == KF_OK) {
        if (!t || kf_tensor_size(t) != kf_shape_elements(&t->shape) || t->shape.rank > 4) {
            kt_fail(__FILE__, __LINE__, "%zu bytes read into a tensor that does not add up", len);
            return false;
        }
        kf_tensor_destroy(t);
        (*accepted)++;
        return true;
    }
    if (t != NULL || (st != KF_ERROR_IO && st != KF_ERROR_OUT_OF_MEMORY) || !strstr(msg, path)) {
        kt_fail(__FILE__, __LINE__, "%zu bytes: status %s, tensor %p, message '%s'", len,
                kf_status_str(st), (void *)t, msg);
        return false;
    }
    return true;
}

KT_CPU_TEST(fuzz, npy_reader_never_crashes) {
    char dir[] = "/tmp/kfuse-npy-fuzz-XXXXXX";
    KT_CHECK(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
    char path[64];
    snprintf(path, sizeof path, "%s/f.npy", dir);
    unsigned char *buf = malloc(NPY_MAX_FILE);
    KT_CHECK(buf, "malloc");
    double seconds = kt_fuzz_seconds(NPY_SHARE), start = kt_now();
    printf("    %.0f s from seed %llu (rerun with --seed %llu)\n", seconds,
           (unsigned long long)kt_seed(), (unsigned long long)kt_seed());
    int files = 0, accepted = 0, valid_ok = 0;
    bool ok = true;
    while (ok && (files < 200 || kt_now() - start < seconds)) {
        size_t len;
        uint32_t how = pick(10);
        if (how == 0) {
            len = pick(NPY_MAX_FILE);
            for (size_t i = 0; i < len; i++) {
                buf[i] = (unsigned char)kt_rand_u64();
            }
        } else {
            len = valid_file(buf);
            if (how == 1) {
                /* undamaged: must read */
                int before = accepted;
                FILE *f = fopen(path, "wb");
                ok = f && fwrite(buf, 1, len, f) == len;
                ok = (f && fclose(f) == 0) && ok;
                ok = ok && read_checks(path, len, &accepted);
                valid_ok += accepted > before;
                if (ok && accepted == before) {
                    kt_fail(__FILE__, __LINE__, "a valid %zu-byte file was refused", len);
                    ok = false;
                }
                files++;
                continue;
            }
            len = damage(buf, len);
        }
        files++;
        if (pick(4) == 0 && len < 60000) {
            /* through a pipe: no size to check before reading */
            int fds[2];
            if (pipe(fds) != 0) {
                kt_fail(__FILE__, __LINE__, "pipe: %s", strerror(errno));
                ok = false;
                break;
            }
            ok = write(fds[1], buf, len) == (ssize_t)len;
            close(fds[1]);
            char pipe_path[64];
            snprintf(pipe_path, sizeof pipe_path, "/proc/self/fd/%d", fds[0]);
            ok = ok && read_checks(pipe_path, len, &accepted);
            close(fds[0]);
        } else {
            FILE *f = fopen(path, "wb");
            ok = f && fwrite(buf, 1, len, f) == len;
            ok = (f && fclose(f) == 0) && ok;
            ok = ok && read_checks(path, len, &accepted);
        }
    }
    free(buf);
    remove(path);
    rmdir(dir);
    printf("    %d files (%d read, %d of them undamaged)\n", files, accepted, valid_ok);
    KT_CHECK(ok, "see above (seed %llu)", (unsigned long long)kt_seed());
    KT_CHECK(valid_ok > 0 && accepted < files, "the fuzzer reached neither side");
}

/* Hugging Face checkpoint directories (safetensors.h): the config, the index and its shards,
 * each shard mapped once. Names in the index are untrusted: they must be plain file names, and
 * a shard may not lead out of the directory (see safe_open). */
#include "model/safetensors.h"
#include "core/file_read.h"
#include "core/internal.h"
#include "core/text_escape.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define INDEX_NAME "model.safetensors.index.json"
#define MAX_SHARDS 4096

static bool plain_name(const char *s) {
    if (!*s || !strcmp(s, ".") || !strcmp(s, "..") || strlen(s) > 255) return false;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p == '/' || *p < 0x20 || *p == 0x7F) return false;
    return true;
}

/* True when `path` is `root` or lies below it (both canonical). */
static bool below(const char *path, const char *root) {
    const size_t n = strlen(root);
    return !strncmp(path, root, n) && (path[n] == '/' || path[n] == 0 || (n == 1 && root[0] == '/'));
}

/* A symlinked shard is allowed where it resolves inside the directory, or, when the directory
 * is a Hugging Face cache snapshot (<repo>/snapshots/<rev>), inside <repo>/blobs. */
static bool link_allowed(const char *real_dir, const char *target) {
    if (below(target, real_dir)) return true;
    const char *snap = strstr(real_dir, "/snapshots/");
    if (!snap || strchr(snap + strlen("/snapshots/"), '/')) return false;
    char blobs[PATH_MAX];
    if (snprintf(blobs, sizeof blobs, "%.*s/blobs", (int)(snap - real_dir), real_dir) >= (int)sizeof blobs)
        return false;
    return below(target, blobs);
}

/* Where member `name` of the directory is to be opened: itself (*use_fd = dirfd), or, for a
 * symbolic link that the rule above allows, its resolved target (*use_fd = AT_FDCWD). */
static ts_status resolve_member(const ts__hf_dir *d, int dirfd, const char *name, char *target,
                                int *use_fd, const char **use_name) {
    char shown[PATH_MAX + 300];
    snprintf(shown, sizeof shown, "%s/%s", d->path, name);
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return ts__fail(TS_ERR_IO, "%s: missing (%s)", shown, strerror(errno));
    *use_fd = dirfd;
    *use_name = name;
    if (!S_ISLNK(st.st_mode)) return TS_OK;
    if (!realpath(shown, target))
        return ts__fail(TS_ERR_IO, "%s: a symbolic link that does not resolve (%s)", shown, strerror(errno));
    char esc[TS__ESC_CAP];
    if (!link_allowed(d->real, target))
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: a symbolic link leading out of the checkpoint "
                        "directory (to %s)", shown, ts__text_escape_str(target, esc, sizeof esc));
    *use_fd = AT_FDCWD;
    *use_name = target;
    return TS_OK;
}

ts_status ts__hf_read_member(const ts__hf_dir *d, int dirfd, const char *name, size_t cap,
                             char **buf, size_t *len) {
    char target[PATH_MAX], shown[PATH_MAX + 300];
    int fd = -1;
    const char *use = NULL;
    snprintf(shown, sizeof shown, "%s/%s", d->path, name);
    TS__RETURN_IF_ERROR(resolve_member(d, dirfd, name, target, &fd, &use));
    return ts__read_file_capped(fd, use, shown, cap, false, buf, len);
}

static ts_status open_shard(ts__hf_dir *d, int dirfd, const char *name, ts__st_file **out) {
    char target[PATH_MAX], shown[PATH_MAX + 300];
    snprintf(shown, sizeof shown, "%s/%s", d->path, name);
    char esc[TS__ESC_CAP];
    if (!plain_name(name))
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: %s names a shard '%s' that is not a "
                        "plain file name in the directory", d->path, INDEX_NAME,
                        ts__text_escape_str(name, esc, sizeof esc));
    int fd = -1;
    const char *use = NULL;
    const ts_status s = resolve_member(d, dirfd, name, target, &fd, &use);
    if (s != TS_OK)
        return strstr(ts_last_error(), ": missing (")
                   ? ts__fail(TS_ERR_IO, "%s: missing shard named in %s", shown, INDEX_NAME) : s;
    return ts__st_open(fd, use, shown, out);
}

/* The shard file names of the index, deduplicated, in first-seen order; and a check that the
 * map is {tensor: file name} throughout. */
static ts_status index_shards(ts__hf_dir *d, json_t *map, const char ***names, size_t *n) {
    *names = NULL;
    *n = 0;
    if (!json_is_object(map))
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s/%s: no weight_map object", d->path, INDEX_NAME);
    const char **v = calloc(MAX_SHARDS, sizeof *v);
    if (!v) return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: shard list", d->path);
    const char *key;
    json_t *val;
    json_object_foreach(map, key, val) {
        const char *f = json_string_value(val);
        if (!f) {
            free(v);
            char esc[TS__ESC_CAP];
            return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s/%s: weight_map['%s'] is not a file "
                            "name", d->path, INDEX_NAME, ts__text_escape_str(key, esc, sizeof esc));
        }
        size_t i = 0;
        while (i < *n && strcmp(v[i], f)) i++;
        if (i < *n) continue;
        if (*n == MAX_SHARDS) {
            free(v);
            return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s/%s: more than %d shards", d->path,
                            INDEX_NAME, MAX_SHARDS);
        }
        v[(*n)++] = f;
    }
    *names = v;
    return TS_OK;
}

/* Each tensor of the index in the shard it names, and no shard tensor the index leaves out. */
static ts_status check_index(ts__hf_dir *d, json_t *map, const char **names) {
    const char *key;
    json_t *val;
    size_t listed = 0;
    json_object_foreach(map, key, val) {
        size_t i = 0;
        while (strcmp(names[i], json_string_value(val))) i++;
        if (!ts__st_find(d->shards[i], key)) {
            char ek[TS__ESC_CAP], es[TS__ESC_CAP];
            return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s/%s: tensor '%s' is not in its shard %s",
                            d->path, INDEX_NAME, ts__text_escape_str(key, ek, sizeof ek),
                            ts__text_escape_str(names[i], es, sizeof es));
        }
        listed++;
    }
    if (listed != d->n_tensors)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: the shards hold %zu tensors, %s lists %zu "
                        "(a shard holds a tensor the index does not name)", d->path,
                        d->n_tensors, INDEX_NAME, listed);
    return TS_OK;
}

static ts_status open_shards(ts__hf_dir *d, int dirfd) {
    char *idx = NULL;
    size_t idx_len = 0;
    char shown[PATH_MAX + 64];
    snprintf(shown, sizeof shown, "%s/%s", d->path, INDEX_NAME);
    struct stat st;
    const bool sharded = fstatat(dirfd, INDEX_NAME, &st, AT_SYMLINK_NOFOLLOW) == 0;
    if (!sharded) {
        d->shards = calloc(1, sizeof *d->shards);
        if (!d->shards) return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s", d->path);
        if (fstatat(dirfd, "model.safetensors", &st, AT_SYMLINK_NOFOLLOW) != 0)
            return ts__fail(TS_ERR_IO, "%s: no weights (neither model.safetensors nor %s)", d->path,
                            INDEX_NAME);
        TS__RETURN_IF_ERROR(open_shard(d, dirfd, "model.safetensors", &d->shards[0]));
        d->n_shards = 1;
        d->n_tensors = d->shards[0]->n;
        return TS_OK;
    }
    TS__RETURN_IF_ERROR(ts__hf_read_member(d, dirfd, INDEX_NAME, TS__HF_MAX_INDEX_BYTES, &idx, &idx_len));
    json_error_t err;
    json_t *root = json_loadb(idx, idx_len, JSON_REJECT_DUPLICATES, &err);
    free(idx);
    if (!root)
        return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: invalid JSON at line %d: %.80s", shown,
                        err.line, err.text);
    json_t *map = json_object_get(root, "weight_map");
    const char **names = NULL;
    size_t n = 0;
    ts_status s = index_shards(d, map, &names, &n);
    if (s == TS_OK && !(d->shards = calloc(n ? n : 1, sizeof *d->shards)))
        s = ts__fail(TS_ERR_OUT_OF_MEMORY, "%s", d->path);
    for (size_t i = 0; i < n && s == TS_OK; i++) {
        s = open_shard(d, dirfd, names[i], &d->shards[i]);
        if (s == TS_OK) d->n_tensors += d->shards[i]->n, d->n_shards++;
    }
    if (s == TS_OK) s = check_index(d, map, names);
    free(names);
    json_decref(root);
    return s;
}

ts_status ts__hf_open(const char *dir, ts__hf_dir **out) {
    if (!out || !dir) return ts__fail(TS_ERR_NULL_POINTER, "ts__hf_open: NULL argument");
    *out = NULL;
    const int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0) return ts__fail(TS_ERR_IO, "%s: not a readable directory (%s)", dir, strerror(errno));
    ts__hf_dir *d = calloc(1, sizeof *d);
    if (d) d->dirfd = -1;
    ts_status s = d && (d->path = strdup(dir)) ? TS_OK : ts__fail(TS_ERR_OUT_OF_MEMORY, "%s", dir);
    if (s == TS_OK && !(d->real = realpath(dir, NULL))) s = ts__fail(TS_ERR_IO, "%s: %s", dir, strerror(errno));
    if (s == TS_OK)
        s = ts__hf_read_member(d, dirfd, "config.json", TS__HF_MAX_CONFIG_BYTES, &d->config,
                               &d->config_len);
    if (s == TS_OK) s = open_shards(d, dirfd);
    if (s == TS_OK) d->dirfd = dirfd;
    else close(dirfd);
    if (s != TS_OK) {
        ts__hf_close(d);
        return s;
    }
    *out = d;
    return TS_OK;
}

void ts__hf_close(ts__hf_dir *d) {
    if (!d) return;
    for (size_t i = 0; i < d->n_shards; i++) ts__st_close(d->shards[i]);
    free(d->shards);
    free(d->config);
    free(d->path);
    free(d->real);
    if (d->dirfd >= 0) close(d->dirfd);
    free(d);
}

const ts__st_tensor *ts__hf_find(const ts__hf_dir *d, const char *name) {
    for (size_t i = 0; d && i < d->n_shards; i++) {
        const ts__st_tensor *t = ts__st_find(d->shards[i], name);
        if (t) return t;
    }
    return NULL;
}

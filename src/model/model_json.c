/* A small strict JSON reader (RFC 8259): the model config and the weight file header. Errors
 * carry the byte offset; duplicate keys are errors (a header naming a tensor twice is
 * ambiguous). */
#include "model_internal.h"

#include "core/text_escape.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#define TS__JSON_MAX_DEPTH 64

typedef struct jp {
    const char *s;
    size_t n, i;
    const char *what;
    int depth;
} jp;

static ts_status jerr(jp *p, const char *msg) {
    return ts__fail(TS_ERR_INVALID_ARGUMENT, "%s: invalid JSON at byte %zu: %s", p->what, p->i,
                    msg);
}

static void skip_ws(jp *p) {
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') p->i++;
        else break;
    }
}

void ts__json_free(ts__json *j) {
    if (!j) return;
    /* free children, not j itself (the caller owns j's storage) */
    free(j->str);
    for (int64_t k = 0; k < j->n; k++) {
        ts__json_free(&j->items[k]);
        if (j->keys) free(j->keys[k]);
    }
    free(j->items);
    free(j->keys);
    memset(j, 0, sizeof *j);
}

static void put_utf8(char *o, size_t *k, uint32_t cp) {
    if (cp < 0x80) o[(*k)++] = (char)cp;
    else if (cp < 0x800) {
        o[(*k)++] = (char)(0xC0 | (cp >> 6));
        o[(*k)++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        o[(*k)++] = (char)(0xE0 | (cp >> 12));
        o[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[(*k)++] = (char)(0x80 | (cp & 0x3F));
    } else {
        o[(*k)++] = (char)(0xF0 | (cp >> 18));
        o[(*k)++] = (char)(0x80 | ((cp >> 12) & 0x3F));
        o[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[(*k)++] = (char)(0x80 | (cp & 0x3F));
    }
}

static int hex4(const char *s, uint32_t *v) {
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        r <<= 4;
        if (c >= '0' && c <= '9') r |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') r |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') r |= (uint32_t)(c - 'A' + 10);
        else return 0;
    }
    *v = r;
    return 1;
}

static ts_status parse_string(jp *p, char **out) {
    /* at the opening quote */
    p->i++;
    size_t start = p->i;
    size_t cap = 0;
    /* the decoded string is never longer than the source span */
    while (p->i < p->n && p->s[p->i] != '"') {
        if (p->s[p->i] == '\\') p->i++;
        p->i++;
    }
    if (p->i >= p->n) return jerr(p, "unterminated string");
    cap = p->i - start + 1;
    char *o = (char *)malloc(cap);
    if (!o) return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", p->what);
    size_t k = 0;
    p->i = start;
    while (p->s[p->i] != '"') {
        unsigned char c = (unsigned char)p->s[p->i];
        if (c < 0x20) {
            free(o);
            return jerr(p, "control character in string");
        }
        if (c != '\\') {
            o[k++] = (char)c;
            p->i++;
            continue;
        }
        p->i++;
        char e = p->s[p->i];
        switch (e) {
        case '"': o[k++] = '"'; break;
        case '\\': o[k++] = '\\'; break;
        case '/': o[k++] = '/'; break;
        case 'b': o[k++] = '\b'; break;
        case 'f': o[k++] = '\f'; break;
        case 'n': o[k++] = '\n'; break;
        case 'r': o[k++] = '\r'; break;
        case 't': o[k++] = '\t'; break;
        case 'u': {
            uint32_t cp;
            if (p->i + 4 >= p->n || !hex4(p->s + p->i + 1, &cp)) {
                free(o);
                return jerr(p, "bad \\u escape");
            }
            p->i += 4;
            if (cp >= 0xD800 && cp < 0xDC00) {
                uint32_t lo;
                if (p->i + 6 >= p->n || p->s[p->i + 1] != '\\' || p->s[p->i + 2] != 'u' ||
                    !hex4(p->s + p->i + 3, &lo) || lo < 0xDC00 || lo >= 0xE000) {
                    free(o);
                    return jerr(p, "unpaired surrogate");
                }
                p->i += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp < 0xE000) {
                free(o);
                return jerr(p, "unpaired surrogate");
            }
            if (cp == 0) {
                free(o);
                return jerr(p, "\\u0000 in string");
            }
            put_utf8(o, &k, cp);
            break;
        }
        default: free(o); return jerr(p, "bad escape");
        }
        p->i++;
    }
    p->i++; /* closing quote */
    o[k] = 0;
    *out = o;
    return TS_OK;
}

static ts_status parse_number(jp *p, ts__json *j) {
    size_t b = p->i;
    if (p->i < p->n && p->s[p->i] == '-') p->i++;
    if (p->i >= p->n) return jerr(p, "bad number");
    if (p->s[p->i] == '0') p->i++;
    else if (p->s[p->i] >= '1' && p->s[p->i] <= '9') {
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    } else return jerr(p, "bad number");
    if (p->i < p->n && p->s[p->i] == '.') {
        p->i++;
        if (p->i >= p->n || !(p->s[p->i] >= '0' && p->s[p->i] <= '9')) return jerr(p, "bad number");
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-')) p->i++;
        if (p->i >= p->n || !(p->s[p->i] >= '0' && p->s[p->i] <= '9')) return jerr(p, "bad number");
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    }
    size_t len = p->i - b;
    j->str = (char *)malloc(len + 1);
    if (!j->str) return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", p->what);
    memcpy(j->str, p->s + b, len);
    j->str[len] = 0;
    j->num = strtod(j->str, NULL);
    j->kind = TS__JSON_NUM;
    return TS_OK;
}

static ts_status parse_value(jp *p, ts__json *j);

static ts_status grow(jp *p, ts__json *j, int64_t *cap, bool keys) {
    if (j->n < *cap) return TS_OK;
    int64_t nc = *cap ? *cap * 2 : 8;
    ts__json *ni = (ts__json *)realloc(j->items, (size_t)nc * sizeof *ni);
    if (!ni) return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", p->what);
    j->items = ni;
    if (keys) {
        char **nk = (char **)realloc(j->keys, (size_t)nc * sizeof *nk);
        if (!nk) return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", p->what);
        j->keys = nk;
    }
    *cap = nc;
    return TS_OK;
}

static ts_status parse_container(jp *p, ts__json *j, bool obj) {
    if (++p->depth > TS__JSON_MAX_DEPTH) return jerr(p, "nested too deeply");
    j->kind = obj ? TS__JSON_OBJ : TS__JSON_ARR;
    p->i++;
    int64_t cap = 0;
    skip_ws(p);
    char close = obj ? '}' : ']';
    if (p->i < p->n && p->s[p->i] == close) {
        p->i++;
        p->depth--;
        return TS_OK;
    }
    for (;;) {
        skip_ws(p);
        TS__RETURN_IF_ERROR(grow(p, j, &cap, obj));
        char *key = NULL;
        if (obj) {
            if (p->i >= p->n || p->s[p->i] != '"') return jerr(p, "expected a key string");
            TS__RETURN_IF_ERROR(parse_string(p, &key));
            for (int64_t k = 0; k < j->n; k++)
                if (strcmp(j->keys[k], key) == 0) {
                    char e[TS__ESC_CAP];
                    ts_status st = ts__fail(TS_ERR_INVALID_ARGUMENT,
                                            "%s: invalid JSON: duplicate key \"%s\"", p->what,
                                            ts__text_escape_str(key, e, sizeof e));
                    free(key);
                    return st;
                }
            skip_ws(p);
            if (p->i >= p->n || p->s[p->i] != ':') {
                free(key);
                return jerr(p, "expected ':'");
            }
            p->i++;
            skip_ws(p);
        }
        ts__json *v = &j->items[j->n];
        memset(v, 0, sizeof *v);
        if (obj) j->keys[j->n] = key;
        j->n++; /* counted now so that a failure below frees it */
        TS__RETURN_IF_ERROR(parse_value(p, v));
        skip_ws(p);
        if (p->i >= p->n) return jerr(p, obj ? "unterminated object" : "unterminated array");
        if (p->s[p->i] == ',') {
            p->i++;
            continue;
        }
        if (p->s[p->i] == close) {
            p->i++;
            break;
        }
        return jerr(p, obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
    p->depth--;
    return TS_OK;
}

static ts_status parse_value(jp *p, ts__json *j) {
    skip_ws(p);
    if (p->i >= p->n) return jerr(p, "unexpected end");
    char c = p->s[p->i];
    if (c == '{') return parse_container(p, j, true);
    if (c == '[') return parse_container(p, j, false);
    if (c == '"') {
        j->kind = TS__JSON_STR;
        return parse_string(p, &j->str);
    }
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number(p, j);
    if (p->n - p->i >= 4 && memcmp(p->s + p->i, "true", 4) == 0) {
        j->kind = TS__JSON_BOOL;
        j->b = true;
        p->i += 4;
        return TS_OK;
    }
    if (p->n - p->i >= 5 && memcmp(p->s + p->i, "false", 5) == 0) {
        j->kind = TS__JSON_BOOL;
        p->i += 5;
        return TS_OK;
    }
    if (p->n - p->i >= 4 && memcmp(p->s + p->i, "null", 4) == 0) {
        j->kind = TS__JSON_NULL;
        p->i += 4;
        return TS_OK;
    }
    return jerr(p, "unexpected character");
}

ts_status ts__json_parse(const char *text, size_t len, const char *what, ts__json **out) {
    if (!text) return ts__fail(TS_ERR_NULL_POINTER, "%s: text is NULL", what);
    jp p = {text, len, 0, what, 0};
    ts__json *j = (ts__json *)calloc(1, sizeof *j);
    if (!j) return ts__fail(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
    ts_status st = parse_value(&p, j);
    if (st == TS_OK) {
        skip_ws(&p);
        if (p.i != p.n) st = jerr(&p, "trailing characters after the value");
    }
    if (st != TS_OK) {
        ts__json_free(j);
        free(j);
        return st;
    }
    *out = j;
    return TS_OK;
}

const ts__json *ts__json_get(const ts__json *obj, const char *key) {
    if (!obj || obj->kind != TS__JSON_OBJ) return NULL;
    for (int64_t k = 0; k < obj->n; k++)
        if (strcmp(obj->keys[k], key) == 0) return &obj->items[k];
    return NULL;
}

static bool plain_int_text(const char *s) {
    if (*s == '-') s++;
    if (!*s) return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9') return false;
    return true;
}

bool ts__json_int(const ts__json *j, int64_t *v) {
    if (!j || j->kind != TS__JSON_NUM || !plain_int_text(j->str)) return false;
    errno = 0;
    long long x = strtoll(j->str, NULL, 10);
    if (errno) return false;
    *v = (int64_t)x;
    return true;
}

bool ts__json_u64(const ts__json *j, uint64_t *v) {
    if (!j || j->kind != TS__JSON_NUM || j->str[0] == '-' || !plain_int_text(j->str)) return false;
    errno = 0;
    unsigned long long x = strtoull(j->str, NULL, 10);
    if (errno) return false;
    *v = (uint64_t)x;
    return true;
}

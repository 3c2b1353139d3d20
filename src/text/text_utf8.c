/* UTF-8 validation and lossy decoding, and the byte-level alphabet of GPT-2-style BPE: each
 * byte stands for one printable code point (printable Latin-1 bytes for themselves, the
 * others for U+0100 upwards in byte order). */
#include "text/text_internal.h"

#include <string.h>

/* Bytes allowed after `lead` in position 1 (the later ones are always 80-BF). */
static void second_range(unsigned char lead, unsigned char *lo, unsigned char *hi) {
    *lo = 0x80, *hi = 0xBF;
    if (lead == 0xE0) *lo = 0xA0;
    else if (lead == 0xED) *hi = 0x9F;
    else if (lead == 0xF0) *lo = 0x90;
    else if (lead == 0xF4) *hi = 0x8F;
}

int ts__utf8_len(unsigned char lead) {
    if (lead < 0x80) return 1;
    if (lead >= 0xC2 && lead <= 0xDF) return 2;
    if (lead >= 0xE0 && lead <= 0xEF) return 3;
    if (lead >= 0xF0 && lead <= 0xF4) return 4;
    return 0; /* never a lead byte */
}

/* Length of the valid prefix of the sequence at s (k bytes available): the full length when
 * valid, else how many bytes form the maximal subpart (>= 1), with *complete false when the
 * available bytes ran out before a decision. */
static int scan(const unsigned char *s, size_t k, bool *valid, bool *complete) {
    const int need = ts__utf8_len(s[0]);
    *complete = true;
    *valid = need > 0;
    if (need <= 1) return 1;
    unsigned char lo, hi;
    second_range(s[0], &lo, &hi);
    for (int i = 1; i < need; i++) {
        if ((size_t)i >= k) {
            *valid = false;
            *complete = false;
            return i;
        }
        if (s[i] < lo || s[i] > hi) {
            *valid = false;
            return i;
        }
        lo = 0x80, hi = 0xBF;
    }
    return need;
}

size_t ts__utf8_first_invalid(const unsigned char *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        bool valid, complete;
        const int n = scan(s + i, len - i, &valid, &complete);
        if (!valid) return i;
        i += (size_t)n;
    }
    return len;
}

size_t ts__utf8_lossy(const unsigned char *s, size_t len, bool hold, char *out, size_t *out_len) {
    size_t i = 0, o = *out_len;
    while (i < len) {
        bool valid, complete;
        const int n = scan(s + i, len - i, &valid, &complete);
        if (!complete && hold) {
            *out_len = o;
            return len - i;
        }
        if (valid) memcpy(out + o, s + i, (size_t)n), o += (size_t)n;
        else memcpy(out + o, "\xEF\xBF\xBD", 3), o += 3;
        i += (size_t)n;
    }
    *out_len = o;
    return 0;
}

static bool self_printable(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

/* The 68 non-printable bytes, in order: 00-20 (33), 7F-A0 (34), AD; the n-th is U+0100 + n. */
uint32_t ts__bytelevel_char(unsigned char b) {
    if (self_printable(b)) return b;
    if (b <= 0x20) return 0x100u + b;
    if (b >= 0x7F && b <= 0xA0) return 0x100u + 33 + (b - 0x7Fu);
    return 0x100u + 67; /* 0xAD */
}

int ts__bytelevel_byte(uint32_t cp) {
    if (cp < 0x100) return self_printable(cp) ? (int)cp : -1;
    const uint32_t n = cp - 0x100;
    if (n < 33) return (int)n;
    if (n < 67) return (int)(0x7F + n - 33);
    return n == 67 ? 0xAD : -1;
}

int ts__utf8_put(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

uint32_t ts__utf8_get(const unsigned char *s, int *n) {
    const int k = ts__utf8_len(s[0]);
    *n = k ? k : 1;
    if (k <= 1) return s[0];
    uint32_t cp = s[0] & (0x7F >> k);
    for (int i = 1; i < k; i++) cp = (cp << 6) | (s[i] & 0x3F);
    return cp;
}

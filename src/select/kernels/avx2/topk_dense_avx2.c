/* AVX2 dense-row kernels: keys 8/16 values per step, counting by compare-and-subtract (16 bf16
 * keys per compare), and the final selection as a compress (movemask -> permutation table ->
 * vpermd) that writes 8 entries per step whatever the survivors, so no per-survivor branch.
 * Same results as the generic ones: integer compares only. */
#include "select/topk_internal.h"

#include <immintrin.h>

/* Compress permutations: entry m lists the lanes of the set bits of m, in the lane order
 * 0, 1, 4, 5, 2, 3, 6, 7, so that unpacklo / unpackhi of the permuted index and key vectors
 * are the entries 0-3 and 4-7 in order (no cross-lane fix-up). */
static const uint64_t k_compress[256] = {
0x0000000000000000ull, 0x0000000000000000ull, 0x0000000000000001ull, 0x0000000000000100ull,
0x0000000000000002ull, 0x0000000000000200ull, 0x0000000000000201ull, 0x0000000200000100ull,
0x0000000000000003ull, 0x0000000000000300ull, 0x0000000000000301ull, 0x0000000300000100ull,
0x0000000000000302ull, 0x0000000300000200ull, 0x0000000300000201ull, 0x0000030200000100ull,
0x0000000000000004ull, 0x0000000000000400ull, 0x0000000000000401ull, 0x0000000400000100ull,
0x0000000000000402ull, 0x0000000400000200ull, 0x0000000400000201ull, 0x0000040200000100ull,
0x0000000000000403ull, 0x0000000400000300ull, 0x0000000400000301ull, 0x0000040300000100ull,
0x0000000400000302ull, 0x0000040300000200ull, 0x0000040300000201ull, 0x0000030200040100ull,
0x0000000000000005ull, 0x0000000000000500ull, 0x0000000000000501ull, 0x0000000500000100ull,
0x0000000000000502ull, 0x0000000500000200ull, 0x0000000500000201ull, 0x0000050200000100ull,
0x0000000000000503ull, 0x0000000500000300ull, 0x0000000500000301ull, 0x0000050300000100ull,
0x0000000500000302ull, 0x0000050300000200ull, 0x0000050300000201ull, 0x0000030200050100ull,
0x0000000000000504ull, 0x0000000500000400ull, 0x0000000500000401ull, 0x0000050400000100ull,
0x0000000500000402ull, 0x0000050400000200ull, 0x0000050400000201ull, 0x0000040200050100ull,
0x0000000500000403ull, 0x0000050400000300ull, 0x0000050400000301ull, 0x0000040300050100ull,
0x0000050400000302ull, 0x0000040300050200ull, 0x0000040300050201ull, 0x0000030205040100ull,
0x0000000000000006ull, 0x0000000000000600ull, 0x0000000000000601ull, 0x0000000600000100ull,
0x0000000000000602ull, 0x0000000600000200ull, 0x0000000600000201ull, 0x0000060200000100ull,
0x0000000000000603ull, 0x0000000600000300ull, 0x0000000600000301ull, 0x0000060300000100ull,
0x0000000600000302ull, 0x0000060300000200ull, 0x0000060300000201ull, 0x0000030200060100ull,
0x0000000000000604ull, 0x0000000600000400ull, 0x0000000600000401ull, 0x0000060400000100ull,
0x0000000600000402ull, 0x0000060400000200ull, 0x0000060400000201ull, 0x0000040200060100ull,
0x0000000600000403ull, 0x0000060400000300ull, 0x0000060400000301ull, 0x0000040300060100ull,
0x0000060400000302ull, 0x0000040300060200ull, 0x0000040300060201ull, 0x0000030206040100ull,
0x0000000000000605ull, 0x0000000600000500ull, 0x0000000600000501ull, 0x0000060500000100ull,
0x0000000600000502ull, 0x0000060500000200ull, 0x0000060500000201ull, 0x0000050200060100ull,
0x0000000600000503ull, 0x0000060500000300ull, 0x0000060500000301ull, 0x0000050300060100ull,
0x0000060500000302ull, 0x0000050300060200ull, 0x0000050300060201ull, 0x0000030206050100ull,
0x0000000600000504ull, 0x0000060500000400ull, 0x0000060500000401ull, 0x0000050400060100ull,
0x0000060500000402ull, 0x0000050400060200ull, 0x0000050400060201ull, 0x0000040206050100ull,
0x0000060500000403ull, 0x0000050400060300ull, 0x0000050400060301ull, 0x0000040306050100ull,
0x0000050400060302ull, 0x0000040306050200ull, 0x0000040306050201ull, 0x0006030205040100ull,
0x0000000000000007ull, 0x0000000000000700ull, 0x0000000000000701ull, 0x0000000700000100ull,
0x0000000000000702ull, 0x0000000700000200ull, 0x0000000700000201ull, 0x0000070200000100ull,
0x0000000000000703ull, 0x0000000700000300ull, 0x0000000700000301ull, 0x0000070300000100ull,
0x0000000700000302ull, 0x0000070300000200ull, 0x0000070300000201ull, 0x0000030200070100ull,
0x0000000000000704ull, 0x0000000700000400ull, 0x0000000700000401ull, 0x0000070400000100ull,
0x0000000700000402ull, 0x0000070400000200ull, 0x0000070400000201ull, 0x0000040200070100ull,
0x0000000700000403ull, 0x0000070400000300ull, 0x0000070400000301ull, 0x0000040300070100ull,
0x0000070400000302ull, 0x0000040300070200ull, 0x0000040300070201ull, 0x0000030207040100ull,
0x0000000000000705ull, 0x0000000700000500ull, 0x0000000700000501ull, 0x0000070500000100ull,
0x0000000700000502ull, 0x0000070500000200ull, 0x0000070500000201ull, 0x0000050200070100ull,
0x0000000700000503ull, 0x0000070500000300ull, 0x0000070500000301ull, 0x0000050300070100ull,
0x0000070500000302ull, 0x0000050300070200ull, 0x0000050300070201ull, 0x0000030207050100ull,
0x0000000700000504ull, 0x0000070500000400ull, 0x0000070500000401ull, 0x0000050400070100ull,
0x0000070500000402ull, 0x0000050400070200ull, 0x0000050400070201ull, 0x0000040207050100ull,
0x0000070500000403ull, 0x0000050400070300ull, 0x0000050400070301ull, 0x0000040307050100ull,
0x0000050400070302ull, 0x0000040307050200ull, 0x0000040307050201ull, 0x0007030205040100ull,
0x0000000000000706ull, 0x0000000700000600ull, 0x0000000700000601ull, 0x0000070600000100ull,
0x0000000700000602ull, 0x0000070600000200ull, 0x0000070600000201ull, 0x0000060200070100ull,
0x0000000700000603ull, 0x0000070600000300ull, 0x0000070600000301ull, 0x0000060300070100ull,
0x0000070600000302ull, 0x0000060300070200ull, 0x0000060300070201ull, 0x0000030207060100ull,
0x0000000700000604ull, 0x0000070600000400ull, 0x0000070600000401ull, 0x0000060400070100ull,
0x0000070600000402ull, 0x0000060400070200ull, 0x0000060400070201ull, 0x0000040207060100ull,
0x0000070600000403ull, 0x0000060400070300ull, 0x0000060400070301ull, 0x0000040307060100ull,
0x0000060400070302ull, 0x0000040307060200ull, 0x0000040307060201ull, 0x0007030206040100ull,
0x0000000700000605ull, 0x0000070600000500ull, 0x0000070600000501ull, 0x0000060500070100ull,
0x0000070600000502ull, 0x0000060500070200ull, 0x0000060500070201ull, 0x0000050207060100ull,
0x0000070600000503ull, 0x0000060500070300ull, 0x0000060500070301ull, 0x0000050307060100ull,
0x0000060500070302ull, 0x0000050307060200ull, 0x0000050307060201ull, 0x0007030206050100ull,
0x0000070600000504ull, 0x0000060500070400ull, 0x0000060500070401ull, 0x0000050407060100ull,
0x0000060500070402ull, 0x0000050407060200ull, 0x0000050407060201ull, 0x0007040206050100ull,
0x0000060500070403ull, 0x0000050407060300ull, 0x0000050407060301ull, 0x0007040306050100ull,
0x0000050407060302ull, 0x0007040306050200ull, 0x0007040306050201ull, 0x0706030205040100ull
};

/* The same permutations in plain lane order, for index-only output. */
static const uint64_t k_compress_plain[256] = {
0x0000000000000000ull, 0x0000000000000000ull, 0x0000000000000001ull, 0x0000000000000100ull,
0x0000000000000002ull, 0x0000000000000200ull, 0x0000000000000201ull, 0x0000000000020100ull,
0x0000000000000003ull, 0x0000000000000300ull, 0x0000000000000301ull, 0x0000000000030100ull,
0x0000000000000302ull, 0x0000000000030200ull, 0x0000000000030201ull, 0x0000000003020100ull,
0x0000000000000004ull, 0x0000000000000400ull, 0x0000000000000401ull, 0x0000000000040100ull,
0x0000000000000402ull, 0x0000000000040200ull, 0x0000000000040201ull, 0x0000000004020100ull,
0x0000000000000403ull, 0x0000000000040300ull, 0x0000000000040301ull, 0x0000000004030100ull,
0x0000000000040302ull, 0x0000000004030200ull, 0x0000000004030201ull, 0x0000000403020100ull,
0x0000000000000005ull, 0x0000000000000500ull, 0x0000000000000501ull, 0x0000000000050100ull,
0x0000000000000502ull, 0x0000000000050200ull, 0x0000000000050201ull, 0x0000000005020100ull,
0x0000000000000503ull, 0x0000000000050300ull, 0x0000000000050301ull, 0x0000000005030100ull,
0x0000000000050302ull, 0x0000000005030200ull, 0x0000000005030201ull, 0x0000000503020100ull,
0x0000000000000504ull, 0x0000000000050400ull, 0x0000000000050401ull, 0x0000000005040100ull,
0x0000000000050402ull, 0x0000000005040200ull, 0x0000000005040201ull, 0x0000000504020100ull,
0x0000000000050403ull, 0x0000000005040300ull, 0x0000000005040301ull, 0x0000000504030100ull,
0x0000000005040302ull, 0x0000000504030200ull, 0x0000000504030201ull, 0x0000050403020100ull,
0x0000000000000006ull, 0x0000000000000600ull, 0x0000000000000601ull, 0x0000000000060100ull,
0x0000000000000602ull, 0x0000000000060200ull, 0x0000000000060201ull, 0x0000000006020100ull,
0x0000000000000603ull, 0x0000000000060300ull, 0x0000000000060301ull, 0x0000000006030100ull,
0x0000000000060302ull, 0x0000000006030200ull, 0x0000000006030201ull, 0x0000000603020100ull,
0x0000000000000604ull, 0x0000000000060400ull, 0x0000000000060401ull, 0x0000000006040100ull,
0x0000000000060402ull, 0x0000000006040200ull, 0x0000000006040201ull, 0x0000000604020100ull,
0x0000000000060403ull, 0x0000000006040300ull, 0x0000000006040301ull, 0x0000000604030100ull,
0x0000000006040302ull, 0x0000000604030200ull, 0x0000000604030201ull, 0x0000060403020100ull,
0x0000000000000605ull, 0x0000000000060500ull, 0x0000000000060501ull, 0x0000000006050100ull,
0x0000000000060502ull, 0x0000000006050200ull, 0x0000000006050201ull, 0x0000000605020100ull,
0x0000000000060503ull, 0x0000000006050300ull, 0x0000000006050301ull, 0x0000000605030100ull,
0x0000000006050302ull, 0x0000000605030200ull, 0x0000000605030201ull, 0x0000060503020100ull,
0x0000000000060504ull, 0x0000000006050400ull, 0x0000000006050401ull, 0x0000000605040100ull,
0x0000000006050402ull, 0x0000000605040200ull, 0x0000000605040201ull, 0x0000060504020100ull,
0x0000000006050403ull, 0x0000000605040300ull, 0x0000000605040301ull, 0x0000060504030100ull,
0x0000000605040302ull, 0x0000060504030200ull, 0x0000060504030201ull, 0x0006050403020100ull,
0x0000000000000007ull, 0x0000000000000700ull, 0x0000000000000701ull, 0x0000000000070100ull,
0x0000000000000702ull, 0x0000000000070200ull, 0x0000000000070201ull, 0x0000000007020100ull,
0x0000000000000703ull, 0x0000000000070300ull, 0x0000000000070301ull, 0x0000000007030100ull,
0x0000000000070302ull, 0x0000000007030200ull, 0x0000000007030201ull, 0x0000000703020100ull,
0x0000000000000704ull, 0x0000000000070400ull, 0x0000000000070401ull, 0x0000000007040100ull,
0x0000000000070402ull, 0x0000000007040200ull, 0x0000000007040201ull, 0x0000000704020100ull,
0x0000000000070403ull, 0x0000000007040300ull, 0x0000000007040301ull, 0x0000000704030100ull,
0x0000000007040302ull, 0x0000000704030200ull, 0x0000000704030201ull, 0x0000070403020100ull,
0x0000000000000705ull, 0x0000000000070500ull, 0x0000000000070501ull, 0x0000000007050100ull,
0x0000000000070502ull, 0x0000000007050200ull, 0x0000000007050201ull, 0x0000000705020100ull,
0x0000000000070503ull, 0x0000000007050300ull, 0x0000000007050301ull, 0x0000000705030100ull,
0x0000000007050302ull, 0x0000000705030200ull, 0x0000000705030201ull, 0x0000070503020100ull,
0x0000000000070504ull, 0x0000000007050400ull, 0x0000000007050401ull, 0x0000000705040100ull,
0x0000000007050402ull, 0x0000000705040200ull, 0x0000000705040201ull, 0x0000070504020100ull,
0x0000000007050403ull, 0x0000000705040300ull, 0x0000000705040301ull, 0x0000070504030100ull,
0x0000000705040302ull, 0x0000070504030200ull, 0x0000070504030201ull, 0x0007050403020100ull,
0x0000000000000706ull, 0x0000000000070600ull, 0x0000000000070601ull, 0x0000000007060100ull,
0x0000000000070602ull, 0x0000000007060200ull, 0x0000000007060201ull, 0x0000000706020100ull,
0x0000000000070603ull, 0x0000000007060300ull, 0x0000000007060301ull, 0x0000000706030100ull,
0x0000000007060302ull, 0x0000000706030200ull, 0x0000000706030201ull, 0x0000070603020100ull,
0x0000000000070604ull, 0x0000000007060400ull, 0x0000000007060401ull, 0x0000000706040100ull,
0x0000000007060402ull, 0x0000000706040200ull, 0x0000000706040201ull, 0x0000070604020100ull,
0x0000000007060403ull, 0x0000000706040300ull, 0x0000000706040301ull, 0x0000070604030100ull,
0x0000000706040302ull, 0x0000070604030200ull, 0x0000070604030201ull, 0x0007060403020100ull,
0x0000000000070605ull, 0x0000000007060500ull, 0x0000000007060501ull, 0x0000000706050100ull,
0x0000000007060502ull, 0x0000000706050200ull, 0x0000000706050201ull, 0x0000070605020100ull,
0x0000000007060503ull, 0x0000000706050300ull, 0x0000000706050301ull, 0x0000070605030100ull,
0x0000000706050302ull, 0x0000070605030200ull, 0x0000070605030201ull, 0x0007060503020100ull,
0x0000000007060504ull, 0x0000000706050400ull, 0x0000000706050401ull, 0x0000070605040100ull,
0x0000000706050402ull, 0x0000070605040200ull, 0x0000070605040201ull, 0x0007060504020100ull,
0x0000000706050403ull, 0x0000070605040300ull, 0x0000070605040301ull, 0x0007060504030100ull,
0x0000070605040302ull, 0x0007060504030200ull, 0x0007060504030201ull, 0x0706050403020100ull
};

int ts__topk_dense_keys_bf16__avx2(const void *x, int64_t n, void *out) {
    const uint16_t *u = (const uint16_t *)x;
    int16_t *sk = (int16_t *)out;
    const __m256i negz = _mm256_set1_epi16((short)0x8000), mag = _mm256_set1_epi16(0x7fff);
    const __m256i inf = _mm256_set1_epi16(0x7f80);
    __m256i nan = _mm256_setzero_si256();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(u + i));
        v = _mm256_andnot_si256(_mm256_cmpeq_epi16(v, negz), v);
        nan = _mm256_or_si256(nan, _mm256_cmpgt_epi16(_mm256_and_si256(v, mag), inf));
        _mm256_storeu_si256((__m256i *)(sk + i),
                            _mm256_xor_si256(v, _mm256_and_si256(_mm256_srai_epi16(v, 15), mag)));
    }
    int r = !_mm256_testz_si256(nan, nan);
    return r | ts__topk_dense_keys_bf16__generic(u + i, n - i, sk + i);
}

int ts__topk_dense_keys_f32__avx2(const void *x, int64_t n, void *out) {
    const uint32_t *u = (const uint32_t *)x;
    int32_t *sk = (int32_t *)out;
    const __m256i negz = _mm256_set1_epi32((int)0x80000000u), mag = _mm256_set1_epi32(0x7fffffff);
    const __m256i inf = _mm256_set1_epi32(0x7f800000);
    __m256i nan = _mm256_setzero_si256();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(u + i));
        v = _mm256_andnot_si256(_mm256_cmpeq_epi32(v, negz), v);
        nan = _mm256_or_si256(nan, _mm256_cmpgt_epi32(_mm256_and_si256(v, mag), inf));
        __m256i s = _mm256_xor_si256(v, _mm256_and_si256(_mm256_srai_epi32(v, 31), mag));
        _mm256_storeu_si256((__m256i *)(sk + i), s);
    }
    int r = !_mm256_testz_si256(nan, nan);
    return r | ts__topk_dense_keys_f32__generic(u + i, n - i, sk + i);
}

static inline int64_t hsum_epi32(__m256i a) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    s = _mm_add_epi32(s, _mm_srli_si128(s, 8));
    s = _mm_add_epi32(s, _mm_srli_si128(s, 4));
    return (int64_t)(uint32_t)_mm_cvtsi128_si32(s);
}

void ts__topk_dense_count_gt2_s32__avx2(const void *p, int64_t n, int32_t t1, int32_t t2,
                                        int64_t c[2]) {
    const int32_t *sk = (const int32_t *)p;
    const __m256i u = _mm256_set1_epi32(t1), w = _mm256_set1_epi32(t2);
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, b0 = a0, b1 = a0;
    int64_t i = 0;
    /* lanes count at most n / 16 each: no overflow for any row length */
    for (; i + 16 <= n; i += 16) {
        __m256i v0 = _mm256_loadu_si256((const __m256i *)(sk + i));
        __m256i v1 = _mm256_loadu_si256((const __m256i *)(sk + i + 8));
        a0 = _mm256_sub_epi32(a0, _mm256_cmpgt_epi32(v0, u));
        a1 = _mm256_sub_epi32(a1, _mm256_cmpgt_epi32(v1, u));
        b0 = _mm256_sub_epi32(b0, _mm256_cmpgt_epi32(v0, w));
        b1 = _mm256_sub_epi32(b1, _mm256_cmpgt_epi32(v1, w));
    }
    int64_t t[2];
    ts__topk_dense_count_gt2_s32__generic(sk + i, n - i, t1, t2, t);
    c[0] = hsum_epi32(_mm256_add_epi32(a0, a1)) + t[0];
    c[1] = hsum_epi32(_mm256_add_epi32(b0, b1)) + t[1];
}

void ts__topk_dense_count_gt2_s16__avx2(const void *p, int64_t n, int32_t t1, int32_t t2,
                                        int64_t c[2]) {
    const int16_t *sk = (const int16_t *)p;
    if (t1 >= INT16_MAX || t1 < INT16_MIN || t2 >= INT16_MAX || t2 < INT16_MIN) {
        ts__topk_dense_count_gt2_s16__generic(sk, n, t1, t2, c); /* outside the key range */
        return;
    }
    const __m256i u = _mm256_set1_epi16((short)t1), w = _mm256_set1_epi16((short)t2);
    const __m256i one = _mm256_set1_epi16(1);
    int64_t c1 = 0, c2 = 0, i = 0;
    while (i + 32 <= n) {
        /* 16-bit lane counters, summed by a signed vpmaddwd: flushed every 2^19 values (at
         * most 2^14 per lane) */
        const int64_t stop = n - i > ((int64_t)1 << 19) ? i + ((int64_t)1 << 19) : n;
        __m256i a0 = _mm256_setzero_si256(), a1 = a0, b0 = a0, b1 = a0;
        for (; i + 32 <= stop; i += 32) {
            __m256i v0 = _mm256_loadu_si256((const __m256i *)(sk + i));
            __m256i v1 = _mm256_loadu_si256((const __m256i *)(sk + i + 16));
            a0 = _mm256_sub_epi16(a0, _mm256_cmpgt_epi16(v0, u));
            a1 = _mm256_sub_epi16(a1, _mm256_cmpgt_epi16(v1, u));
            b0 = _mm256_sub_epi16(b0, _mm256_cmpgt_epi16(v0, w));
            b1 = _mm256_sub_epi16(b1, _mm256_cmpgt_epi16(v1, w));
        }
        c1 += hsum_epi32(_mm256_add_epi32(_mm256_madd_epi16(a0, one), _mm256_madd_epi16(a1, one)));
        c2 += hsum_epi32(_mm256_add_epi32(_mm256_madd_epi16(b0, one), _mm256_madd_epi16(b1, one)));
    }
    int64_t t[2];
    ts__topk_dense_count_gt2_s16__generic(sk + i, n - i, t1, t2, t);
    c[0] = c1 + t[0];
    c[1] = c2 + t[1];
}

/* Entries of the i in [0, n) (indices idx0 + i) with lo < sk[i] <= hi, in index order. LOAD8
 * gives 8 keys as int32. hi = INT32_MAX: no upper bound. */
#define SELECT_GT(NAME, T, LOAD8, BIAS)                                                          \
    static int64_t NAME(const T *sk, int64_t n, int32_t lo, int32_t hi, uint32_t idx0,          \
                        uint64_t *out) {                                                         \
        const __m256i tv = _mm256_set1_epi32(lo), hv = _mm256_set1_epi32(hi);                   \
        const __m256i bv = _mm256_set1_epi32((int)(BIAS));                                      \
        __m256i nidx = _mm256_xor_si256(                                                         \
            _mm256_add_epi32(_mm256_set1_epi32((int)idx0), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)), \
            _mm256_set1_epi32(-1));                                                              \
        const __m256i eight = _mm256_set1_epi32(8);                                              \
        int64_t c = 0, i = 0;                                                                    \
        for (; i + 8 <= n; i += 8) {                                                             \
            __m256i s = LOAD8(sk + i);                                                           \
            /* no test for an empty group: with a few percent kept it would mispredict */        \
            __m256i in = _mm256_cmpgt_epi32(s, tv);                                             \
            if (hi != INT32_MAX) in = _mm256_andnot_si256(_mm256_cmpgt_epi32(s, hv), in);         \
            unsigned m = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(in));                  \
            __m256i perm = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)&k_compress[m])); \
            __m256i key = _mm256_permutevar8x32_epi32(_mm256_add_epi32(s, bv), perm);           \
            __m256i ni = _mm256_permutevar8x32_epi32(nidx, perm);                                \
            _mm256_storeu_si256((__m256i *)(out + c), _mm256_unpacklo_epi32(ni, key));           \
            _mm256_storeu_si256((__m256i *)(out + c + 4), _mm256_unpackhi_epi32(ni, key));       \
            c += __builtin_popcount(m);                                                          \
            nidx = _mm256_sub_epi32(nidx, eight); /* ~(idx + 8) = ~idx - 8 */                   \
        }                                                                                        \
        for (; i < n; i++) {                                                                     \
            out[c] = ts__topk_entry((uint32_t)(int32_t)sk[i] + (BIAS), idx0 + (uint32_t)i);      \
            c += sk[i] > lo && sk[i] <= hi;                                                      \
        }                                                                                        \
        return c;                                                                                \
    }

#define LOAD8_S32(q) _mm256_loadu_si256((const __m256i *)(q))
#define LOAD8_S16(q) _mm256_cvtepi16_epi32(_mm_loadu_si128((const __m128i *)(q)))
SELECT_GT(select_gt_s32, int32_t, LOAD8_S32, 0x80000000u)
SELECT_GT(select_gt_s16, int16_t, LOAD8_S16, 0x8000u)

/* Index-only variant: 4 bytes per survivor and one permute per 8 keys (no key, no unpack). */
#define SELECT_GT_IDX(NAME, T, LOAD8)                                                            \
    static int64_t NAME(const T *sk, int64_t n, int32_t lo, uint32_t idx0, uint32_t *out) {     \
        const __m256i tv = _mm256_set1_epi32(lo), eight = _mm256_set1_epi32(8);                 \
        __m256i iv = _mm256_add_epi32(_mm256_set1_epi32((int)idx0), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)); \
        int64_t c = 0, i = 0;                                                                    \
        for (; i + 8 <= n; i += 8) {                                                             \
            __m256i s = LOAD8(sk + i);                                                           \
            unsigned m = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(s, tv))); \
            __m256i perm = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)&k_compress_plain[m])); \
            _mm256_storeu_si256((__m256i *)(out + c), _mm256_permutevar8x32_epi32(iv, perm));    \
            c += __builtin_popcount(m);                                                          \
            iv = _mm256_add_epi32(iv, eight);                                                    \
        }                                                                                        \
        for (; i < n; i++) {                                                                     \
            out[c] = idx0 + (uint32_t)i;                                                         \
            c += sk[i] > lo;                                                                     \
        }                                                                                        \
        return c;                                                                                \
    }
SELECT_GT_IDX(select_idx_gt_s32, int32_t, LOAD8_S32)
SELECT_GT_IDX(select_idx_gt_s16, int16_t, LOAD8_S16)

/* The band holds at most a few dozen values: a walk over its hits costs less than a compress
 * of every group (measured: that full compress was the largest cost of an 8192-value row). */
int64_t ts__topk_dense_gather_s32__avx2(const void *p, int64_t n, int32_t lo, int32_t hi,
                                        uint32_t idx0, uint64_t *out) {
    const int32_t *sk = (const int32_t *)p;
    if (lo == INT32_MIN) return ts__topk_dense_gather_s32__generic(sk, n, lo, hi, idx0, out);
    const __m256i l = _mm256_set1_epi32(lo - 1), h = _mm256_set1_epi32(hi);
    int64_t c = 0, i = 0;
    for (; i + 32 <= n; i += 32) {
        uint32_t m = 0;
        for (int g = 0; g < 4; g++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(sk + i + 8 * g));
            __m256i in = _mm256_andnot_si256(_mm256_cmpgt_epi32(v, h), _mm256_cmpgt_epi32(v, l));
            m |= (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(in)) << (8 * g);
        }
        while (m) {
            int64_t j = i + __builtin_ctz(m);
            m &= m - 1;
            out[c++] = ts__topk_entry((uint32_t)sk[j] + 0x80000000u, idx0 + (uint32_t)j);
        }
    }
    return c + ts__topk_dense_gather_s32__generic(sk + i, n - i, lo, hi, idx0 + (uint32_t)i, out + c);
}

int64_t ts__topk_dense_gather_s16__avx2(const void *p, int64_t n, int32_t lo, int32_t hi,
                                        uint32_t idx0, uint64_t *out) {
    const int16_t *sk = (const int16_t *)p;
    if (lo <= INT16_MIN || hi > INT16_MAX)
        return ts__topk_dense_gather_s16__generic(sk, n, lo, hi, idx0, out);
    const __m256i l = _mm256_set1_epi16((short)(lo - 1)), h = _mm256_set1_epi16((short)hi);
    int64_t c = 0, i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i v0 = _mm256_loadu_si256((const __m256i *)(sk + i));
        __m256i v1 = _mm256_loadu_si256((const __m256i *)(sk + i + 16));
        __m256i in0 = _mm256_andnot_si256(_mm256_cmpgt_epi16(v0, h), _mm256_cmpgt_epi16(v0, l));
        __m256i in1 = _mm256_andnot_si256(_mm256_cmpgt_epi16(v1, h), _mm256_cmpgt_epi16(v1, l));
        /* one bit per key: the even bits of the byte masks */
        uint64_t m = ((uint64_t)(uint32_t)_mm256_movemask_epi8(in0) |
                      (uint64_t)(uint32_t)_mm256_movemask_epi8(in1) << 32) & 0x5555555555555555ull;
        while (m) {
            int64_t j = i + (__builtin_ctzll(m) >> 1);
            m &= m - 1;
            out[c++] = ts__topk_entry((uint32_t)(int32_t)sk[j] + 0x8000u, idx0 + (uint32_t)j);
        }
    }
    return c + ts__topk_dense_gather_s16__generic(sk + i, n - i, lo, hi, idx0 + (uint32_t)i, out + c);
}

/* Index of the need-th key equal to t: popcounts of equality masks, then a walk in the group
 * that reaches need. */
int64_t ts__topk_dense_nth_eq_s32__avx2(const void *p, int64_t n, int32_t t, int64_t need) {
    const int32_t *sk = (const int32_t *)p;
    const __m256i tv = _mm256_set1_epi32(t);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        uint32_t m = 0;
        for (int g = 0; g < 4; g++) {
            __m256i e = _mm256_cmpeq_epi32(_mm256_loadu_si256((const __m256i *)(sk + i + 8 * g)), tv);
            m |= (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(e)) << (8 * g);
        }
        const int pc = __builtin_popcount(m);
        if (pc < need) {
            need -= pc;
            continue;
        }
        while (--need) m &= m - 1;
        return i + __builtin_ctz(m);
    }
    return i + ts__topk_dense_nth_eq_s32__generic(sk + i, n - i, t, need);
}

int64_t ts__topk_dense_nth_eq_s16__avx2(const void *p, int64_t n, int32_t t, int64_t need) {
    const int16_t *sk = (const int16_t *)p;
    if (t < INT16_MIN || t > INT16_MAX) return n - 1; /* no such key: outside the contract */
    const __m256i tv = _mm256_set1_epi16((short)t);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i e0 = _mm256_cmpeq_epi16(_mm256_loadu_si256((const __m256i *)(sk + i)), tv);
        __m256i e1 = _mm256_cmpeq_epi16(_mm256_loadu_si256((const __m256i *)(sk + i + 16)), tv);
        uint64_t m = ((uint64_t)(uint32_t)_mm256_movemask_epi8(e0) |
                      (uint64_t)(uint32_t)_mm256_movemask_epi8(e1) << 32) & 0x5555555555555555ull;
        const int pc = __builtin_popcountll(m);
        if (pc < need) {
            need -= pc;
            continue;
        }
        while (--need) m &= m - 1;
        return i + (__builtin_ctzll(m) >> 1);
    }
    return i + ts__topk_dense_nth_eq_s16__generic(sk + i, n - i, t, need);
}

/* Ties with t are kept up to index last: sk >= t there, sk > t after (t > INT32_MIN: the key of
 * -inf is above it). */
int64_t ts__topk_dense_select_s32__avx2(const void *p, int64_t n, int32_t t, int64_t last,
                                        uint32_t idx0, uint64_t *out) {
    const int32_t *sk = (const int32_t *)p;
    const int64_t n0 = last + 1 < n ? last + 1 : n;
    int64_t c = select_gt_s32(sk, n0, t - 1, INT32_MAX, idx0, out);
    return c + select_gt_s32(sk + n0, n - n0, t, INT32_MAX, idx0 + (uint32_t)n0, out + c);
}

int64_t ts__topk_dense_select_s16__avx2(const void *p, int64_t n, int32_t t, int64_t last,
                                        uint32_t idx0, uint64_t *out) {
    const int16_t *sk = (const int16_t *)p;
    const int64_t n0 = last + 1 < n ? last + 1 : n;
    int64_t c = select_gt_s16(sk, n0, t - 1, INT32_MAX, idx0, out);
    return c + select_gt_s16(sk + n0, n - n0, t, INT32_MAX, idx0 + (uint32_t)n0, out + c);
}

int64_t ts__topk_dense_select_idx_s32__avx2(const void *p, int64_t n, int32_t t, int64_t last,
                                            uint32_t idx0, uint32_t *out) {
    const int32_t *sk = (const int32_t *)p;
    const int64_t n0 = last + 1 < n ? last + 1 : n;
    int64_t c = select_idx_gt_s32(sk, n0, t - 1, idx0, out);
    return c + select_idx_gt_s32(sk + n0, n - n0, t, idx0 + (uint32_t)n0, out + c);
}

int64_t ts__topk_dense_select_idx_s16__avx2(const void *p, int64_t n, int32_t t, int64_t last,
                                            uint32_t idx0, uint32_t *out) {
    const int16_t *sk = (const int16_t *)p;
    const int64_t n0 = last + 1 < n ? last + 1 : n;
    int64_t c = select_idx_gt_s16(sk, n0, t - 1, idx0, out);
    return c + select_idx_gt_s16(sk + n0, n - n0, t, idx0 + (uint32_t)n0, out + c);
}

/*
 * hadamard.c - the normalised fast Walsh-Hadamard transform and its
 * block-diagonal, optionally sign-randomised application to a row
 * (docs/spec/attention.md §1).
 *
 * H is the Sylvester Hadamard matrix of size n scaled by 1/sqrt(n), so
 * H = H^T = H^-1: applying it twice is the identity and it preserves norms
 * and dot products, which is why the cache can store H k instead of k and
 * attend with H q.  It is never formed: log2(n) butterfly stages of n/2
 * (add, subtract) pairs compute it in n log2 n additions.
 */
#include "hadamard.h"

void kvq_fwht_scalar(float *x, int n) {
    /* Stage h combines entries h apart: (a, b) -> (a + b, a - b). */
    for (int h = 1; h < n; h *= 2)
        for (int i = 0; i < n; i += 2 * h)
            for (int j = i; j < i + h; j++) {
                const float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
    const float s = kvq_fwht_norm(n);
    for (int j = 0; j < n; j++) x[j] *= s;
}

typedef void (*fwht_fn)(float *x, int n);
typedef void (*fwht_signed_fn)(const float *src, float *x, int n, const uint32_t *pre, const uint32_t *post);

/* The transform of each level (AVX-512 runs the AVX2 one); the AVX2
 * transform works on whole 8-float registers. */
#if defined(__x86_64__)
static const fwht_fn g_fwht[KVQ_ISA_COUNT] = { kvq_fwht_scalar, kvq_fwht_avx2, kvq_fwht_avx2 };
#else
static const fwht_fn g_fwht[KVQ_ISA_COUNT] = { kvq_fwht_scalar, kvq_fwht_scalar, kvq_fwht_scalar };
#endif

static fwht_fn fwht_for(int n) { return n >= 8 ? g_fwht[kvq_isa_best()] : kvq_fwht_scalar; }

/* Sizes outside the documented contract are ignored rather than trusted:
 * the function has no error channel, and touching memory past n would be
 * worse than leaving x as it is. */
void kvq_fwht(float *x, int n) {
    if (!x || !kvq_is_pow2(n) || n > KVQ_FWHT_MAX) return;
    fwht_for(n)(x, n);
}

void kvq_fwht_signed_scalar(const float *src, float *x, int n, const uint32_t *pre, const uint32_t *post) {
    kvq_fwht_signed_steps(kvq_fwht_scalar, src, x, n, pre, post);
}

#if defined(__x86_64__)
static const fwht_signed_fn g_fwht_signed[KVQ_ISA_COUNT] = { kvq_fwht_signed_scalar, kvq_fwht_signed_avx2,
                                                             kvq_fwht_signed_avx2 };
#else
static const fwht_signed_fn g_fwht_signed[KVQ_ISA_COUNT] = { kvq_fwht_signed_scalar, kvq_fwht_signed_scalar,
                                                             kvq_fwht_signed_scalar };
#endif

void kvq_fwht_signed(const float *src, float *x, int n, const uint32_t *pre, const uint32_t *post) {
    if (!src || !x || !kvq_is_pow2(n) || n > KVQ_FWHT_MAX) return;
    (n >= 8 ? g_fwht_signed[kvq_isa_best()] : kvq_fwht_signed_scalar)(src, x, n, pre, post);
}

static bool valid_blocking(const float *x, int n, int block) {
    return x && n > 0 && kvq_is_pow2(block) && block <= KVQ_FWHT_MAX && n % block == 0;
}

/* Multiply by the +-1 diagonal: a sign flip, exact in floating point. */
static void apply_signs(float *x, const int8_t *signs, int block) {
    for (int i = 0; i < block; i++)
        if (signs[i] < 0) x[i] = -x[i];
}

/* Forward: x <- H D x per block (D = diag(signs), identity when NULL). */
void kvq_rotate_row(float *x, int n, int block, const int8_t *signs) {
    if (!valid_blocking(x, n, block)) return;
    const fwht_fn fwht = fwht_for(block);
    for (int b = 0; b < n; b += block) {
        if (signs) apply_signs(x + b, signs, block);
        fwht(x + b, block);
    }
}

/* Inverse: (H D)^-1 = D^-1 H^-1 = D H, so transform first, then signs. */
void kvq_rotate_row_inverse(float *x, int n, int block, const int8_t *signs) {
    if (!valid_blocking(x, n, block)) return;
    const fwht_fn fwht = fwht_for(block);
    for (int b = 0; b < n; b += block) {
        fwht(x + b, block);
        if (signs) apply_signs(x + b, signs, block);
    }
}

/*
 * Seed convention: the signs are the splitmix64 stream started at `seed`
 * (state += 0x9e3779b97f4a7c15, then the finaliser), one output per sign;
 * sign i is -1 when the top bit of the i-th output is set, +1 otherwise.
 * The same seed always gives the same diagonal, on every platform, and a
 * shorter diagonal is a prefix of a longer one.
 */
static uint64_t splitmix64_next(uint64_t *state) {
    uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

void kvq_random_signs(int8_t *signs, int n, uint64_t seed) {
    if (!signs) return;
    uint64_t state = seed;
    for (int i = 0; i < n; i++) signs[i] = (splitmix64_next(&state) >> 63) ? -1 : 1;
}

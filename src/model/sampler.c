/* sampler.c - greedy / top-k / top-p / temperature sampling (sampler.h). */
#include "sampler.h"

#include <math.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

typedef struct sample_cand { int id; float logit; } sample_cand;

struct kvq_sampler {
    kvq_sampler_params p;
    uint64_t rng;
    sample_cand *cand;          /* scratch, grown to the largest n_vocab seen */
    double *prob;
    int cap;
};

void kvq_sampler_params_default(kvq_sampler_params *p) {
    p->temp = 0.8f;
    p->top_k = 40;
    p->top_p = 0.95f;
    p->seed = 0;
}

uint64_t kvq_sampler_random_seed(void) {
    uint64_t seed = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    bool got = f && fread(&seed, sizeof seed, 1, f) == 1;
    if (f) fclose(f);
    if (!got) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = (uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec ^ (uint64_t)getpid() << 32;
    }
    return (seed ^ seed >> 32) & 0xffffffffu;
}

kvq_status kvq_sampler_create(const kvq_sampler_params *p, kvq_sampler **out, kvq_error *err) {
    *out = NULL;
    if (!p || isnan(p->temp) || isnan(p->top_p))
        return kvq_fail(err, KVQ_ERR_ARG, "sampler: temperature and top-p must be numbers");
    kvq_sampler *s = kvq_calloc(1, sizeof *s);
    if (!s) return kvq_fail(err, KVQ_ERR_NOMEM, "sampler: out of memory");
    s->p = *p;
    s->rng = p->seed;
    *out = s;
    return KVQ_OK;
}

void kvq_sampler_free(kvq_sampler *s) {
    if (!s) return;
    free(s->cand);
    free(s->prob);
    free(s);
}

void kvq_sampler_reseed(kvq_sampler *s, uint64_t seed) { s->rng = seed; }

/* splitmix64: a full-period 64-bit generator; 53 bits make a double in [0,1). */
static double sample_uniform(kvq_sampler *s) {
    uint64_t z = (s->rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

static float sample_clean(float x) { return isnan(x) ? -INFINITY : x; }

static int sample_argmax(const float *logits, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (sample_clean(logits[i]) > sample_clean(logits[best])) best = i;   /* strict: lowest id on ties */
    return best;
}

/* Higher logit first, lower id first among equals. */
static int cand_cmp(const void *a, const void *b) {
    const sample_cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static bool sample_reserve(kvq_sampler *s, int n) {
    if (n <= s->cap) return true;
    sample_cand *c = kvq_realloc_n(s->cand, (size_t)n, sizeof *c);
    if (c) s->cand = c;
    double *p = kvq_realloc_n(s->prob, (size_t)n, sizeof *p);
    if (p) s->prob = p;
    if (!c || !p) return false;
    s->cap = n;
    return true;
}

static bool cand_better(const sample_cand *a, const sample_cand *b) { return cand_cmp(a, b) < 0; }

/* Move the k best candidates to cand[0, k), sorted, in O(n log k): a heap
 * of the best k so far with the worst of them at its root. */
static void sample_top_k(sample_cand *cand, int n, int k) {
    for (int i = 0; i < n; i++) {
        sample_cand c = cand[i];
        int j;
        if (i < k) {                                 /* grow: sift up */
            for (j = i; j > 0 && cand_better(&cand[(j - 1) / 2], &c); j = (j - 1) / 2) cand[j] = cand[(j - 1) / 2];
        } else if (cand_better(&c, &cand[0])) {      /* replace the worst: sift down */
            for (j = 0;;) {
                int ch = 2 * j + 1;
                if (ch >= k) break;
                if (ch + 1 < k && cand_better(&cand[ch], &cand[ch + 1])) ch++;
                if (!cand_better(&c, &cand[ch])) break;
                cand[j] = cand[ch];
                j = ch;
            }
        } else {
            continue;
        }
        cand[j] = c;
    }
    qsort(cand, (size_t)k, sizeof *cand, cand_cmp);
}

/* prob[i] = softmax(cand[i].logit / temp) over the first n candidates. */
static void sample_softmax(const sample_cand *cand, int n, double temp, double *prob) {
    double max = -INFINITY, sum = 0;
    for (int i = 0; i < n; i++) max = cand[i].logit > max ? cand[i].logit : max;
    for (int i = 0; i < n; i++) {
        prob[i] = cand[i].logit == -INFINITY ? 0.0 : exp(((double)cand[i].logit - max) / temp);
        sum += prob[i];
    }
    for (int i = 0; i < n; i++) prob[i] /= sum;
}

/* Smallest prefix of the (sorted) candidates whose mass reaches top_p. */
static int sample_nucleus(const sample_cand *cand, int n, float top_p, double *prob) {
    if (top_p >= 1.0f) return n;
    sample_softmax(cand, n, 1.0, prob);
    double cum = 0;
    for (int i = 0; i < n; i++) {
        cum += prob[i];
        if (cum >= top_p) return i + 1;
    }
    return n;
}

int kvq_sample(kvq_sampler *s, const float *logits, int n_vocab) {
    if (!s || !logits || n_vocab < 1) return -1;
    int greedy = sample_argmax(logits, n_vocab);
    if (s->p.temp <= 0.0f || s->p.top_k == 1 || isinf(logits[greedy])) return greedy;   /* also all -inf, or a +inf */
    if (!sample_reserve(s, n_vocab)) return -1;
    for (int i = 0; i < n_vocab; i++) s->cand[i] = (sample_cand){i, sample_clean(logits[i])};
    int n = n_vocab;
    if (s->p.top_k > 0 && s->p.top_k < n_vocab) {
        sample_top_k(s->cand, n_vocab, s->p.top_k);
        n = s->p.top_k;
    } else if (s->p.top_p < 1.0f) {
        qsort(s->cand, (size_t)n_vocab, sizeof *s->cand, cand_cmp);   /* the nucleus needs order */
    }
    n = sample_nucleus(s->cand, n, s->p.top_p, s->prob);
    sample_softmax(s->cand, n, s->p.temp, s->prob);
    double u = sample_uniform(s), cum = 0;
    for (int i = 0; i < n; i++) {
        cum += s->prob[i];
        if (u < cum) return s->cand[i].id;
    }
    return s->cand[n - 1].id;                        /* rounding left u above the sum */
}

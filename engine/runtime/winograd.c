/* Tessera's CPU convolution for chains of 3x3 convolutions: Winograd F(4x4, 3x3).
 *
 * ONNX Runtime's CPU kernels compute a 3x3 convolution directly (36 multiplies per output
 * pixel and channel pair); Winograd's minimal filtering computes a 4x4 output tile from a 6x6
 * input tile with 36 multiplies per channel pair instead of 144, at the cost of two small
 * linear transforms. Activations are NHWC with the channel count padded to 16 (one AVX-512
 * register, two AVX2 ones), so every transform works on whole vectors.
 *
 * Per block of up to NT tiles along a tile row: input transform into V[36][NT][cin], 36
 * matrix products V[p] (NT x cin) . U[p] (cin x cout) into M, output transform with the bias
 * and the PRelu slope, written straight into the output. A block's V and M stay in the L2
 * cache. tw_chain_* run a whole chain of such layers streamed through rings of rows (below).
 *
 * Plain C with GCC vector extensions; the hot function is cloned for AVX-512, AVX2 and the
 * baseline, and the loader picks the one the CPU has.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define TW_VERSION 2
#define NT 24 /* tiles per block: a multiple of the 6-row micro-kernel */

typedef float v16 __attribute__((vector_size(64), aligned(4)));
typedef int32_t v16i __attribute__((vector_size(64), aligned(4)));

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CLONES
#endif

#define LD(p) (*(const v16 *)(p))
#define ST(p, v) (*(v16 *)(p) = (v))

int tw_version(void) { return TW_VERSION; }

/* g [cout][cin][3][3] -> U [36][cinp][coutp] (zero in the padding), U = G g G^T. */
void tw_weights(const float *g, int cout, int cin, int cinp, int coutp, float *U) {
    static const double G[6][3] = {{1.0 / 4, 0, 0},
                                   {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                   {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                   {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                   {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                   {0, 0, 1}};
    memset(U, 0, sizeof(float) * 36 * (size_t)cinp * coutp);
    for (int o = 0; o < cout; o++)
        for (int i = 0; i < cin; i++) {
            const float *k = g + ((size_t)o * cin + i) * 9;
            double t[6][3];
            for (int a = 0; a < 6; a++)
                for (int b = 0; b < 3; b++)
                    t[a][b] = G[a][0] * k[b] + G[a][1] * k[3 + b] + G[a][2] * k[6 + b];
            for (int a = 0; a < 6; a++)
                for (int b = 0; b < 6; b++)
                    U[((size_t)(a * 6 + b) * cinp + i) * coutp + o] =
                        (float)(t[a][0] * G[b][0] + t[a][1] * G[b][1] + t[a][2] * G[b][2]);
        }
}

static inline void bt6(const v16 d[6], v16 r[6]) {
    r[0] = 4 * d[0] - 5 * d[2] + d[4];
    r[1] = -4 * (d[1] + d[2]) + d[3] + d[4];
    r[2] = 4 * (d[1] - d[2]) - d[3] + d[4];
    r[3] = 2 * (d[3] - d[1]) - d[2] + d[4];
    r[4] = 2 * (d[1] - d[3]) - d[2] + d[4];
    r[5] = 4 * d[1] - 5 * d[3] + d[5];
}

static inline void at6(const v16 m[6], v16 o[4]) {
    v16 a = m[1] + m[2], b = m[1] - m[2], c = m[3] + m[4], d = m[3] - m[4];
    o[0] = m[0] + a + c;
    o[1] = b + 2 * d;
    o[2] = a + 4 * c;
    o[3] = b + 8 * d + m[5];
}

typedef struct {
    const float *in, *U, *bias, *slope;
    float *out;
    int H, W, cinp, coutp; /* H x W: the output's size (the input's times `up`) */
    int in_mod, out_mod;   /* rows kept in a ring of this many rows (0: the whole image) */
    int in_ld, out_ld;     /* floats from one pixel to the next (a slice of a wider tensor) */
    int up;                /* the input is read upscaled this many times (nearest) */
    int planar;            /* out is NCHW [cout][H][W], only the first `cout` channels */
    int cout;
    int nres; /* then o = o * scale[q] + res[q] for each residual, in order */
    const float *res[2];
    int res_ld[2];
    float scale[2];
} job_t;

/* R rows of V times Q vectors of 16 output channels of U, accumulated over cinp: R * Q
 * accumulators in registers (24 of AVX-512's 32). */
#define MICRO(R, Q)                                                                           \
    static inline __attribute__((always_inline)) void micro_##R##x##Q(                        \
        const float *v0, int cinp, const float *u, int coutp, float *m) {                     \
        v16 acc[R][Q];                                                                        \
        _Pragma("GCC unroll 32") for (int i = 0; i < R; i++)                                  \
            _Pragma("GCC unroll 4") for (int q = 0; q < Q; q++) acc[i][q] = (v16){0};        \
        for (int k = 0; k < cinp; k++, u += coutp) {                                          \
            v16 w[Q];                                                                         \
            _Pragma("GCC unroll 4") for (int q = 0; q < Q; q++) w[q] = LD(u + 16 * q);       \
            _Pragma("GCC unroll 32") for (int i = 0; i < R; i++) {                            \
                const float b = v0[(size_t)i * cinp + k];                                     \
                _Pragma("GCC unroll 4") for (int q = 0; q < Q; q++) acc[i][q] += b * w[q];   \
            }                                                                                 \
        }                                                                                     \
        _Pragma("GCC unroll 32") for (int i = 0; i < R; i++)                                  \
            _Pragma("GCC unroll 4") for (int q = 0; q < Q; q++)                               \
                ST(m + (size_t)i * coutp + 16 * q, acc[i][q]);                                \
    }
MICRO(6, 4)
MICRO(8, 3)
MICRO(12, 2)
MICRO(24, 1)
MICRO(1, 4)
MICRO(1, 3)
MICRO(1, 2)
MICRO(1, 1)

CLONES static void block(const job_t *j, int ty, int tx0, int nt, float *V, float *M) {
    const int H = j->H, W = j->W, cinp = j->cinp, coutp = j->coutp, up = j->up;
    const int Win = W / up;
    const float *in = j->in, *U = j->U;
    const v16 zero = {0};
    for (int t = 0; t < nt; t++) {
        const int y0 = ty * 4 - 1, x0 = (tx0 + t) * 4 - 1;
        const float *src[6][6]; /* each input pixel of the tile (NULL: the zero padding) */
        for (int i = 0; i < 6; i++) {
            const int y = y0 + i;
            for (int k = 0; k < 6; k++) {
                const int x = x0 + k;
                const int row = (j->in_mod ? (y / up) % j->in_mod : y / up);
                src[i][k] = (y >= 0 && y < H && x >= 0 && x < W)
                                ? in + ((size_t)row * Win + x / up) * j->in_ld
                                : NULL;
            }
        }
        for (int c = 0; c < cinp; c += 16) {
            v16 d[6][6], tmp[6][6];
            for (int i = 0; i < 6; i++)
                for (int k = 0; k < 6; k++) d[i][k] = src[i][k] ? LD(src[i][k] + c) : zero;
            for (int k = 0; k < 6; k++) {
                v16 col[6], r[6];
                for (int i = 0; i < 6; i++) col[i] = d[i][k];
                bt6(col, r);
                for (int i = 0; i < 6; i++) tmp[i][k] = r[i];
            }
            for (int i = 0; i < 6; i++) {
                v16 r[6];
                bt6(tmp[i], r);
                for (int k = 0; k < 6; k++) ST(V + ((size_t)(i * 6 + k) * NT + t) * cinp + c, r[k]);
            }
        }
    }
    for (int p = 0; p < 36; p++) {
        const float *Up = U + (size_t)p * cinp * coutp;
        const float *Vp = V + (size_t)p * NT * cinp;
        float *Mp = M + (size_t)p * NT * coutp;
        for (int ob = 0; ob < coutp;) {
            const int left = (coutp - ob) / 16, q = left >= 4 ? 4 : left;
            const int R = q == 4 ? 6 : q == 3 ? 8 : q == 2 ? 12 : 24;
            const float *u = Up + ob;
            int t = 0;
            for (; t + R <= nt; t += R) {
                const float *v0 = Vp + (size_t)t * cinp;
                float *m = Mp + (size_t)t * coutp + ob;
                if (q == 4) micro_6x4(v0, cinp, u, coutp, m);
                else if (q == 3) micro_8x3(v0, cinp, u, coutp, m);
                else if (q == 2) micro_12x2(v0, cinp, u, coutp, m);
                else micro_24x1(v0, cinp, u, coutp, m);
            }
            for (; t < nt; t++) {
                const float *v0 = Vp + (size_t)t * cinp;
                float *m = Mp + (size_t)t * coutp + ob;
                if (q == 4) micro_1x4(v0, cinp, u, coutp, m);
                else if (q == 3) micro_1x3(v0, cinp, u, coutp, m);
                else if (q == 2) micro_1x2(v0, cinp, u, coutp, m);
                else micro_1x1(v0, cinp, u, coutp, m);
            }
            ob += 16 * q;
        }
    }
    const size_t plane = (size_t)H * W;
    for (int t = 0; t < nt; t++) {
        const int y0 = ty * 4, x0 = (tx0 + t) * 4;
        for (int c = 0; c < coutp; c += 16) {
            v16 tmp[4][6];
            for (int k = 0; k < 6; k++) {
                v16 col[6], r[4];
                for (int i = 0; i < 6; i++) col[i] = LD(M + ((size_t)(i * 6 + k) * NT + t) * coutp + c);
                at6(col, r);
                for (int i = 0; i < 4; i++) tmp[i][k] = r[i];
            }
            const v16 bv = LD(j->bias + c);
            const v16 sv = j->slope ? LD(j->slope + c) : zero;
            for (int i = 0; i < 4 && y0 + i < H; i++) {
                v16 r[4];
                at6(tmp[i], r);
                for (int k = 0; k < 4 && x0 + k < W; k++) {
                    v16 o = r[k] + bv;
                    if (j->slope) {
                        const v16i neg = o < zero;
                        o = (v16)(((v16i)(o * sv) & neg) | ((v16i)o & ~neg));
                    }
                    const size_t px = (size_t)(y0 + i) * W + x0 + k;
                    for (int q = 0; q < j->nres; q++) o = o * j->scale[q] + LD(j->res[q] + px * j->res_ld[q] + c);
                    if (j->planar) {
                        for (int ch = 0; ch < 16 && c + ch < j->cout; ch++) j->out[(size_t)(c + ch) * plane + px] = o[ch];
                    } else {
                        const int y = j->out_mod ? (y0 + i) % j->out_mod : y0 + i;
                        ST(j->out + ((size_t)y * W + x0 + k) * j->out_ld + c, o);
                    }
                }
            }
        }
    }
}

/* ---- one convolution over a whole tensor --------------------------------------------- */

typedef struct {
    const job_t *job;
    int next; /* the next row of tiles to take (atomic) */
    int failed;
} conv_run_t;

static void *conv_worker(void *arg) {
    conv_run_t *run = arg;
    const job_t *j = run->job;
    float *V = aligned_alloc(64, sizeof(float) * 36 * NT * (size_t)j->cinp);
    float *M = aligned_alloc(64, sizeof(float) * 36 * NT * (size_t)j->coutp);
    if (V == NULL || M == NULL) {
        __atomic_store_n(&run->failed, 1, __ATOMIC_RELAXED);
    } else {
        /* Rows of tiles taken one at a time: however many threads did start, all are done. */
        const int th = (j->H + 3) / 4, tw = (j->W + 3) / 4;
        for (int ty; (ty = __atomic_fetch_add(&run->next, 1, __ATOMIC_RELAXED)) < th;)
            for (int tx = 0; tx < tw; tx += NT) block(j, ty, tx, tw - tx < NT ? tw - tx : NT, V, M);
    }
    free(V);
    free(M);
    return NULL;
}

/* One 3x3 convolution: `in` NHWC of (H/up) x (W/up) pixels `in_ld` floats apart (its first
 * cinp channels read); `out` H x W, NHWC `out_ld` apart (coutp channels written) or, with
 * `planar`, NCHW of the first `cout` channels; after the bias and the slope, each of `nres`
 * residuals (NHWC, res_ld apart, coutp channels) is added: o = o * scale + res. Returns 0, or
 * -1 (memory). */
int tw_conv(const float *U, const float *bias, const float *slope, int cinp, int coutp,
            const float *in, int in_ld, int up, float *out, int out_ld, int planar, int cout, int H,
            int W, int nres, const float *const *res, const int *res_ld, const float *scale,
            int threads) {
    if (nres < 0 || nres > 2 || up < 1 || H % up || W % up) return -1;
    job_t j = {in, U, bias, slope, out, H, W, cinp, coutp, 0, 0, in_ld, out_ld, up, planar, cout, nres,
               {NULL, NULL}, {0, 0}, {1, 1}};
    for (int q = 0; q < nres; q++) j.res[q] = res[q], j.res_ld[q] = res_ld[q], j.scale[q] = scale[q];
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    const int rows = (H + 3) / 4;
    if (threads > rows) threads = rows;
    conv_run_t run = {&j, 0, 0};
    pthread_t ids[64];
    int started = 0;
    for (int i = 1; i < threads; i++) {
        if (pthread_create(&ids[started], NULL, conv_worker, &run) != 0) break;
        started++;
    }
    conv_worker(&run);
    for (int i = 0; i < started; i++) pthread_join(ids[i], NULL);
    return run.failed ? -1 : 0;
}

/* ---- a whole chain, streamed: every layer's activations in a ring of rows ----------
 *
 * Layer l computes group g = s - 2l of `group` tile rows at step s. It reads rows of layer
 * l-1's groups g-1 .. g+1, made at steps before s, so all the layers of one step are
 * independent and one barrier a step is enough. At step s layer l-1 writes its group g+2
 * while layer l reads g-1 .. g+1: four groups live, so a ring of four groups holds them.
 * With the SRVGG ending, the last layer writes a ring too, and its group made at step s is
 * shuffled into the image at step s+1. Each thread makes a fixed share of the columns of
 * every layer, the columns it reads for the next layer, from its own cache. Instead of two
 * whole-image activations (2 x 200 MB for 1024x768 x 64 channels, faulted in at every run)
 * the chain holds 32 rows a layer. */

#define MAX_LAYERS 256

typedef struct {
    const float *U, *bias, *slope;
    int cinp, coutp;
} tw_layer;

typedef struct {
    tw_layer *layers;
    float **rings; /* rings[l]: layer l's output (the last one only with a shuffle) */
    int n, H, W, tiles_h, tiles_w, r, channels;
    int group;  /* tile rows a layer computes per step */
    int groups; /* steps of the first layer */
    int ring;   /* rows in each ring: four groups */
} tw_chain_t;

void tw_chain_free(void *p) {
    tw_chain_t *c = p;
    if (c == NULL) return;
    if (c->rings)
        for (int l = 0; l < c->n; l++) free(c->rings[l]);
    free(c->rings);
    free(c->layers);
    free(c);
}

/* The chain of n layers over an H x W image; r > 0: it ends in DepthToSpace(r) + the
 * nearest-upscaled image of `channels` channels. NULL where memory could not be had. */
void *tw_chain_new(const float *const *U, const float *const *bias, const float *const *slope,
                   const int *cinp, const int *coutp, int n, int H, int W, int r, int channels,
                   int group) {
    if (n < 1 || n > MAX_LAYERS) return NULL;
    tw_chain_t *c = calloc(1, sizeof *c);
    if (c == NULL) return NULL;
    c->n = n, c->H = H, c->W = W, c->r = r, c->channels = channels;
    c->tiles_h = (H + 3) / 4, c->tiles_w = (W + 3) / 4;
    c->group = group < 1 ? 1 : group;
    c->groups = (c->tiles_h + c->group - 1) / c->group;
    c->ring = 16 * c->group;
    c->layers = calloc(n, sizeof *c->layers);
    c->rings = calloc(n, sizeof *c->rings);
    if (c->layers == NULL || c->rings == NULL) goto fail;
    for (int l = 0; l < n; l++) {
        c->layers[l] = (tw_layer){U[l], bias[l], slope[l], cinp[l], coutp[l]};
        if (l < n - 1 || r > 0) {
            c->rings[l] = aligned_alloc(64, sizeof(float) * (size_t)c->ring * W * coutp[l]);
            if (c->rings[l] == NULL) goto fail;
        }
    }
    return c;
fail:
    tw_chain_free(c);
    return NULL;
}

int tw_chain_steps_total(const void *p) {
    const tw_chain_t *c = p;
    return c->groups + 2 * (c->n - 1) + (c->r > 0 ? 1 : 0);
}

typedef struct {
    const tw_chain_t *c;
    const float *in, *image;
    float *out;
    int s0, s1;
    pthread_barrier_t *barrier;
    int failed;
    pthread_mutex_t *gate;
    int threads; /* that run: the barrier's count */
    int joined;  /* threads that took their index (atomic) */
} run_t;

static void shuffle_rows(const tw_chain_t *c, const float *act, int mod, const float *image,
                         float *out, int row0, int row1) {
    const int r = c->r, W = c->W, coutp = c->layers[c->n - 1].coutp;
    const size_t ow = (size_t)W * r, plane = (size_t)c->H * r * ow;
    for (int ch = 0; ch < c->channels; ch++)
        for (int y = row0; y < row1; y++) {
            const float *img = image + ((size_t)ch * c->H + y) * W;
            for (int i = 0; i < r; i++) {
                float *o = out + ch * plane + ((size_t)y * r + i) * ow;
                const float *a = act + (size_t)(y % mod) * W * coutp + (size_t)ch * r * r + (size_t)i * r;
                for (int x = 0; x < W; x++, a += coutp, o += r)
                    for (int k = 0; k < r; k++) o[k] = a[k] + img[x];
            }
        }
}

static void *chain_worker(void *arg) {
    run_t *run = arg;
    pthread_mutex_lock(run->gate); /* the barrier is made */
    pthread_mutex_unlock(run->gate);
    const int me = __atomic_fetch_add(&run->joined, 1, __ATOMIC_RELAXED);
    const tw_chain_t *c = run->c;
    int widest = 16;
    for (int l = 0; l < c->n; l++) {
        if (c->layers[l].cinp > widest) widest = c->layers[l].cinp;
        if (c->layers[l].coutp > widest) widest = c->layers[l].coutp;
    }
    float *V = aligned_alloc(64, sizeof(float) * 36 * NT * (size_t)widest);
    float *M = aligned_alloc(64, sizeof(float) * 36 * NT * (size_t)widest);
    if (V == NULL || M == NULL) __atomic_store_n(&run->failed, 1, __ATOMIC_RELAXED);
    const int G = c->group;
    for (int s = run->s0; s < run->s1; s++) {
        /* This step's work: each layer's group s - 2l of tile rows, in blocks, then the
         * shuffle of the last layer's group made at the step before. */
        int rows[MAX_LAYERS]; /* tile rows of each layer's group this step (0: none) */
        for (int l = 0; l < c->n; l++) {
            const int g = s - 2 * l, t0 = g * G;
            rows[l] = (g >= 0 && t0 < c->tiles_h) ? (c->tiles_h - t0 < G ? c->tiles_h - t0 : G) : 0;
        }
        const int sg = s - 2 * (c->n - 1) - 1;
        const int shuffle_rows_n =
            (c->r > 0 && sg >= 0 && sg * G < c->tiles_h) ? (c->tiles_h - sg * G < G ? c->tiles_h - sg * G : G) : 0;
        /* A fixed share of every row for each thread: the columns a thread makes for one
         * layer are the ones it reads for the next, from its own cache. */
        if (V != NULL && M != NULL) {
            const int x0 = c->tiles_w * me / run->threads, x1 = c->tiles_w * (me + 1) / run->threads;
            for (int l = 0; l < c->n; l++) {
                const tw_layer *L = &c->layers[l];
                const int last = l == c->n - 1;
                job_t j = {l == 0 ? run->in : c->rings[l - 1],
                           L->U,
                           L->bias,
                           L->slope,
                           last && c->r == 0 ? run->out : c->rings[l],
                           c->H,
                           c->W,
                           L->cinp,
                           L->coutp,
                           l == 0 ? 0 : c->ring,
                           last && c->r == 0 ? 0 : c->ring,
                           L->cinp,
                           L->coutp,
                           1,
                           0,
                           L->coutp,
                           0,
                           {NULL, NULL},
                           {0, 0},
                           {1, 1}};
                for (int k = 0; k < rows[l]; k++)
                    for (int tx = x0; tx < x1; tx += NT)
                        block(&j, (s - 2 * l) * G + k, tx, x1 - tx < NT ? x1 - tx : NT, V, M);
            }
            for (int k = me; k < shuffle_rows_n; k += run->threads) {
                const int y0 = (sg * G + k) * 4, y1 = y0 + 4 < c->H ? y0 + 4 : c->H;
                shuffle_rows(c, c->rings[c->n - 1], c->ring, run->image, run->out, y0, y1);
            }
        }
        pthread_barrier_wait(run->barrier);
    }
    free(V);
    free(M);
    return NULL;
}

/* Steps [s0, s1) of the chain (tw_chain_steps_total in all, in order): `in` is the image
 * NHWC [H][W][cinp of layer 0]; `out` the product, NCHW [channels][H r][W r] with a
 * shuffle, else NHWC [H][W][coutp of the last layer]; `image` the NCHW input the shuffle
 * adds. The caller checks for a cancel between calls. Returns 0, or -1 (memory). */
int tw_chain_steps(void *p, const float *in, const float *image, float *out, int s0, int s1,
                   int threads) {
    tw_chain_t *c = p;
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    if (s1 <= s0) return 0;
    pthread_barrier_t barrier;
    pthread_mutex_t gate = PTHREAD_MUTEX_INITIALIZER;
    run_t run = {c, in, image, out, s0, s1, &barrier, 0, &gate, 0, 0};
    pthread_t ids[64];
    int started = 0;
    /* The barrier counts the threads that did start: they wait at the gate until it is made. */
    pthread_mutex_lock(&gate);
    for (int i = 1; i < threads; i++) {
        if (pthread_create(&ids[started], NULL, chain_worker, &run) != 0) break;
        started++;
    }
    pthread_barrier_init(&barrier, NULL, (unsigned)(started + 1));
    run.threads = started + 1;
    pthread_mutex_unlock(&gate);
    chain_worker(&run);
    for (int i = 0; i < started; i++) pthread_join(ids[i], NULL);
    pthread_barrier_destroy(&barrier);
    return run.failed ? -1 : 0;
}

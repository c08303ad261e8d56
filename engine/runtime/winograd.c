/* Tessera's CPU convolution for chains of 3x3 convolutions: Winograd F(4x4, 3x3).
 *
 * ONNX Runtime's CPU kernels compute a 3x3 convolution directly (36 multiplies per output
 * pixel and channel pair); Winograd's minimal filtering computes a 4x4 output tile from a 6x6
 * input tile with 36 multiplies per channel pair instead of 144, at the cost of two small
 * linear transforms. Activations are NHWC with the channel count padded to 16 (one AVX-512
 * register, two AVX2 ones, four SSE or NEON ones), so every transform works on whole vectors.
 *
 * Per block of up to NT tiles along a tile row: input transform into V[36][NT][cin], 36
 * matrix products V[p] (NT x cin) . U[p] (cin x cout) into M, output transform with the bias
 * and the PRelu slope, written straight into the output. A block's V and M stay in the L2
 * cache. tw_chain_* run a whole chain of such layers streamed through rings of rows (below).
 *
 * Plain C with GCC vector extensions (GCC and clang). The block is compiled once per
 * instruction set (winograd_block.h, each with its own vector width and micro-kernels sized
 * for that set's registers) and chosen at run time from what the CPU has, capped by
 * tw_set_isa. Threads and aligned memory go through the small portable layer below (POSIX
 * threads, or Windows' own: MinGW-w64 has no aligned_alloc, macOS no pthread barriers).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _WIN32
#include <malloc.h>
#include <windows.h>
#else
#include <pthread.h>
#endif

#define TW_VERSION 4
#define NT 12 /* tiles per block: a multiple of every tail micro-kernel's rows (see there) */
/* Floats from one of V's (or M's) 36 matrices to the next: NT rows, 16 more where those are
 * a multiple of 2 KB (128 channels), or the 36 stores of a tile fall on 2 sets of the L1
 * cache (that layer 21 % slower on AVX2; padding the other widths measured 0-5 % slower). */
#define TW_PSTRIDE(channels) ((size_t)NT * (channels) + ((size_t)NT * (channels) % 512 ? 0 : 16))
/* The bytes of a block's V or M for `channels`. */
#define TW_WORK(channels) (sizeof(float) * 36 * TW_PSTRIDE(channels))

/* ---- the portable layer: aligned memory, threads, a barrier ---------------------------- */

static void *tw_alloc(size_t bytes) {
#ifdef _WIN32
    return _aligned_malloc(bytes, 64);
#else
    void *p = NULL;
    return posix_memalign(&p, 64, bytes) == 0 ? p : NULL;
#endif
}

static void tw_free(void *p) {
#ifdef _WIN32
    _aligned_free(p);
#else
    free(p);
#endif
}

typedef struct {
    void (*fn)(void *);
    void *arg;
} tw_task;

#ifdef _WIN32
typedef HANDLE tw_thread;
typedef SRWLOCK tw_mutex;
typedef CONDITION_VARIABLE tw_cond;
static DWORD WINAPI tw_trampoline(LPVOID p) {
    const tw_task *t = p;
    t->fn(t->arg);
    return 0;
}
static int tw_thread_start(tw_thread *id, tw_task *task) {
    *id = CreateThread(NULL, 0, tw_trampoline, task, 0, NULL);
    return *id == NULL ? -1 : 0;
}
static void tw_thread_join(tw_thread id) {
    WaitForSingleObject(id, INFINITE);
    CloseHandle(id);
}
static void tw_mutex_init(tw_mutex *m) { InitializeSRWLock(m); }
static void tw_mutex_destroy(tw_mutex *m) { (void)m; }
static void tw_lock(tw_mutex *m) { AcquireSRWLockExclusive(m); }
static void tw_unlock(tw_mutex *m) { ReleaseSRWLockExclusive(m); }
static void tw_cond_init(tw_cond *c) { InitializeConditionVariable(c); }
static void tw_cond_destroy(tw_cond *c) { (void)c; }
static void tw_cond_wait(tw_cond *c, tw_mutex *m) { SleepConditionVariableSRW(c, m, INFINITE, 0); }
static void tw_cond_wake_all(tw_cond *c) { WakeAllConditionVariable(c); }
#else
typedef pthread_t tw_thread;
typedef pthread_mutex_t tw_mutex;
typedef pthread_cond_t tw_cond;
static void *tw_trampoline(void *p) {
    const tw_task *t = p;
    t->fn(t->arg);
    return NULL;
}
static int tw_thread_start(tw_thread *id, tw_task *task) {
    return pthread_create(id, NULL, tw_trampoline, task) == 0 ? 0 : -1;
}
static void tw_thread_join(tw_thread id) { pthread_join(id, NULL); }
static void tw_mutex_init(tw_mutex *m) { pthread_mutex_init(m, NULL); }
static void tw_mutex_destroy(tw_mutex *m) { pthread_mutex_destroy(m); }
static void tw_lock(tw_mutex *m) { pthread_mutex_lock(m); }
static void tw_unlock(tw_mutex *m) { pthread_mutex_unlock(m); }
static void tw_cond_init(tw_cond *c) { pthread_cond_init(c, NULL); }
static void tw_cond_destroy(tw_cond *c) { pthread_cond_destroy(c); }
static void tw_cond_wait(tw_cond *c, tw_mutex *m) { pthread_cond_wait(c, m); }
static void tw_cond_wake_all(tw_cond *c) { pthread_cond_broadcast(c); }
#endif

/* A reusable barrier; `count` is set before any thread waits. */
typedef struct {
    tw_mutex m;
    tw_cond c;
    int count, waiting, generation;
} tw_barrier;

static void tw_barrier_init(tw_barrier *b) {
    tw_mutex_init(&b->m);
    tw_cond_init(&b->c);
    b->count = 1, b->waiting = 0, b->generation = 0;
}

static void tw_barrier_destroy(tw_barrier *b) {
    tw_cond_destroy(&b->c);
    tw_mutex_destroy(&b->m);
}

static void tw_barrier_wait(tw_barrier *b) {
    tw_lock(&b->m);
    const int generation = b->generation;
    if (++b->waiting == b->count) {
        b->waiting = 0;
        b->generation++;
        tw_cond_wake_all(&b->c);
    } else {
        while (generation == b->generation) tw_cond_wait(&b->c, &b->m);
    }
    tw_unlock(&b->m);
}

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

/* ---- the instruction sets: one block function each ----------------------------------- */

enum { TW_BASELINE = 0, TW_AVX2 = 1, TW_AVX512 = 2, TW_NEON = 3 };

typedef void (*block_fn)(const job_t *j, int ty, int tx0, int nt, float *V, float *M);

/* Baseline: SSE2 on x86-64, 4-float vectors wherever else; 16 registers: 3 rows x 4 vectors
 * (12 accumulators), 6 x 2 for a last 8 channels. */
#define TW_ISA baseline
#define TW_TARGET
#define TW_VW 4
#define TW_R1 12
#define TW_R2 6
#define TW_R3 0
#define TW_R4 3
#define TW_T1 6
#define TW_T2 3
#define TW_T3 0
#define TW_T4 1
#include "winograd_block.h"

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#define TW_X86 1
/* AVX2 + FMA: 8-float vectors in 16 registers: 3 rows x 4 vectors = 12 accumulators (3-5 %
 * faster than the usual 6 x 2, which is kept for a last 16 channels). 16-float vectors would
 * take two registers each and AVX-512's 6 x 4 tile would spill (12x slower). */
#define TW_ISA avx2
#define TW_TARGET __attribute__((target("avx2,fma")))
#define TW_VW 8
#define TW_R1 12
#define TW_R2 6
#define TW_R3 0
#define TW_R4 3
#define TW_T1 6
#define TW_T2 3
#define TW_T3 0
#define TW_T4 1
#include "winograd_block.h"

/* AVX-512: 16-float vectors in 32 registers: up to 6 x 4 = 24 accumulators. */
#define TW_ISA avx512
#define TW_TARGET __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")))
#define TW_VW 16
#define TW_R1 12
#define TW_R2 12
#define TW_R3 8
#define TW_R4 6
#define TW_T1 4
#define TW_T2 4
#define TW_T3 4
#define TW_T4 2
#include "winograd_block.h"
#endif

#if defined(__aarch64__)
#define TW_ARM 1
/* NEON (every AArch64 CPU): 4-float vectors in 32 registers: 6 rows x 4 vectors. */
#define TW_ISA neon
#define TW_TARGET
#define TW_VW 4
#define TW_R1 12
#define TW_R2 12
#define TW_R3 8
#define TW_R4 6
#define TW_T1 4
#define TW_T2 4
#define TW_T3 4
#define TW_T4 2
#include "winograd_block.h"
#endif

/* The sets this CPU can run, one bit each (1 << TW_BASELINE ...). */
int tw_isas(void) {
    int mask = 1 << TW_BASELINE;
#ifdef TW_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) mask |= 1 << TW_AVX2;
    if ((mask & (1 << TW_AVX2)) && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        mask |= 1 << TW_AVX512;
#endif
#ifdef TW_ARM
    mask |= 1 << TW_NEON;
#endif
    return mask;
}

static int tw_cap = -1; /* the set tw_set_isa chose (-1: the CPU's best) */

/* Run `isa` from now on, as if the CPU had no more (-1: the best the CPU has). Returns 0, or
 * -1 where the CPU does not have it (nothing changes). */
int tw_set_isa(int isa) {
    if (isa != -1 && (isa < 0 || isa > TW_NEON || !(tw_isas() & (1 << isa)))) return -1;
    __atomic_store_n(&tw_cap, isa, __ATOMIC_RELAXED);
    return 0;
}

/* The set the kernel runs: the one set by tw_set_isa, else the widest the CPU has. */
int tw_active_isa(void) {
    const int cap = __atomic_load_n(&tw_cap, __ATOMIC_RELAXED);
    if (cap >= 0) return cap;
    const int mask = tw_isas();
    if (mask & (1 << TW_AVX512)) return TW_AVX512;
    if (mask & (1 << TW_AVX2)) return TW_AVX2;
    if (mask & (1 << TW_NEON)) return TW_NEON;
    return TW_BASELINE;
}

static block_fn tw_block(void) {
    switch (tw_active_isa()) {
#ifdef TW_X86
    case TW_AVX512: return block_avx512;
    case TW_AVX2: return block_avx2;
#endif
#ifdef TW_ARM
    case TW_NEON: return block_neon;
#endif
    default: return block_baseline;
    }
}

/* A block's V for up to `cinp` channels, after `cinp` zeros: the pixel the input transform
 * reads for the padding (a load where a branch a pixel and vector cost 10 % of a 64-channel
 * layer), at V - cinp for every layer's cinp. All zero at first: a block's tail
 * micro-kernel reads rows of V past its tiles (their products are not used). */
static float *tw_v_alloc(int cinp) {
    const size_t bytes = sizeof(float) * (size_t)cinp + TW_WORK(cinp);
    float *base = tw_alloc(bytes);
    if (base == NULL) return NULL;
    memset(base, 0, bytes);
    return base + cinp;
}

static void tw_v_free(float *V, int cinp) {
    if (V != NULL) tw_free(V - cinp);
}

/* ---- one convolution over a whole tensor --------------------------------------------- */

typedef struct {
    const job_t *job;
    block_fn block;
    int next; /* the next row of tiles to take (atomic) */
    int failed;
} conv_run_t;

static void conv_worker(void *arg) {
    conv_run_t *run = arg;
    const job_t *j = run->job;
    float *V = tw_v_alloc(j->cinp);
    float *M = tw_alloc(TW_WORK(j->coutp));
    if (V == NULL || M == NULL) {
        __atomic_store_n(&run->failed, 1, __ATOMIC_RELAXED);
    } else {
        /* Rows of tiles taken one at a time: however many threads did start, all are done. */
        const int th = (j->H + 3) / 4, tw = (j->W + 3) / 4;
        for (int ty; (ty = __atomic_fetch_add(&run->next, 1, __ATOMIC_RELAXED)) < th;)
            for (int tx = 0; tx < tw; tx += NT) run->block(j, ty, tx, tw - tx < NT ? tw - tx : NT, V, M);
    }
    tw_v_free(V, j->cinp);
    tw_free(M);
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
    conv_run_t run = {&j, tw_block(), 0, 0};
    tw_task task = {conv_worker, &run};
    tw_thread ids[64];
    int started = 0;
    for (int i = 1; i < threads; i++) {
        if (tw_thread_start(&ids[started], &task) != 0) break;
        started++;
    }
    conv_worker(&run);
    for (int i = 0; i < started; i++) tw_thread_join(ids[i]);
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
    int up;     /* the first layer reads its input upscaled this many times (nearest) */
    int group;  /* tile rows a layer computes per step */
    int groups; /* steps of the first layer */
    int ring;   /* rows in each ring: four groups */
} tw_chain_t;

void tw_chain_free(void *p) {
    tw_chain_t *c = p;
    if (c == NULL) return;
    if (c->rings)
        for (int l = 0; l < c->n; l++) tw_free(c->rings[l]);
    free(c->rings);
    free(c->layers);
    free(c);
}

/* The chain of n layers making an H x W image; r > 0: it ends in DepthToSpace(r) + the
 * nearest-upscaled image of `channels` channels; r == 0 and channels > 0: the last layer
 * writes its first `channels` channels NCHW. The first layer reads its input `up` times
 * upscaled (H and W are multiples of it). NULL where memory could not be had. */
void *tw_chain_new(const float *const *U, const float *const *bias, const float *const *slope,
                   const int *cinp, const int *coutp, int n, int H, int W, int r, int channels,
                   int group, int up) {
    if (n < 1 || n > MAX_LAYERS || up < 1 || H % up || W % up) return NULL;
    tw_chain_t *c = calloc(1, sizeof *c);
    if (c == NULL) return NULL;
    c->n = n, c->H = H, c->W = W, c->r = r, c->channels = channels, c->up = up;
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
            c->rings[l] = tw_alloc(sizeof(float) * (size_t)c->ring * W * coutp[l]);
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

/* One thread's share of a step, taken item by item (atomic): its owner takes it from the
 * front, and a thread done with its own share takes what is left of the others'. A share
 * is the owner's columns of every layer, so without stealing a thread reads for one layer
 * the columns it made for the last from its own cache; with it, a thread the system put
 * aside (a PNG writer beside the run, another program) does not hold the others at the
 * step's barrier. Two sets of counters: step s uses set s % 2 while each thread clears its
 * own counter of the other set, which nobody touches again until the barrier is passed. */
typedef struct {
    int next;
    char pad[64 - sizeof(int)];
} tw_share;

typedef struct {
    const tw_chain_t *c;
    const float *in, *image;
    float *out;
    int s0, s1;
    block_fn block;
    tw_barrier *barrier; /* its mutex is the gate: held until the barrier's count is set */
    int failed;
    int threads; /* that run: the barrier's count */
    int joined;  /* threads that took their index (atomic) */
    tw_share shares[2][64];
    job_t *jobs; /* each layer's convolution in this call (layer_job), made once */
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

/* What one step asks of the chain: each layer's tile rows this step (0: none) and the
 * rows of tiles shuffled into the image. */
typedef struct {
    int rows[MAX_LAYERS];
    int all_rows; /* the sum of rows[] */
    int sg;       /* the last layer's group shuffled this step */
    int shuffle;  /* its rows of tiles (0: none) */
} step_t;

static void step_plan(const tw_chain_t *c, int s, step_t *st) {
    const int G = c->group;
    st->all_rows = 0;
    for (int l = 0; l < c->n; l++) {
        const int g = s - 2 * l, t0 = g * G;
        st->rows[l] = (g >= 0 && t0 < c->tiles_h) ? (c->tiles_h - t0 < G ? c->tiles_h - t0 : G) : 0;
        st->all_rows += st->rows[l];
    }
    st->sg = s - 2 * (c->n - 1) - 1;
    st->shuffle = (c->r > 0 && st->sg >= 0 && st->sg * G < c->tiles_h)
                      ? (c->tiles_h - st->sg * G < G ? c->tiles_h - st->sg * G : G)
                      : 0;
}

static job_t layer_job(const tw_chain_t *c, int l, const float *in, float *out) {
    const tw_layer *L = &c->layers[l];
    const int last = l == c->n - 1, planar = last && c->r == 0 && c->channels > 0;
    return (job_t){l == 0 ? in : c->rings[l - 1],
                   L->U,
                   L->bias,
                   L->slope,
                   last && c->r == 0 ? out : c->rings[l],
                   c->H,
                   c->W,
                   L->cinp,
                   L->coutp,
                   l == 0 ? 0 : c->ring,
                   last && c->r == 0 ? 0 : c->ring,
                   L->cinp,
                   L->coutp,
                   l == 0 ? c->up : 1,
                   planar,
                   planar ? c->channels : L->coutp,
                   0,
                   {NULL, NULL},
                   {0, 0},
                   {1, 1}};
}

/* Thread t's columns of tiles [x0, x1), in `blocks` blocks of NT: the same in every step. */
typedef struct {
    int x0, x1, blocks;
} tw_cols;

static tw_cols share_cols(const run_t *run, int t) {
    const int x0 = run->c->tiles_w * t / run->threads, x1 = run->c->tiles_w * (t + 1) / run->threads;
    return (tw_cols){x0, x1, (x1 - x0 + NT - 1) / NT};
}

/* Thread t's share of step s, in order: each layer's rows, a block of NT tiles of t's
 * columns at a time; then the shuffle's rows k = t, t + threads, ... */
static int share_items(const run_t *run, const step_t *st, int t) {
    const int shuffles = t < st->shuffle ? (st->shuffle - t + run->threads - 1) / run->threads : 0;
    return st->all_rows * share_cols(run, t).blocks + shuffles;
}

static void share_item(const run_t *run, const step_t *st, int s, int t, int item, float *V, float *M) {
    const tw_chain_t *c = run->c;
    const tw_cols cols = share_cols(run, t);
    if (item < st->all_rows * cols.blocks) {
        int l = 0;
        while (item >= st->rows[l] * cols.blocks) item -= st->rows[l++] * cols.blocks;
        const int k = item / cols.blocks, tx = cols.x0 + item % cols.blocks * NT;
        const int nt = cols.x1 - tx < NT ? cols.x1 - tx : NT;
        run->block(&run->jobs[l], (s - 2 * l) * c->group + k, tx, nt, V, M);
        return;
    }
    const int k = t + (item - st->all_rows * cols.blocks) * run->threads;
    const int y0 = (st->sg * c->group + k) * 4, y1 = y0 + 4 < c->H ? y0 + 4 : c->H;
    shuffle_rows(c, c->rings[c->n - 1], c->ring, run->image, run->out, y0, y1);
}

static void chain_worker(void *arg) {
    run_t *run = arg;
    tw_lock(&run->barrier->m); /* the barrier's count is set */
    tw_unlock(&run->barrier->m);
    const int me = __atomic_fetch_add(&run->joined, 1, __ATOMIC_RELAXED);
    const tw_chain_t *c = run->c;
    int widest = 16;
    for (int l = 0; l < c->n; l++) {
        if (c->layers[l].cinp > widest) widest = c->layers[l].cinp;
        if (c->layers[l].coutp > widest) widest = c->layers[l].coutp;
    }
    float *V = tw_v_alloc(widest);
    float *M = tw_alloc(TW_WORK(widest));
    if (V == NULL || M == NULL) __atomic_store_n(&run->failed, 1, __ATOMIC_RELAXED);
    step_t st;
    for (int s = run->s0; s < run->s1; s++) {
        /* This step's work: each layer's group s - 2l of tile rows, in blocks, then the
         * shuffle of the last layer's group made at the step before; all of it independent. */
        step_plan(c, s, &st);
        tw_share *shares = run->shares[s % 2];
        __atomic_store_n(&run->shares[(s + 1) % 2][me].next, 0, __ATOMIC_RELAXED);
        if (V != NULL && M != NULL && !__atomic_load_n(&run->failed, __ATOMIC_RELAXED)) {
            for (int k = 0; k < run->threads; k++) { /* its own share first, then the others' */
                const int t = (me + k) % run->threads, items = share_items(run, &st, t);
                for (int i; (i = __atomic_fetch_add(&shares[t].next, 1, __ATOMIC_RELAXED)) < items;)
                    share_item(run, &st, s, t, i, V, M);
            }
        }
        tw_barrier_wait(run->barrier);
    }
    tw_v_free(V, widest);
    tw_free(M);
}

/* Steps [s0, s1) of the chain (tw_chain_steps_total in all, in order): `in` is the image
 * NHWC [H/up][W/up][cinp of layer 0]; `out` the product, NCHW [channels][H r][W r] with a
 * shuffle, NCHW [channels][H][W] where planar, else NHWC [H][W][coutp of the last layer];
 * `image` the NCHW input the shuffle adds. The caller checks for a cancel between calls. Returns 0, or -1 (memory). */
int tw_chain_steps(void *p, const float *in, const float *image, float *out, int s0, int s1,
                   int threads) {
    tw_chain_t *c = p;
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    if (s1 <= s0) return 0;
    job_t *jobs = malloc(sizeof *jobs * (size_t)c->n);
    if (jobs == NULL) return -1;
    for (int l = 0; l < c->n; l++) jobs[l] = layer_job(c, l, in, out);
    tw_barrier barrier;
    tw_barrier_init(&barrier);
    run_t run = {c, in, image, out, s0, s1, tw_block(), &barrier, 0, 0, 0, {{{0}}}, jobs};
    tw_task task = {chain_worker, &run};
    tw_thread ids[64];
    int started = 0;
    /* The barrier counts the threads that did start: they wait at its mutex until it is set. */
    tw_lock(&barrier.m);
    for (int i = 1; i < threads; i++) {
        if (tw_thread_start(&ids[started], &task) != 0) break;
        started++;
    }
    barrier.count = started + 1;
    run.threads = started + 1;
    tw_unlock(&barrier.m);
    chain_worker(&run);
    for (int i = 0; i < started; i++) tw_thread_join(ids[i]);
    tw_barrier_destroy(&barrier);
    free(jobs);
    return run.failed ? -1 : 0;
}

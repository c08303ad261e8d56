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
 * cache. Threads take blocks from one atomic counter.
 *
 * Plain C with GCC vector extensions; the hot function is cloned for AVX-512, AVX2 and the
 * baseline, and the loader picks the one the CPU has.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define TW_VERSION 1
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
    int H, W, cinp, coutp, tiles_w, blocks_w, blocks;
    int next; /* the next block to take (atomic) */
    int failed;
} job_t;

CLONES static void block(const job_t *j, int ty, int tx0, int nt, float *V, float *M) {
    const int H = j->H, W = j->W, cinp = j->cinp, coutp = j->coutp;
    const float *in = j->in, *U = j->U;
    const v16 zero = {0};
    for (int t = 0; t < nt; t++) {
        const int y0 = ty * 4 - 1, x0 = (tx0 + t) * 4 - 1;
        for (int c = 0; c < cinp; c += 16) {
            v16 d[6][6], tmp[6][6];
            for (int i = 0; i < 6; i++) {
                const int y = y0 + i;
                for (int k = 0; k < 6; k++) {
                    const int x = x0 + k;
                    d[i][k] = (y >= 0 && y < H && x >= 0 && x < W)
                                  ? LD(in + ((size_t)y * W + x) * cinp + c)
                                  : zero;
                }
            }
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
        for (int ob = 0; ob < coutp; ob += 64) {
            const int nv = coutp - ob >= 64 ? 4 : (coutp - ob) / 16;
            for (int t = 0; t < nt; t += 6) {
                const int tn = nt - t < 6 ? nt - t : 6;
                const float *v0 = Vp + (size_t)t * cinp;
                float *m = Mp + (size_t)t * coutp + ob;
                if (nv == 4 && tn == 6) {
                    v16 a00 = zero, a01 = zero, a02 = zero, a03 = zero, a10 = zero, a11 = zero,
                        a12 = zero, a13 = zero, a20 = zero, a21 = zero, a22 = zero, a23 = zero,
                        a30 = zero, a31 = zero, a32 = zero, a33 = zero, a40 = zero, a41 = zero,
                        a42 = zero, a43 = zero, a50 = zero, a51 = zero, a52 = zero, a53 = zero;
                    for (int k = 0; k < cinp; k++) {
                        const float *u = Up + (size_t)k * coutp + ob;
                        const v16 u0 = LD(u), u1 = LD(u + 16), u2 = LD(u + 32), u3 = LD(u + 48);
                        float b;
                        b = v0[k];
                        a00 += b * u0, a01 += b * u1, a02 += b * u2, a03 += b * u3;
                        b = v0[cinp + k];
                        a10 += b * u0, a11 += b * u1, a12 += b * u2, a13 += b * u3;
                        b = v0[2 * cinp + k];
                        a20 += b * u0, a21 += b * u1, a22 += b * u2, a23 += b * u3;
                        b = v0[3 * cinp + k];
                        a30 += b * u0, a31 += b * u1, a32 += b * u2, a33 += b * u3;
                        b = v0[4 * cinp + k];
                        a40 += b * u0, a41 += b * u1, a42 += b * u2, a43 += b * u3;
                        b = v0[5 * cinp + k];
                        a50 += b * u0, a51 += b * u1, a52 += b * u2, a53 += b * u3;
                    }
                    ST(m, a00), ST(m + 16, a01), ST(m + 32, a02), ST(m + 48, a03), m += coutp;
                    ST(m, a10), ST(m + 16, a11), ST(m + 32, a12), ST(m + 48, a13), m += coutp;
                    ST(m, a20), ST(m + 16, a21), ST(m + 32, a22), ST(m + 48, a23), m += coutp;
                    ST(m, a30), ST(m + 16, a31), ST(m + 32, a32), ST(m + 48, a33), m += coutp;
                    ST(m, a40), ST(m + 16, a41), ST(m + 32, a42), ST(m + 48, a43), m += coutp;
                    ST(m, a50), ST(m + 16, a51), ST(m + 32, a52), ST(m + 48, a53);
                } else {
                    for (int i = 0; i < tn; i++)
                        for (int q = 0; q < nv; q++) {
                            v16 acc = zero;
                            const float *vr = v0 + (size_t)i * cinp;
                            for (int k = 0; k < cinp; k++)
                                acc += vr[k] * LD(Up + (size_t)k * coutp + ob + 16 * q);
                            ST(m + (size_t)i * coutp + 16 * q, acc);
                        }
                }
            }
        }
    }
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
                    ST(j->out + ((size_t)(y0 + i) * W + x0 + k) * coutp + c, o);
                }
            }
        }
    }
}

static void *worker(void *arg) {
    job_t *j = arg;
    float *V = aligned_alloc(64, sizeof(float) * 36 * NT * (size_t)j->cinp);
    float *M = aligned_alloc(64, sizeof(float) * 36 * NT * (size_t)j->coutp);
    if (V == NULL || M == NULL) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
    } else {
        for (;;) {
            const int b = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
            if (b >= j->blocks) break;
            const int ty = b / j->blocks_w, tx0 = (b % j->blocks_w) * NT;
            const int nt = j->tiles_w - tx0 < NT ? j->tiles_w - tx0 : NT;
            block(j, ty, tx0, nt, V, M);
        }
    }
    free(V);
    free(M);
    return NULL;
}

/* out[H][W][coutp] = prelu(conv3x3(in[H][W][cinp], pad 1) + bias, slope); slope may be NULL
 * (no activation). cinp and coutp are multiples of 16; bias and slope have coutp entries.
 * Returns 0, or -1 where memory for the work buffers could not be had. */
int tw_conv(const float *in, int H, int W, int cinp, const float *U, const float *bias,
            const float *slope, int coutp, float *out, int threads) {
    job_t j = {in, U, bias, slope, out, H, W, cinp, coutp, 0, 0, 0, 0, 0};
    j.tiles_w = (W + 3) / 4;
    j.blocks_w = (j.tiles_w + NT - 1) / NT;
    j.blocks = ((H + 3) / 4) * j.blocks_w;
    if (threads < 1) threads = 1;
    if (threads > j.blocks) threads = j.blocks > 0 ? j.blocks : 1;
    pthread_t ids[64];
    int started = 0;
    for (int i = 1; i < threads && i < 64; i++)
        if (pthread_create(&ids[started], NULL, worker, &j) == 0) started++;
    worker(&j);
    for (int i = 0; i < started; i++) pthread_join(ids[i], NULL);
    return j.failed ? -1 : 0;
}

/* The light models' tail in one pass: out[c][y*r+i][x*r+j] = act[y][x][c*r*r + i*r + j] +
 * image[c][y][x] (DepthToSpace in CRD order plus the nearest-upscaled input), written NCHW.
 * Rows [row0, row1) of the input's rows, so callers can split the work. */
void tw_shuffle_add(const float *act, int H, int W, int coutp, int r, int channels,
                    const float *image, float *out, int row0, int row1) {
    const size_t ow = (size_t)W * r, plane = (size_t)H * r * ow;
    for (int c = 0; c < channels; c++)
        for (int y = row0; y < row1; y++) {
            const float *img = image + ((size_t)c * H + y) * W;
            for (int i = 0; i < r; i++) {
                float *o = out + c * plane + ((size_t)y * r + i) * ow;
                const float *a = act + (size_t)y * W * coutp + (size_t)c * r * r + (size_t)i * r;
                for (int x = 0; x < W; x++, a += coutp, o += r)
                    for (int j = 0; j < r; j++) o[j] = a[j] + img[x];
            }
        }
}

/* The kernel (engine/runtime/winograd.c) against a float64 direct convolution, on every
 * instruction set this CPU has: one convolution over odd sizes and channel counts (upscaled
 * input, PRelu, residuals, planar output) and a streamed chain ending in the pixel shuffle.
 * Built and run by scripts/check_kernel_builds.sh natively, under AddressSanitizer and
 * UBSan, for aarch64 under qemu-aarch64 and for an AVX2-only CPU under qemu-x86_64 -cpu
 * Haswell. `--expect NAME`: fail unless the kernel picks NAME by itself on this CPU.
 * Exit 0: all within tolerance. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tw_isas(void);
int tw_set_isa(int isa);
int tw_active_isa(void);
void tw_weights(const float *g, int cout, int cin, int cinp, int coutp, float *U);
int tw_conv(const float *U, const float *bias, const float *slope, int cinp, int coutp,
            const float *in, int in_ld, int up, float *out, int out_ld, int planar, int cout, int H,
            int W, int nres, const float *const *res, const int *res_ld, const float *scale,
            int threads);
void *tw_chain_new(const float *const *U, const float *const *bias, const float *const *slope,
                   const int *cinp, const int *coutp, int n, int H, int W, int r, int channels,
                   int group, int up);
int tw_chain_steps_total(const void *p);
int tw_chain_steps(void *p, const float *in, const float *image, float *out, int s0, int s1,
                   int threads);
void tw_chain_free(void *p);

static const char *NAMES[] = {"baseline", "avx2", "avx512", "neon"};
static unsigned seed = 12345;
static float rnd(void) { /* uniform in [-1, 1) */
    seed = seed * 1103515245u + 12345u;
    return (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
}
static int pad16(int c) { return (c + 15) / 16 * 16; }
static float *floats(size_t n) {
    float *p = calloc(n ? n : 1, sizeof(float));
    if (p == NULL) exit(3);
    return p;
}

/* float64 3x3 convolution, pad 1, of `in` (h/up x w/up, NHWC `ld` apart) read upscaled. */
static void reference(const float *g, const float *bias, const float *slope, int cin, int cout,
                      const float *in, int ld, int up, int h, int w, double *out) {
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int o = 0; o < cout; o++) {
                double s = bias[o];
                for (int dy = 0; dy < 3; dy++)
                    for (int dx = 0; dx < 3; dx++) {
                        const int yy = y + dy - 1, xx = x + dx - 1;
                        if (yy < 0 || yy >= h || xx < 0 || xx >= w) continue;
                        const float *p = in + ((size_t)(yy / up) * (w / up) + xx / up) * ld;
                        for (int i = 0; i < cin; i++) s += (double)p[i] * g[((o * cin + i) * 3 + dy) * 3 + dx];
                    }
                if (slope && s < 0) s *= slope[o];
                out[((size_t)y * w + x) * cout + o] = s;
            }
}

static int close_enough(double got, double want, double scale, const char *what) {
    if (fabs(got - want) <= 1e-4 * scale + 1e-5 * fabs(want) && got == got) return 1;
    fprintf(stderr, "%s: %g, float64 says %g\n", what, got, want);
    return 0;
}

static int check_conv(int cin, int cout, int h, int w, int up, int use_slope, int nres, int planar,
                      int threads) {
    const int cinp = pad16(cin), coutp = pad16(cout), ld = cinp + 16; /* a slice of a wider one */
    float *g = floats((size_t)cout * cin * 9), *bias = floats(coutp), *slope = floats(coutp);
    for (size_t i = 0; i < (size_t)cout * cin * 9; i++) g[i] = rnd() * 0.3f;
    for (int o = 0; o < cout; o++) bias[o] = rnd(), slope[o] = rnd() * 0.5f;
    float *U = floats((size_t)36 * cinp * coutp);
    tw_weights(g, cout, cin, cinp, coutp, U);
    float *in = floats((size_t)(h / up) * (w / up) * ld);
    for (int p = 0; p < (h / up) * (w / up); p++)
        for (int i = 0; i < cin; i++) in[(size_t)p * ld + i] = rnd();
    float *res[2] = {floats((size_t)h * w * coutp), floats((size_t)h * w * coutp)};
    const int res_ld[2] = {coutp, coutp};
    const float scale[2] = {0.5f, 2.0f};
    for (size_t i = 0; i < (size_t)h * w * coutp; i++) res[0][i] = rnd(), res[1][i] = rnd();
    float *out = floats((size_t)h * w * coutp);
    if (tw_conv(U, bias, use_slope ? slope : NULL, cinp, coutp, in, ld, up, out, planar ? 0 : coutp,
                planar, cout, h, w, nres, (const float *const *)res, res_ld, scale, threads)) {
        fprintf(stderr, "tw_conv failed\n");
        return 0;
    }
    double *want = malloc(sizeof(double) * (size_t)h * w * cout);
    reference(g, bias, use_slope ? slope : NULL, cin, cout, in, ld, up, h, w, want);
    int ok = 1;
    for (int p = 0; p < h * w && ok; p++)
        for (int o = 0; o < cout && ok; o++) {
            double v = want[(size_t)p * cout + o];
            for (int q = 0; q < nres; q++) v = v * scale[q] + res[q][(size_t)p * coutp + o];
            const double got = planar ? out[(size_t)o * h * w + p] : out[(size_t)p * coutp + o];
            char what[160];
            snprintf(what, sizeof what, "conv %d->%d %dx%d up %d slope %d res %d planar %d px %d ch %d",
                     cin, cout, h, w, up, use_slope, nres, planar, p, o);
            ok = close_enough(got, v, sqrt((double)cin * 9) * 2, what);
        }
    free(g), free(bias), free(slope), free(U), free(in), free(res[0]), free(res[1]), free(out), free(want);
    return ok;
}

/* 3 -> 16 -> 20 -> 48 (PRelu between), then DepthToSpace(4) of 3 channels + the image. */
static int check_chain(int h, int w, int threads) {
    enum { N = 3, R = 4 };
    const int cin[N] = {3, 16, 20}, cout[N] = {16, 20, 48};
    float *g[N], *bias[N], *slope[N], *U[N];
    int cinp[N], coutp[N];
    for (int l = 0; l < N; l++) {
        cinp[l] = pad16(cin[l]), coutp[l] = pad16(cout[l]);
        g[l] = floats((size_t)cout[l] * cin[l] * 9), bias[l] = floats(coutp[l]);
        slope[l] = l < N - 1 ? floats(coutp[l]) : NULL;
        for (size_t i = 0; i < (size_t)cout[l] * cin[l] * 9; i++) g[l][i] = rnd() * 0.4f;
        for (int o = 0; o < cout[l]; o++) {
            bias[l][o] = rnd() * 0.1f;
            if (slope[l]) slope[l][o] = 0.2f;
        }
        U[l] = floats((size_t)36 * cinp[l] * coutp[l]);
        tw_weights(g[l], cout[l], cin[l], cinp[l], coutp[l], U[l]);
    }
    float *image = floats((size_t)3 * h * w), *in = floats((size_t)h * w * 16);
    for (int c = 0; c < 3; c++)
        for (int p = 0; p < h * w; p++) image[(size_t)c * h * w + p] = in[(size_t)p * 16 + c] = rnd();
    float *out = floats((size_t)3 * h * R * w * R);
    void *chain = tw_chain_new((const float *const *)U, (const float *const *)bias,
                               (const float *const *)slope, cinp, coutp, N, h, w, R, 3, 2, 1);
    if (chain == NULL) return 0;
    const int steps = tw_chain_steps_total(chain);
    /* In two calls, as the caller does to check for a cancel between them. */
    if (tw_chain_steps(chain, in, image, out, 0, steps / 2, threads) ||
        tw_chain_steps(chain, in, image, out, steps / 2, steps, threads))
        return 0;
    tw_chain_free(chain);
    /* The reference: layer by layer in float64 (rounded to float between layers). */
    float *act = floats((size_t)h * w * 16);
    memcpy(act, in, sizeof(float) * (size_t)h * w * 16);
    int ld = 16;
    double *tmp = NULL;
    for (int l = 0; l < N; l++) {
        tmp = realloc(tmp, sizeof(double) * (size_t)h * w * cout[l]);
        reference(g[l], bias[l], slope[l], cin[l], cout[l], act, ld, 1, h, w, tmp);
        if (l < N - 1) {
            free(act);
            act = floats((size_t)h * w * cout[l]);
            for (size_t i = 0; i < (size_t)h * w * cout[l]; i++) act[i] = (float)tmp[i];
            ld = cout[l];
        }
    }
    int ok = 1;
    const int ow = w * R;
    for (int c = 0; c < 3 && ok; c++)
        for (int y = 0; y < h * R && ok; y++)
            for (int x = 0; x < ow && ok; x++) {
                const int sy = y / R, sx = x / R, k = c * R * R + (y % R) * R + x % R;
                const double want = tmp[((size_t)sy * w + sx) * 48 + k] + image[(size_t)c * h * w + sy * w + sx];
                char what[120];
                snprintf(what, sizeof what, "chain %dx%d threads %d at c %d y %d x %d", h, w, threads, c, y, x);
                ok = close_enough(out[((size_t)c * h * R + y) * ow + x], want, 10, what);
            }
    for (int l = 0; l < N; l++) free(g[l]), free(bias[l]), free(slope[l]), free(U[l]);
    free(image), free(in), free(out), free(act), free(tmp);
    return ok;
}

/* 20 channels read 2x upscaled -> 70 -> 33 -> 3 written NCHW (PRelu between): the layers
 * narrow after a wide one, so a block's V holds a wider layer's rows before a narrower one's. */
static int check_chain_planar(int h, int w, int threads) {
    enum { N = 3, UP = 2 };
    const int cin[N] = {20, 70, 33}, cout[N] = {70, 33, 3};
    float *g[N], *bias[N], *slope[N], *U[N];
    int cinp[N], coutp[N];
    for (int l = 0; l < N; l++) {
        cinp[l] = pad16(cin[l]), coutp[l] = pad16(cout[l]);
        g[l] = floats((size_t)cout[l] * cin[l] * 9), bias[l] = floats(coutp[l]);
        slope[l] = l < N - 1 ? floats(coutp[l]) : NULL;
        for (size_t i = 0; i < (size_t)cout[l] * cin[l] * 9; i++) g[l][i] = rnd() * 0.2f;
        for (int o = 0; o < cout[l]; o++) {
            bias[l][o] = rnd() * 0.1f;
            if (slope[l]) slope[l][o] = 0.2f;
        }
        U[l] = floats((size_t)36 * cinp[l] * coutp[l]);
        tw_weights(g[l], cout[l], cin[l], cinp[l], coutp[l], U[l]);
    }
    const int H = h * UP, W = w * UP;
    float *in = floats((size_t)h * w * cinp[0]);
    for (int p = 0; p < h * w; p++)
        for (int c = 0; c < cin[0]; c++) in[(size_t)p * cinp[0] + c] = rnd();
    float *out = floats((size_t)3 * H * W);
    void *chain = tw_chain_new((const float *const *)U, (const float *const *)bias,
                               (const float *const *)slope, cinp, coutp, N, H, W, 0, 3, 2, UP);
    if (chain == NULL) return 0;
    if (tw_chain_steps(chain, in, in, out, 0, tw_chain_steps_total(chain), threads)) return 0;
    tw_chain_free(chain);
    float *act = floats((size_t)h * w * cinp[0]);
    memcpy(act, in, sizeof(float) * (size_t)h * w * cinp[0]);
    int ld = cinp[0], up = UP;
    double *tmp = NULL;
    for (int l = 0; l < N; l++) {
        tmp = realloc(tmp, sizeof(double) * (size_t)H * W * cout[l]);
        reference(g[l], bias[l], slope[l], cin[l], cout[l], act, ld, up, H, W, tmp);
        if (l < N - 1) {
            free(act);
            act = floats((size_t)H * W * cout[l]);
            for (size_t i = 0; i < (size_t)H * W * cout[l]; i++) act[i] = (float)tmp[i];
            ld = cout[l], up = 1;
        }
    }
    int ok = 1;
    for (int c = 0; c < 3 && ok; c++)
        for (int p = 0; p < H * W && ok; p++) {
            char what[120];
            snprintf(what, sizeof what, "planar chain %dx%d up %d threads %d at c %d px %d", H, W, UP, threads, c, p);
            ok = close_enough(out[(size_t)c * H * W + p], tmp[(size_t)p * 3 + c], 10, what);
        }
    for (int l = 0; l < N; l++) free(g[l]), free(bias[l]), free(slope[l]), free(U[l]);
    free(in), free(out), free(act), free(tmp);
    return ok;
}

int main(int argc, char **argv) {
    const int mask = tw_isas();
    printf("CPU sets:");
    for (int i = 0; i < 4; i++)
        if (mask >> i & 1) printf(" %s", NAMES[i]);
    printf("; picked by itself: %s\n", NAMES[tw_active_isa()]);
    if (argc == 3 && strcmp(argv[1], "--expect") == 0 && strcmp(argv[2], NAMES[tw_active_isa()]) != 0) {
        fprintf(stderr, "expected the %s path, the kernel picked %s\n", argv[2], NAMES[tw_active_isa()]);
        return 1;
    }
    if (tw_set_isa(4) == 0 || tw_set_isa(-2) == 0) {
        fprintf(stderr, "tw_set_isa took a set that does not exist\n");
        return 1;
    }
    int failed = 0;
    for (int isa = 0; isa < 4; isa++) {
        if (!(mask >> isa & 1)) {
            if (tw_set_isa(isa) == 0) fprintf(stderr, "%s: taken without the CPU having it\n", NAMES[isa]), failed = 1;
            continue;
        }
        if (tw_set_isa(isa) != 0 || tw_active_isa() != isa) {
            fprintf(stderr, "%s: could not be set\n", NAMES[isa]);
            failed = 1;
            continue;
        }
        int ok = 1;
        ok &= check_conv(3, 3, 1, 1, 1, 0, 0, 0, 1);
        ok &= check_conv(3, 16, 5, 7, 1, 1, 0, 0, 2);
        ok &= check_conv(20, 3, 13, 9, 1, 1, 1, 1, 3);
        ok &= check_conv(16, 48, 10, 18, 2, 1, 2, 0, 2);
        ok &= check_conv(64, 64, 9, 30, 1, 1, 1, 0, 4);
        ok &= check_conv(40, 27, 7, 61, 1, 0, 0, 1, 1);
        ok &= check_chain(9, 13, 1);
        ok &= check_chain(23, 17, 3);
        ok &= check_chain(41, 70, 4); /* shares of many items: taken by whichever thread is free */
        ok &= check_chain(10, 5, 3);  /* more threads than columns of tiles: empty shares */
        ok &= check_chain_planar(7, 30, 1);
        ok &= check_chain_planar(12, 9, 2);
        printf("%s: %s\n", NAMES[isa], ok ? "ok" : "FAILED");
        failed |= !ok;
    }
    tw_set_isa(-1);
    return failed;
}

/* One instruction set's Winograd block (winograd.c includes this once per set).
 *
 * Before including: TW_ISA (the suffix of the names), TW_TARGET (the function attribute that
 * lets the compiler use the set; empty for the baseline), TW_VW (floats per vector) and the
 * micro-kernel shapes TW_R1 .. TW_R4: rows of V per call for 1 .. 4 vectors of output
 * channels (0: not used). R * Q accumulators plus Q weights and a broadcast must fit the
 * set's registers (16 on AVX2 and SSE, 32 on AVX-512 and NEON), or the accumulators spill. */

#define TW_CAT2(a, b) a##_##b
#define TW_CAT(a, b) TW_CAT2(a, b)
#define VEC TW_CAT(vec, TW_ISA)
#define VECI TW_CAT(veci, TW_ISA)
#define TW_FN(name) TW_CAT(name, TW_ISA)
#define TW_INLINE static inline __attribute__((always_inline)) TW_TARGET

typedef float VEC __attribute__((vector_size(4 * TW_VW), aligned(4)));
typedef int32_t VECI __attribute__((vector_size(4 * TW_VW), aligned(4)));

/* B^T d with its common terms shared: 12 operations where the textbook form takes 22. */
TW_INLINE void TW_FN(bt6)(const VEC d[6], VEC r[6]) {
    const VEC a = d[4] - 4 * d[2], b = d[3] - 4 * d[1], c = d[4] - d[2], e = d[3] - d[1];
    r[0] = 4 * d[0] + (d[4] - 5 * d[2]);
    r[1] = a + b;
    r[2] = a - b;
    r[3] = c + 2 * e;
    r[4] = c - 2 * e;
    r[5] = 4 * d[1] + (d[5] - 5 * d[3]);
}

TW_INLINE void TW_FN(at6)(const VEC m[6], VEC o[4]) {
    VEC a = m[1] + m[2], b = m[1] - m[2], c = m[3] + m[4], d = m[3] - m[4];
    o[0] = m[0] + a + c;
    o[1] = b + 2 * d;
    o[2] = a + 4 * c;
    o[3] = b + 8 * d + m[5];
}

/* R rows of V times Q vectors of output channels of U, accumulated over cinp. */
#define TW_MICRO(R, Q)                                                                        \
    TW_INLINE void TW_FN(micro_##R##x##Q)(const float *v0, int cinp, const float *u, int coutp, \
                                          float *m) {                                         \
        VEC acc[R][Q];                                                                        \
        _Pragma("GCC unroll 32") for (int i = 0; i < R; i++)                                  \
            _Pragma("GCC unroll 4") for (int q = 0; q < Q; q++) acc[i][q] = (VEC){0};        \
        for (int k = 0; k < cinp; k++, u += coutp) {                                          \
            VEC w[Q];                                                                         \
            _Pragma("GCC unroll 4") for (int q = 0; q < Q; q++) w[q] =                        \
                *(const VEC *)(u + TW_VW * q);                                                \
            _Pragma("GCC unroll 32") for (int i = 0; i < R; i++) {                            \
                const float b = v0[(size_t)i * cinp + k];                                     \
                _Pragma("GCC unroll 4") for (int q = 0; q < Q; q++) acc[i][q] += b * w[q];   \
            }                                                                                 \
        }                                                                                     \
        _Pragma("GCC unroll 32") for (int i = 0; i < R; i++)                                  \
            _Pragma("GCC unroll 4") for (int q = 0; q < Q; q++)                               \
                *(VEC *)(m + (size_t)i * coutp + TW_VW * q) = acc[i][q];                      \
    }
#define TW_MICRO_PAIR(R, T, Q) TW_MICRO(R, Q) TW_MICRO(T, Q)

#if TW_R1
TW_MICRO_PAIR(TW_R1, TW_T1, 1)
#endif
#if TW_R2
TW_MICRO_PAIR(TW_R2, TW_T2, 2)
#endif
#if TW_R3
TW_MICRO_PAIR(TW_R3, TW_T3, 3)
#endif
#if TW_R4
TW_MICRO_PAIR(TW_R4, TW_T4, 4)
#endif

/* A block's tail runs T-row kernels past its last tile, up to NT rows: NT must be a multiple
 * of each T (and each T of its R, where the main kernels stop). */
_Static_assert(NT % TW_T1 == 0 && TW_R1 % TW_T1 == 0, "NT, R1 and T1");
#if TW_R2
_Static_assert(NT % TW_T2 == 0 && TW_R2 % TW_T2 == 0, "NT, R2 and T2");
#endif
#if TW_R3
_Static_assert(NT % TW_T3 == 0 && TW_R3 % TW_T3 == 0, "NT, R3 and T3");
#endif
#if TW_R4
_Static_assert(NT % TW_T4 == 0 && TW_R4 % TW_T4 == 0, "NT, R4 and T4");
#endif

#define TW_MNAME3(R, Q) TW_FN(micro_##R##x##Q)
#define TW_MNAME(R, Q) TW_MNAME3(R, Q)

TW_TARGET static void TW_FN(block)(const job_t *j, int ty, int tx0, int nt, float *V, float *M) {
    const int H = j->H, W = j->W, cinp = j->cinp, coutp = j->coutp, up = j->up;
    const int Win = W / up;
    const float *in = j->in, *U = j->U;
    const VEC zero = {0};
    const float *zeros = V - cinp; /* a pixel of zeros before V: the padding */
    /* The block's 6 input rows (NULL: the padding) and its columns' offsets (-1: the
     * padding), each worked out once: per pixel, the ring's and the upscale's divisions cost
     * as much as a 64-channel tile's transform. */
    const float *rows[6];
    for (int i = 0; i < 6; i++) {
        const int y = ty * 4 - 1 + i;
        rows[i] = y >= 0 && y < H
                      ? in + (size_t)(j->in_mod ? (y / up) % j->in_mod : y / up) * Win * j->in_ld
                      : NULL;
    }
    const int xs = tx0 * 4 - 1, xn = 4 * nt + 6; /* the block's columns, and the next tile's */
    ptrdiff_t cols[4 * NT + 6];
    for (int k = 0; k < xn; k++) {
        const int x = xs + k;
        cols[k] = x >= 0 && x < W ? (ptrdiff_t)(x / up) * j->in_ld : -1;
    }
    for (int t = 0; t < nt; t++) {
        const float *src[6][6]; /* each input pixel of the tile (the padding: a zero pixel) */
        for (int i = 0; i < 6; i++)
            for (int k = 0; k < 6; k++)
                src[i][k] = rows[i] && cols[4 * t + k] >= 0 ? rows[i] + cols[4 * t + k] : zeros;
        /* The next tile's new pixels (its columns 2..5), fetched while this one is
         * transformed: 36 pixels a tile are too many streams for the CPU's own prefetcher.
         * After the block's last tile, the next block's first (where the row goes on). */
        const float *next[6][4];
        for (int i = 0; i < 6; i++)
            for (int k = 0; k < 4; k++) {
                const int x = 4 * t + 6 + k;
                next[i][k] = rows[i] && x < xn && cols[x] >= 0 ? rows[i] + cols[x] : zeros;
            }
        for (int c = 0; c < cinp; c += TW_VW) {
            if (c % 16 == 0)
                for (int i = 0; i < 6; i++)
                    for (int k = 0; k < 4; k++) __builtin_prefetch(next[i][k] + c, 0, 3);
            VEC tmp[6][6];
            for (int k = 0; k < 6; k++) {
                VEC col[6], r[6];
                for (int i = 0; i < 6; i++) col[i] = *(const VEC *)(src[i][k] + c);
                TW_FN(bt6)(col, r);
                for (int i = 0; i < 6; i++) tmp[i][k] = r[i];
            }
            for (int i = 0; i < 6; i++) {
                VEC r[6];
                TW_FN(bt6)(tmp[i], r);
                for (int k = 0; k < 6; k++)
                    *(VEC *)(V + (size_t)(i * 6 + k) * TW_PSTRIDE(cinp) + (size_t)t * cinp + c) = r[k];
            }
        }
    }
    for (int p = 0; p < 36; p++) {
        const float *Up = U + (size_t)p * cinp * coutp;
        const float *Vp = V + (size_t)p * TW_PSTRIDE(cinp);
        float *Mp = M + (size_t)p * TW_PSTRIDE(coutp);
        for (int ob = 0; ob < coutp;) {
            const int left = (coutp - ob) / TW_VW;
            int q = 1, R = TW_R1; /* the widest micro-kernel that fits what is left */
#if TW_R2
            if (left >= 2) q = 2, R = TW_R2;
#endif
#if TW_R3
            if (left >= 3) q = 3, R = TW_R3;
#endif
#if TW_R4
            if (left >= 4) q = 4, R = TW_R4;
#endif
            const float *u = Up + ob;
            /* Whole micro-kernels, then the tail in T-row ones (T divides R and NT): rows
             * past nt are computed from V's stale or zero rows and never read. A 1-row tail
             * ran 4x slower a row (one FMA chain a vector, latency-bound). */
            for (int t = 0; t < nt;) {
                const float *v0 = Vp + (size_t)t * cinp;
                float *m = Mp + (size_t)t * coutp + ob;
                const int whole = nt - t >= R;
#if TW_R4
                if (q == 4) whole ? TW_MNAME(TW_R4, 4)(v0, cinp, u, coutp, m) : TW_MNAME(TW_T4, 4)(v0, cinp, u, coutp, m);
#endif
#if TW_R3
                if (q == 3) whole ? TW_MNAME(TW_R3, 3)(v0, cinp, u, coutp, m) : TW_MNAME(TW_T3, 3)(v0, cinp, u, coutp, m);
#endif
#if TW_R2
                if (q == 2) whole ? TW_MNAME(TW_R2, 2)(v0, cinp, u, coutp, m) : TW_MNAME(TW_T2, 2)(v0, cinp, u, coutp, m);
#endif
                if (q == 1) whole ? TW_MNAME(TW_R1, 1)(v0, cinp, u, coutp, m) : TW_MNAME(TW_T1, 1)(v0, cinp, u, coutp, m);
                t += whole ? R : (q == 1 ? TW_T1 : q == 2 ? TW_T2 : q == 3 ? TW_T3 : TW_T4);
            }
            ob += TW_VW * q;
        }
    }
    const size_t plane = (size_t)H * W;
    for (int t = 0; t < nt; t++) {
        const int y0 = ty * 4, x0 = (tx0 + t) * 4;
        const int ni = H - y0 < 4 ? H - y0 : 4, nk = W - x0 < 4 ? W - x0 : 4;
        float *orow[4]; /* each output row's first pixel of the tile (NHWC) */
        const float *rrow[2][4];
        for (int i = 0; i < ni; i++) {
            const int y = j->out_mod ? (y0 + i) % j->out_mod : y0 + i;
            orow[i] = j->planar ? NULL : j->out + ((size_t)y * W + x0) * j->out_ld;
            for (int q = 0; q < j->nres; q++)
                rrow[q][i] = j->res[q] + ((size_t)(y0 + i) * W + x0) * j->res_ld[q];
        }
        for (int c = 0; c < coutp; c += TW_VW) {
            VEC tmp[4][6];
            for (int k = 0; k < 6; k++) {
                VEC col[6], r[4];
                for (int i = 0; i < 6; i++)
                    col[i] = *(const VEC *)(M + (size_t)(i * 6 + k) * TW_PSTRIDE(coutp) + (size_t)t * coutp + c);
                TW_FN(at6)(col, r);
                for (int i = 0; i < 4; i++) tmp[i][k] = r[i];
            }
            const VEC bv = *(const VEC *)(j->bias + c);
            const VEC sv = j->slope ? *(const VEC *)(j->slope + c) : zero;
            if (!j->planar && j->nres == 0 && nk == 4) {
                /* A whole tile, NHWC, no residual (every layer of a chain): the PRelu
                 * without branches (no slope: times 1) and straight stores, 10 % faster on
                 * a chain than the general loop below, which reloads the job's fields. */
                const VEC negs = j->slope ? sv : zero + 1;
                const size_t ld = (size_t)j->out_ld;
                for (int i = 0; i < ni; i++) {
                    VEC r[4];
                    TW_FN(at6)(tmp[i], r);
                    float *o0 = orow[i] + c;
                    for (int k = 0; k < 4; k++) {
                        const VEC o = r[k] + bv;
                        const VECI neg = o < zero;
                        *(VEC *)(o0 + k * ld) = (VEC)(((VECI)(o * negs) & neg) | ((VECI)o & ~neg));
                    }
                }
                continue;
            }
            /* The job's fields in locals: a store through a float pointer may change
             * j->scale as far as the compiler knows, and they were reloaded per pixel. */
            const int nres = j->nres;
            const float sc0 = j->scale[0], sc1 = j->scale[1];
            const size_t rl0 = (size_t)j->res_ld[0], rl1 = (size_t)j->res_ld[1];
            const VEC negs = j->slope ? sv : zero + 1;
            for (int i = 0; i < ni; i++) {
                VEC r[4];
                TW_FN(at6)(tmp[i], r);
                for (int k = 0; k < nk; k++) {
                    VEC o = r[k] + bv;
                    const VECI neg = o < zero;
                    o = (VEC)(((VECI)(o * negs) & neg) | ((VECI)o & ~neg));
                    if (nres > 0) o = o * sc0 + *(const VEC *)(rrow[0][i] + k * rl0 + c);
                    if (nres > 1) o = o * sc1 + *(const VEC *)(rrow[1][i] + k * rl1 + c);
                    if (j->planar) {
                        const size_t px = (size_t)(y0 + i) * W + x0 + k;
                        for (int ch = 0; ch < TW_VW && c + ch < j->cout; ch++)
                            j->out[(size_t)(c + ch) * plane + px] = o[ch];
                    } else {
                        *(VEC *)(orow[i] + (size_t)k * j->out_ld + c) = o;
                    }
                }
            }
        }
    }
}

#undef VEC
#undef VECI
#undef TW_FN
#undef TW_INLINE
#undef TW_MICRO
#undef TW_MICRO_PAIR
#undef TW_MNAME
#undef TW_MNAME3
#undef TW_ISA
#undef TW_TARGET
#undef TW_VW
#undef TW_R1
#undef TW_R2
#undef TW_R3
#undef TW_R4
#undef TW_T1
#undef TW_T2
#undef TW_T3
#undef TW_T4

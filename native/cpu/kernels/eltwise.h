/* elementwise.toml: Add, Mul, Gelu, FastGelu, BiasGelu, Sigmoid, QuickGelu, ReduceMean: the microkernel table each ISA path fills in (included by internal.h). */
#ifndef PB_ELTWISE_H
#define PB_ELTWISE_H
#include <stdint.h>

/* y[i] = a[i] (op) b[i], i < n (vv); y[i] = a[i] (op) b[0] (vs: b one broadcast element).
 * nt: store y with non-temporal (streaming) stores, for outputs far beyond the caches (y must
 * be aligned to its element size; the kernel peels to vector alignment and fences at its end). */
typedef void (*pb_binary_ukernel)(const void *a, const void *b, void *y, int64_t n, int nt);
/* Gelu of elements [e0, e1) of a (rows, cols) matrix; bias NULL or (cols), added per row; nt
 * as above. */
typedef void (*pb_gelu_ukernel)(const void *x, const void *bias, void *y, int64_t e0, int64_t e1, int64_t cols,
                                int nt);
/* Sigmoid family on elements [i0, i1): y = sigmoid(x) (PB_SIGMOID_PLAIN) or x * sigmoid(alpha x)
 * (PB_SIGMOID_MUL; alpha read only there); nt as above. */
typedef void (*pb_sigmoid_ukernel)(const void *x, void *y, int64_t i0, int64_t i1, float alpha, int nt);
/* Sum of elements [i0, i1) of x: f32 vector blocks, block sums added in double. */
typedef double (*pb_sum_ukernel)(const void *x, int64_t i0, int64_t i1);
/* Column means of an (R, inner) slab, columns [j0, j1): y[j] = scale * sum_r x[r, j]. */
typedef void (*pb_colmean_ukernel)(const void *x, void *y, int64_t R, int64_t inner, int64_t j0, int64_t j1,
                                   double scale);

enum { PB_BIN_ADD = 0, PB_BIN_MUL = 1, PB_BIN_COUNT = 2 };

typedef struct pb_eltwise_table {
    pb_binary_ukernel binary_vv[PB_BIN_COUNT][PB_DT_COUNT]; /* [op][dtype index] */
    pb_binary_ukernel binary_vs[PB_BIN_COUNT][PB_DT_COUNT];
    pb_gelu_ukernel gelu[2][PB_DT_COUNT]; /* [PB_GELU_ERF / PB_GELU_TANH][dtype index] */
    pb_sigmoid_ukernel sigmoid[2][PB_DT_COUNT]; /* [PB_SIGMOID_PLAIN / PB_SIGMOID_MUL][dtype index] */
    pb_sum_ukernel sum[PB_DT_COUNT];
    pb_colmean_ukernel colmean[PB_DT_COUNT];
} pb_eltwise_table;
#endif

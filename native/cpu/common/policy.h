/* The library's shared policies: how many threads a piece of work is worth, and when outputs
 * are stored non-temporally. Every family decides both through these, from one set of numbers. */
#ifndef PB_COMMON_POLICY_H
#define PB_COMMON_POLICY_H

#include <stdint.h>

/* ---- threads ----
 * Threads worth using for `work` units when each thread should get at least `grain` units
 * (pool.c). A grain is the work one more thread should get before waking it pays: with spin off
 * a sleeping worker takes ~10-20 us to join on these 2-core VMs, so each grain below is ~15-30 us
 * of one thread's work, chosen on a busy 2-core host (second thread contended; a quiet host may
 * want less). Units: elements unless named otherwise. */
int32_t pb_threads_for(int32_t max_threads, int64_t work, int64_t grain);

#define PB_GRAIN_SOFTMAX 32768   /* elements of a row-wise Softmax or RotaryEmbedding (~10 us) */
#define PB_GRAIN_CAST 131072     /* elements of a cast (a plain conversion: 4x the Softmax grain) */
#define PB_GRAIN_NORM 32768      /* elements of a LayerNormalization (~10 us) */
/* Add/Mul stream ~12 bytes per f32 element (~60-80 GB/s in L2) */
#define PB_GRAIN_BINARY 65536
/* Gelu costs ~1-3.5 cycles per element: at 65k elements a second thread measured slower than
 * one (wake cost > half); Sigmoid has the tanh Gelu's cost (one exp, one division); ReduceMean
 * only reads */
#define PB_GRAIN_GELU 131072
#define PB_GRAIN_SIGMOID 131072
#define PB_GRAIN_REDUCE 131072
#define PB_GRAIN_MOVE_BYTES (512 * 1024) /* bytes read + written by a data-movement op (~10-20 us) */
/* The attention scheduler's (GroupQueryAttention, MultiHeadAttention and ai.onnx Attention share
 * these; the values are the com.microsoft kernels' of 2026-11, unchanged when ai.onnx's driver
 * stopped carrying its own copy). */
#define PB_ATT_ROWS 64             /* target query rows (positions x grouped heads) per item */
#define PB_ATT_GRAIN 262144        /* prefill: multiply-add pairs one more thread should get */
#define PB_ATT_DECODE_GRAIN 32768  /* decode: key/value elements one more thread should stream */
#define PB_ATT_MIN_SPLIT_KEYS 256  /* a key chunk of a split item is at least this long */
#define PB_ATT_COPY_GRAIN 262144   /* elements of a KV-cache copy one more thread should get */
/* MatMul (matmul.c): multiply-adds one more thread should get, taken from the attention
 * prefill's grain, which does the same arithmetic (not yet measured for the GEMM itself); the
 * M = 1 path and B's packing: elements of B one more thread should stream (the decode grain's
 * order; not yet measured either) */
#define PB_GRAIN_MATMUL 262144
#define PB_GRAIN_GEMV 65536
/* Elements per work item of plain copies (Concat, ScatterND's copy of data, a transpose that is
 * a copy). */
#define PB_COPY_CHUNK 16384

/* ---- non-temporal stores ----
 * The last-level cache size every size policy uses: 32 MiB until the host says otherwise, which
 * it does through pb_set_llc_bytes (perfbench's loader passes timing/caches.py's
 * last_level_bytes(): sysfs, or $PERFBENCH_LLC_BYTES) -- one number for the library and for the
 * harness's cold-cache eviction. */
int64_t pb_llc_bytes(void);

/* Whether a call that reads and writes `ws` bytes in all should store its output non-temporally:
 * when ws > LLC / 3. The output is not read back by the call and would only evict its inputs;
 * streamed, it also skips the read for ownership. Measured on Zen 3/4 hosts with a 32 MiB L3
 * (threshold ~10.7 MiB), each family's own crossover lies on either side of it: Add f32 no
 * difference at 3 MiB, +20% at 12 MiB, +30-50% at 24-48 MiB; LayerNormalization plain stores win
 * at 8 MB, streaming 1.4-2x faster at 32 MB; copies 2x the bytes per second from 16 MB of output
 * (32 MB read + written). */
int pb_stream_worth(int64_t ws);

/* ---- cache blocking ----
 * The per-core L1d and L2 sizes (pb_set_core_cache_bytes; the loader passes timing/caches.py's
 * sysfs figures): the GEMM sizes one packed B micro-panel (kc x NR) to a sixteenth of the L2 or
 * half the L1d, whichever is more, and one packed A block (mc x kc) to half the L2 (matmul.c's
 * mm_blocking). */
int64_t pb_l1d_bytes(void);
int64_t pb_l2_bytes(void);

#endif

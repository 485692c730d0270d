/*
 * The library's own thread pool.
 *
 * Workers are created on first need and kept. A parallel region splits [0, ntasks) into one
 * contiguous range per participating thread; the calling thread takes range 0. After a region,
 * workers spin for `spin_us` microseconds waiting for the next one, then sleep on a condition
 * variable (spin_us = 0: they sleep at once, the "spin off" policy). pb_pool_quiesce() cuts any
 * spinning short and returns once every worker sleeps, so timed blocks of ours and ORT start
 * from the same state.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "../internal.h"

#define PB_MAX_THREADS 256

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PB_PAUSE() _mm_pause()
#else
#define PB_PAUSE() ((void)0)
#endif

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t wake;       /* workers wait here for a new generation */
    pthread_cond_t all_asleep; /* quiesce waits here */
    pthread_cond_t done;       /* the caller waits here for a region to finish */
    /* (region number << 16) | participants, published in one atomic word so a worker never
     * pairs one region's number with another region's participant count. */
    atomic_uint_fast64_t generation;
    atomic_int pending;    /* workers still running the current region */
    atomic_int asleep;     /* workers blocked in pthread_cond_wait */
    atomic_int stop_spin;  /* set by quiesce: stop spinning now */
    atomic_int spin_us;
    int created;           /* workers started (excluding the caller) */
    /* the current region */
    pb_range_fn fn;
    void *ctx;
    int64_t ntasks;
    int participants;      /* including the caller (also in the low bits of generation) */
    pthread_t threads[PB_MAX_THREADS];
    uint_fast64_t start_generation[PB_MAX_THREADS + 1]; /* generation when worker i was made */
} pb_pool;

static pb_pool g_pool = {
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .wake = PTHREAD_COND_INITIALIZER,
    .all_asleep = PTHREAD_COND_INITIALIZER,
    .done = PTHREAD_COND_INITIALIZER,
};

/* Serializes parallel regions issued from different caller threads. */
static pthread_mutex_t g_region_mu = PTHREAD_MUTEX_INITIALIZER;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void run_range(int index) {
    pb_pool *p = &g_pool;
    int64_t n = p->ntasks, parts = p->participants;
    int64_t begin = n * index / parts, end = n * (index + 1) / parts;
    if (begin < end) p->fn(p->ctx, begin, end);
}

static void *worker_main(void *arg) {
    pb_pool *p = &g_pool;
    int index = (int)(intptr_t)arg; /* 1-based: the caller is 0 */
    /* A region issued after this worker was created must not be taken as already seen. */
    uint_fast64_t seen = p->start_generation[index];
    for (;;) {
        /* spin phase */
        int spin = atomic_load(&p->spin_us);
        if (spin > 0 && !atomic_load(&p->stop_spin)) {
            int64_t deadline = now_ns() + (int64_t)spin * 1000;
            int k = 0;
            while (atomic_load(&p->generation) == seen && !atomic_load(&p->stop_spin)) {
                PB_PAUSE();
                if ((++k & 63) == 0 && now_ns() > deadline) break;
            }
        }
        if (atomic_load(&p->generation) == seen) {
            pthread_mutex_lock(&p->mu);
            while (atomic_load(&p->generation) == seen) {
                if (atomic_fetch_add(&p->asleep, 1) + 1 == p->created)
                    pthread_cond_broadcast(&p->all_asleep);
                pthread_cond_wait(&p->wake, &p->mu);
                atomic_fetch_sub(&p->asleep, 1);
            }
            pthread_mutex_unlock(&p->mu);
        }
        seen = atomic_load(&p->generation);
        if (index < (int)(seen & 0xffffu)) {
            run_range(index);
            if (atomic_fetch_sub(&p->pending, 1) == 1) {
                pthread_mutex_lock(&p->mu);
                pthread_cond_signal(&p->done);
                pthread_mutex_unlock(&p->mu);
            }
        }
    }
    return NULL;
}

static int ensure_workers(int needed) {
    pb_pool *p = &g_pool;
    while (p->created < needed) {
        int index = p->created + 1;
        p->start_generation[index] = atomic_load(&p->generation);
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&p->threads[p->created], &attr, worker_main, (void *)(intptr_t)index);
        pthread_attr_destroy(&attr);
        if (rc != 0) return pb_fail(PB_ERR_INTERNAL, "thread pool: pthread_create failed (%d)", rc);
        pthread_mutex_lock(&p->mu);
        p->created++;
        pthread_mutex_unlock(&p->mu);
    }
    return PB_OK;
}

int32_t pb_pool_max_threads(void) { return PB_MAX_THREADS; }

/* parallel regions that ran on more than one thread (under g_region_mu) */
static int64_t g_multi_regions;

int64_t pb_pool_multi_regions(void) {
    pthread_mutex_lock(&g_region_mu);
    const int64_t n = g_multi_regions;
    pthread_mutex_unlock(&g_region_mu);
    return n;
}

int32_t pb_threads_for(int32_t max_threads, int64_t work, int64_t grain) {
    if (grain < 1) grain = 1;
    int64_t t = work / grain;
    if (t < 1) t = 1;
    return t < max_threads ? (int32_t)t : max_threads;
}

int pb_parallel_for(int32_t nthreads, int64_t ntasks, pb_range_fn fn, void *ctx) {
    if (ntasks <= 0) return PB_OK;
    if (nthreads > PB_MAX_THREADS) nthreads = PB_MAX_THREADS;
    if (nthreads > ntasks) nthreads = (int32_t)ntasks;
    if (nthreads <= 1) {
        fn(ctx, 0, ntasks);
        return PB_OK;
    }
    pb_pool *p = &g_pool;
    pthread_mutex_lock(&g_region_mu);
    int rc = ensure_workers(nthreads - 1);
    if (rc != PB_OK) {
        pthread_mutex_unlock(&g_region_mu);
        return rc;
    }
    g_multi_regions++;
    p->fn = fn;
    p->ctx = ctx;
    p->ntasks = ntasks;
    p->participants = nthreads;
    atomic_store(&p->pending, nthreads - 1);
    atomic_store(&p->stop_spin, 0);
    pthread_mutex_lock(&p->mu);
    uint_fast64_t next = ((atomic_load(&p->generation) >> 16) + 1) << 16 | (uint_fast64_t)nthreads;
    atomic_store(&p->generation, next);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);

    run_range(0);

    /* wait for the others: spin briefly, then sleep */
    int spins = 0;
    while (atomic_load(&p->pending) > 0 && spins < 20000) {
        PB_PAUSE();
        spins++;
    }
    if (atomic_load(&p->pending) > 0) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->pending) > 0) pthread_cond_wait(&p->done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
    pthread_mutex_unlock(&g_region_mu);
    return PB_OK;
}

int pb_pool_set_spin(int32_t spin_us) {
    if (spin_us < 0 || spin_us > 1000000)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "pb_pool_set_spin: spin_us=%d, expected 0..1000000",
                       (int)spin_us);
    atomic_store(&g_pool.spin_us, spin_us);
    return PB_OK;
}

int pb_pool_quiesce(void) {
    pb_pool *p = &g_pool;
    pthread_mutex_lock(&g_region_mu);
    atomic_store(&p->stop_spin, 1);
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->asleep) < p->created) pthread_cond_wait(&p->all_asleep, &p->mu);
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_unlock(&g_region_mu);
    return PB_OK;
}

/* ---- per-thread scratch ---- */
#define PB_SCRATCH_SLOTS 2
static _Thread_local void *g_scratch[PB_SCRATCH_SLOTS];
static _Thread_local size_t g_scratch_size[PB_SCRATCH_SLOTS];

/* PERFBENCH_SCRATCH_MAX_BYTES caps one thread's scratch (kernels then take their no-scratch
 * path); read once. */
static size_t g_scratch_limit = (size_t)-1;
static pthread_once_t g_scratch_once = PTHREAD_ONCE_INIT;

static void read_scratch_limit(void) {
    const char *env = getenv("PERFBENCH_SCRATCH_MAX_BYTES");
    if (env && *env) g_scratch_limit = (size_t)strtoull(env, NULL, 10);
}

void *pb_scratch_slot(int slot, size_t bytes) {
    if (slot < 0 || slot >= PB_SCRATCH_SLOTS) return NULL;
    pthread_once(&g_scratch_once, read_scratch_limit);
    if (bytes > g_scratch_limit) return NULL;
    if (bytes <= g_scratch_size[slot]) return g_scratch[slot];
    size_t want = bytes < 4096 ? 4096 : bytes;
    want = (want + 63) & ~(size_t)63;
    void *mem = NULL;
    if (posix_memalign(&mem, 64, want) != 0) return NULL;
    free(g_scratch[slot]);
    g_scratch[slot] = mem;
    g_scratch_size[slot] = want;
    return mem;
}

void *pb_scratch(size_t bytes) { return pb_scratch_slot(0, bytes); }

/* CPU-feature dispatch, chosen once in one place: the best compiled-in ISA path this CPU
 * supports (avx512 > avx2 > portable), unless PERFBENCH_ISA names another one. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#ifndef PB_BUILD_FLAGS
#define PB_BUILD_FLAGS "unknown"
#endif
#ifndef PB_COMPILER
#define PB_COMPILER "cc"
#endif

/* best first; portable16 is a test path and never chosen automatically */
static const pb_isa *const g_isas[] = {
#if defined(PB_HAVE_AVX512)
    &pb_isa_avx512,
#endif
#if defined(PB_HAVE_AVX2)
    &pb_isa_avx2,
#endif
    &pb_isa_portable,
    &pb_isa_portable16,
};
#define PB_N_ISAS ((int)(sizeof g_isas / sizeof g_isas[0]))

static const pb_isa *g_active, *g_best; /* g_best: what "auto" means on this CPU */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static char g_compiled[128], g_supported[128];

static void pick_isa(void) {
    for (int i = 0; i < PB_N_ISAS; i++) {
        size_t len = strlen(g_compiled);
        strncat(g_compiled, len ? "," : "", sizeof g_compiled - len - 1);
        strncat(g_compiled, g_isas[i]->name, sizeof g_compiled - strlen(g_compiled) - 1);
        if (g_isas[i]->supported()) {
            len = strlen(g_supported);
            strncat(g_supported, len ? "," : "", sizeof g_supported - len - 1);
            strncat(g_supported, g_isas[i]->name, sizeof g_supported - strlen(g_supported) - 1);
            if (!g_best && strcmp(g_isas[i]->name, "portable16") != 0) g_best = g_isas[i];
        }
    }
    g_active = g_best;
    const char *forced = getenv("PERFBENCH_ISA");
    if (forced && *forced && strcmp(forced, "auto") != 0) {
        for (int i = 0; i < PB_N_ISAS; i++)
            if (strcmp(g_isas[i]->name, forced) == 0 && g_isas[i]->supported()) g_active = g_isas[i];
    }
}

const pb_isa *pb_active_isa(void) {
    pthread_once(&g_once, pick_isa);
    return g_active;
}

const char *pb_isa_compiled(void) {
    pb_active_isa();
    return g_compiled;
}
const char *pb_isa_supported(void) {
    pb_active_isa();
    return g_supported;
}
const char *pb_isa_active(void) { return pb_active_isa()->name; }

int pb_isa_select(const char *name) {
    pb_active_isa();
    if (name == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "pb_isa_select: name is NULL");
    if (strcmp(name, "auto") == 0) {
        g_active = g_best;
        return PB_OK;
    }
    for (int i = 0; i < PB_N_ISAS; i++) {
        if (strcmp(g_isas[i]->name, name) != 0) continue;
        if (!g_isas[i]->supported())
            return pb_fail(PB_ERR_UNSUPPORTED, "ISA path '%s' is compiled in but this CPU cannot run it (supported: %s)",
                           name, g_supported);
        g_active = g_isas[i];
        return PB_OK;
    }
    return pb_fail(PB_ERR_INVALID_ARGUMENT, "no ISA path '%s' in this build (compiled: %s)", name, g_compiled);
}

int pb_abi_version(void) { return PB_ABI_VERSION; }

const char *pb_build_info(void) { return "compiler=" PB_COMPILER " " __VERSION__ "; flags=" PB_BUILD_FLAGS; }

/* ---- kernels by name, for the timing loop ---- */
static const struct {
    const char *name;
    pb_kernel_fn fn;
} g_kernels[] = {
#define PB_ENTRY(name) {#name, pb_##name},
#define PB_BINARY(name, vop, comm) {#name, pb_##name},
#include "kernels.def"
};
#define PB_N_KERNELS ((int)(sizeof g_kernels / sizeof g_kernels[0]))

int pb_kernel_count(void) { return PB_N_KERNELS; }

const char *pb_kernel_name(int index) {
    return index >= 0 && index < PB_N_KERNELS ? g_kernels[index].name : NULL;
}

pb_kernel_fn pb_kernel_lookup(const char *name) {
    if (name == NULL) return NULL;
    for (int i = 0; i < PB_N_KERNELS; i++)
        if (strcmp(g_kernels[i].name, name) == 0) return g_kernels[i].fn;
    return NULL;
}

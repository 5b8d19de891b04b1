/* State file -> fake_state. Strict about types (a wrong type names its key and the whole file is
 * refused, keeping the previous state), lenient about unknown keys so newer writers still work. */
#include "state.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "json.h"

#define FAKE_FN_NAME(name) #name,
const char *const fake_function_names[FN_COUNT] = {FAKE_FUNCTIONS(FAKE_FN_NAME)};
#undef FAKE_FN_NAME

int fake_function_mark(const char *name, unsigned char marks[FN_COUNT]) {
    int matched = 0;
    size_t n = strlen(name);
    for (int i = 0; i < FN_COUNT; i++) {
        const char *fn = fake_function_names[i];
        /* "X" matches X and X_vN; "X_vN" matches only itself */
        int same = strcmp(fn, name) == 0;
        int version = strncmp(fn, name, n) == 0 && fn[n] == '_' && fn[n + 1] == 'v' && fn[n + 2] >= '0' &&
                      fn[n + 2] <= '9';
        if (same || version) {
            marks[i] = 1;
            matched++;
        }
    }
    return matched;
}

typedef struct {
    char *err;
    size_t errlen;
    char *warn;
    size_t warnlen;
    char where[48]; /* "devices[3]." or "" */
} ctx;

static int bad(ctx *c, const char *key, const char *fmt, ...) {
    char msg[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(c->err, c->errlen, "%s%s: %s", c->where, key, msg);
    return -1;
}

/* A member that is absent takes (``dflt_has``, ``dflt``); null means "not available" (has = 0). */
static int get_u64(ctx *c, const json_value *obj, const char *key, int dflt_has, unsigned long long dflt,
                   unsigned long long max, unsigned long long *out, int *has) {
    const json_value *v = json_get(obj, key);
    int present = dflt_has;
    *out = dflt;
    if (v && v->type == JSON_NULL) {
        present = 0;
        *out = 0;
    } else if (v) {
        if (v->type != JSON_NUMBER) return bad(c, key, "expected a number");
        if (v->text[0] == '-') return bad(c, key, "must not be negative, got %s", v->text);
        if (strpbrk(v->text, ".eE")) {
            double d = strtod(v->text, NULL);
            if (d >= 18446744073709551616.0 || (unsigned long long)d > max)
                return bad(c, key, "too large: %s", v->text);
            *out = (unsigned long long)d;
        } else {
            errno = 0;
            *out = strtoull(v->text, NULL, 10);
            if (errno == ERANGE || *out > max) return bad(c, key, "too large: %s", v->text);
        }
        present = 1;
    }
    if (has) *has = present;
    else if (!present) return bad(c, key, "must not be null");
    return 0;
}

static int get_u32(ctx *c, const json_value *obj, const char *key, int dflt_has, unsigned dflt, unsigned *out,
                   int *has) {
    unsigned long long v;
    if (get_u64(c, obj, key, dflt_has, dflt, UINT_MAX, &v, has)) return -1;
    *out = (unsigned)v;
    return 0;
}

static int get_double(ctx *c, const json_value *obj, const char *key, double lo, double hi, int dflt_has,
                      double *out, int *has) {
    const json_value *v = json_get(obj, key);
    *out = 0;
    *has = dflt_has;
    if (!v || v->type == JSON_NULL) {
        if (v) *has = 0;
        return 0;
    }
    if (v->type != JSON_NUMBER) return bad(c, key, "expected a number");
    *out = strtod(v->text, NULL);
    if (*out < lo || *out > hi) return bad(c, key, "must be between %g and %g, got %s", lo, hi, v->text);
    *has = 1;
    return 0;
}

static int get_bool(ctx *c, const json_value *obj, const char *key, int dflt, int *out, int *has) {
    const json_value *v = json_get(obj, key);
    *out = dflt;
    if (has) *has = v ? v->type != JSON_NULL : dflt;
    if (!v || v->type == JSON_NULL) return 0;
    if (v->type != JSON_BOOL) return bad(c, key, "expected true or false");
    *out = v->boolean;
    if (has) *has = 1;
    return 0;
}

static int get_string(ctx *c, const json_value *obj, const char *key, char *buf, size_t size) {
    const json_value *v = json_get(obj, key);
    if (!v || v->type == JSON_NULL) return 0; /* keep the default already in buf */
    if (v->type != JSON_STRING) return bad(c, key, "expected a string");
    if (strlen(v->text) >= size) return bad(c, key, "longer than %zu bytes", size - 1);
    memcpy(buf, v->text, strlen(v->text) + 1);
    return 0;
}

static void warn_unknown(ctx *c, const char *key, const char *name) {
    size_t used = strlen(c->warn);
    if (used + 1 < c->warnlen)
        snprintf(c->warn + used, c->warnlen - used, "%s%s%s: unknown NVML function %s", used ? "; " : "",
                 c->where, key, name);
}

static int get_functions(ctx *c, const json_value *obj, const char *key, unsigned char marks[FN_COUNT]) {
    const json_value *v = json_get(obj, key);
    if (!v || v->type == JSON_NULL) return 0;
    if (v->type != JSON_ARRAY) return bad(c, key, "expected a list of NVML function names");
    for (size_t i = 0; i < v->count; i++) {
        if (v->items[i].type != JSON_STRING) return bad(c, key, "item %zu is not a string", i);
        if (!fake_function_mark(v->items[i].text, marks)) warn_unknown(c, key, v->items[i].text);
    }
    return 0;
}

static int get_list(ctx *c, const json_value *obj, const char *key, size_t max, const json_value **out) {
    const json_value *v = json_get(obj, key);
    *out = NULL;
    if (!v || v->type == JSON_NULL) return 0;
    if (v->type != JSON_ARRAY) return bad(c, key, "expected a list");
    if (v->count > max) return bad(c, key, "more than %zu items", max);
    for (size_t i = 0; i < v->count; i++)
        if (v->items[i].type != JSON_OBJECT) return bad(c, key, "item %zu is not an object", i);
    *out = v;
    return 0;
}

static int parse_processes(ctx *c, const json_value *dev, fake_device *d) {
    const json_value *list;
    if (get_list(c, dev, "processes", FAKE_MAX_PROCESSES, &list)) return -1;
    if (!list) return 0;
    for (size_t i = 0; i < list->count; i++) {
        fake_process *p = &d->processes[i];
        int has_pid;
        unsigned long long mem;
        if (get_u32(c, &list->items[i], "pid", 0, 0, &p->pid, &has_pid)) return -1;
        if (!has_pid) return bad(c, "processes", "item %zu has no pid", i);
        if (get_u64(c, &list->items[i], "used_memory_bytes", 0, 0, ULLONG_MAX, &mem, &p->has_memory)) return -1;
        p->used_memory = mem;
    }
    d->nprocesses = list->count;
    return 0;
}

static int parse_xids(ctx *c, const json_value *dev, fake_device *d) {
    const json_value *list;
    if (get_list(c, dev, "xid_events", FAKE_MAX_XIDS, &list)) return -1;
    if (!list) return 0;
    for (size_t i = 0; i < list->count; i++) {
        int has_seq, has_xid;
        if (get_u64(c, &list->items[i], "seq", 0, 0, ULLONG_MAX, &d->xids[i].seq, &has_seq)) return -1;
        if (get_u64(c, &list->items[i], "xid", 0, 0, ULLONG_MAX, &d->xids[i].xid, &has_xid)) return -1;
        if (!has_seq || !has_xid) return bad(c, "xid_events", "item %zu needs both seq and xid", i);
    }
    d->nxids = list->count;
    return 0;
}

const char *const fake_averaged_names[AVG_COUNT] = {"utilization_gpu", "utilization_memory", "power_mw",
                                                    "sm_active",       "tensor_active",      "dram_active"};
const char *const fake_nvlink_error_names[4] = {"nvlink_crc_flit_errors", "nvlink_crc_data_errors",
                                                "nvlink_replay_errors", "nvlink_recovery_errors"};

const char *const fake_clock_event_names[5] = {"sw_power_cap", "sync_boost", "sw_thermal_slowdown",
                                               "hw_thermal_slowdown", "hw_power_brake_slowdown"};

/* "clocks_event_seconds": {reason: seconds, ...} with "clocks_event_at"; a reason left out is 0. */
static int parse_clock_event_seconds(ctx *c, const json_value *dev, fake_device *d) {
    const json_value *obj = json_get(dev, "clocks_event_seconds");
    int has;
    if (!obj || obj->type == JSON_NULL) return 0;
    if (obj->type != JSON_OBJECT) return bad(c, "clocks_event_seconds", "expected an object of seconds by reason");
    for (size_t i = 0; i < obj->count; i++) {
        int known = 0;
        for (int k = 0; k < 5; k++) known |= strcmp(obj->keys[i], fake_clock_event_names[k]) == 0;
        if (!known) return bad(c, "clocks_event_seconds", "unknown reason %s", obj->keys[i]);
    }
    for (int k = 0; k < 5; k++)
        if (get_double(c, obj, fake_clock_event_names[k], 0, 1e15, 0, &d->clocks_event_seconds[k], &has)) return -1;
    if (get_double(c, dev, "clocks_event_at", 0, 1e12, 0, &d->clocks_event_at, &has)) return -1;
    if (!has) return bad(c, "clocks_event_at", "needed with clocks_event_seconds");
    d->has_clocks_event_seconds = 1;
    return 0;
}

/* NVIDIA's documented behaviour by product (docs/fake-nvml.md, "Products"). nvmlDeviceGetPowerUsage:
 * "On Ampere (except GA100) or newer GPUs, the API returns power averaged over 1 sec interval. On GA100
 * and older architectures, instantaneous power is returned." The utilization period ("between 1 second
 * and 1/6 second depending on the product"), the buffer's depth and its clock are not pinned by any
 * source: 1/6 s, 100 samples, CLOCK_REALTIME everywhere (the lab draws them). Checked in order, so
 * "A100" before "A10" ("H20" also matches "H200": both Hopper). The PCIe link, NVLink count, default
 * power limit and max SM clock: docs/fake-nvml.md, "Products", says which come from NVIDIA's datasheets
 * and which are the fake's choice. */
static const fake_profile profiles[] = {
    {"H100", "Hopper", 1.0 / 6, 1, 1.0 / 6, 100, CLOCK_KIND_REALTIME, 1, POWER_FIELDS_BOTH, 1, 5, 16, 18, 700000, 1980},
    {"H200", "Hopper", 1.0 / 6, 1, 1.0 / 6, 100, CLOCK_KIND_REALTIME, 1, POWER_FIELDS_BOTH, 1, 5, 16, 18, 700000, 1980},
    {"H20", "Hopper", 1.0 / 6, 1, 1.0 / 6, 100, CLOCK_KIND_REALTIME, 1, POWER_FIELDS_BOTH, 1, 5, 16, 18, 500000, 1980},
    {"A100", "Ampere GA100", 1.0 / 6, 0, 1.0 / 6, 100, CLOCK_KIND_REALTIME, 1, POWER_FIELDS_INSTANT, 0, 4, 16, 12, 400000,
     1410},
    {"A10", "Ampere GA102", 1.0 / 6, 1, 1.0 / 6, 100, CLOCK_KIND_REALTIME, 1, POWER_FIELDS_BOTH, 0, 4, 16, 0, 150000, 1695},
    {"L20", "Ada", 1.0 / 6, 1, 1.0 / 6, 100, CLOCK_KIND_REALTIME, 1, POWER_FIELDS_BOTH, 0, 4, 16, 0, 350000, 2520},
    {"T4", "Turing", 1.0 / 6, 0, 1.0 / 6, 100, CLOCK_KIND_REALTIME, 1, POWER_FIELDS_INSTANT, 0, 3, 16, 0, 70000, 1590},
};

static int contains_nocase(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    for (; *hay; hay++)
        if (strncasecmp(hay, needle, n) == 0) return 1;
    return 0;
}

const fake_profile *fake_profile_for(const char *name) {
    for (size_t i = 0; i < sizeof profiles / sizeof profiles[0]; i++)
        if (contains_nocase(name, profiles[i].match)) return &profiles[i];
    return &profiles[0];
}

/* A number in [lo, hi]; absent or null takes the product's default. */
static int get_seconds(ctx *c, const json_value *obj, const char *key, double lo, double hi, double dflt,
                       double *out) {
    int has;
    if (get_double(c, obj, key, lo, hi, 0, out, &has)) return -1;
    if (!has) *out = dflt;
    return 0;
}

static int get_sample_clock(ctx *c, const json_value *dev, enum fake_sample_clock *out) {
    static const char *const names[] = {"realtime", "boottime", "monotonic"};
    const json_value *v = json_get(dev, "sample_clock");
    if (!v || v->type == JSON_NULL) return 0; /* keep the product's */
    for (int i = 0; v->type == JSON_STRING && i < 3; i++)
        if (strcmp(v->text, names[i]) == 0) {
            *out = (enum fake_sample_clock)i;
            return 0;
        }
    return bad(c, "sample_clock", "expected \"realtime\", \"boottime\" or \"monotonic\"");
}

static int get_power_fields(ctx *c, const json_value *dev, enum fake_power_fields *out) {
    const json_value *v = json_get(dev, "power_fields");
    if (!v || v->type == JSON_NULL) return 0; /* keep the product's */
    if (v->type == JSON_BOOL) *out = v->boolean ? POWER_FIELDS_BOTH : POWER_FIELDS_NONE;
    else if (v->type == JSON_STRING && strcmp(v->text, "instant") == 0) *out = POWER_FIELDS_INSTANT;
    else return bad(c, "power_fields", "expected true, false or \"instant\"");
    return 0;
}

/* The PCIe link, NVLink links, default power limit and max SM clock: the product's unless the state
 * says (null: NOT_SUPPORTED). */
static int parse_link_keys(ctx *c, const json_value *dev, fake_device *d, const fake_profile *p) {
    const json_value *list;
    if (get_u32(c, dev, "pcie_link_generation_max", 1, p->pcie_generation, &d->pcie_generation_max,
                &d->has_pcie_generation_max) ||
        get_u32(c, dev, "pcie_link_width_max", 1, p->pcie_width, &d->pcie_width_max, &d->has_pcie_width_max) ||
        get_u32(c, dev, "pcie_link_generation", 1, d->pcie_generation_max, &d->pcie_generation,
                &d->has_pcie_generation) ||
        get_u32(c, dev, "pcie_link_width", 1, d->pcie_width_max, &d->pcie_width, &d->has_pcie_width) ||
        get_u32(c, dev, "nvlink_links", p->nvlinks > 0, p->nvlinks, &d->nvlink_links, &d->has_nvlink_links) ||
        get_u32(c, dev, "power_default_limit_mw", 1, p->power_default_limit_mw, &d->power_default_limit_mw,
                &d->has_power_default_limit) ||
        get_u32(c, dev, "sm_clock_max_mhz", 1, p->sm_clock_max_mhz, &d->sm_clock_max_mhz, &d->has_sm_clock_max))
        return -1;
    /* NVLink's error counters: 0 where the GPU has NVLink, NOT_SUPPORTED without (or null) */
    for (int i = 0; i < 4; i++)
        if (get_u64(c, dev, fake_nvlink_error_names[i], d->has_nvlink_links, 0, ULLONG_MAX, &d->nvlink_errors[i],
                    &d->has_nvlink_errors[i]))
            return -1;
    list = json_get(dev, "nvlink_inactive");
    if (list && list->type == JSON_NULL) list = NULL;
    if (list && list->type != JSON_ARRAY) return bad(c, "nvlink_inactive", "expected a list of link numbers");
    if (d->has_nvlink_links && d->nvlink_links > FAKE_NVLINK_MAX_LINKS)
        return bad(c, "nvlink_links", "at most %d", FAKE_NVLINK_MAX_LINKS);
    for (size_t i = 0; list && i < list->count; i++) {
        const json_value *v = &list->items[i];
        unsigned long link = v->type == JSON_NUMBER && !strpbrk(v->text, "-.eE") ? strtoul(v->text, NULL, 10) : ULONG_MAX;
        if (link >= FAKE_NVLINK_MAX_LINKS) return bad(c, "nvlink_inactive", "item %zu: a link number 0-%d", i, FAKE_NVLINK_MAX_LINKS - 1);
        d->nvlink_inactive[link] = 1;
    }
    return 0;
}

/* The keys whose defaults come from the product the name picks. */
static int parse_profile_keys(ctx *c, const json_value *dev, fake_device *d) {
    const fake_profile *p = fake_profile_for(d->name);
    int has;
    d->sample_clock = p->sample_clock;
    d->power_fields = p->power_fields;
    if (get_seconds(c, dev, "utilization_average_seconds", 0, 10, p->utilization_average_s,
                    &d->utilization_average_s) ||
        get_seconds(c, dev, "power_average_seconds", 0, 10, p->power_average_s, &d->power_average_s) ||
        get_seconds(c, dev, "sample_period_seconds", 0.01, 10, p->sample_period_s, &d->sample_period_s) ||
        get_seconds(c, dev, "gpm_min_interval_seconds", 0, 10, 0.1, &d->gpm_min_interval_s) ||
        get_u32(c, dev, "sample_buffer_depth", 1, p->sample_depth, &d->sample_depth, &has) ||
        get_bool(c, dev, "energy_counter", p->energy_counter, &d->energy_counter, NULL) ||
        get_bool(c, dev, "clocks_event_counters", p->gpm, &d->clocks_event_counters, NULL) ||
        get_sample_clock(c, dev, &d->sample_clock) || get_power_fields(c, dev, &d->power_fields))
        return -1;
    if (!has) d->sample_depth = p->sample_depth;
    if (d->sample_depth > FAKE_MAX_SAMPLE_DEPTH)
        return bad(c, "sample_buffer_depth", "at most %d", FAKE_MAX_SAMPLE_DEPTH);
    return parse_link_keys(c, dev, d, p);
}

static int parse_integrals(ctx *c, const json_value *dev, fake_device *d) {
    const json_value *list;
    int has;
    if (parse_profile_keys(c, dev, d) || get_list(c, dev, "integrals", FAKE_MAX_INTEGRALS, &list)) return -1;
    if (!list) return 0;
    for (size_t i = 0; i < list->count; i++) {
        fake_integral *g = &d->integrals[i];
        if (get_double(c, &list->items[i], "at", 0, 1e12, 0, &g->at, &has)) return -1;
        if (!has) return bad(c, "integrals", "item %zu has no at", i);
        if (i && g->at <= d->integrals[i - 1].at) return bad(c, "integrals", "item %zu: at must increase", i);
        for (int k = 0; k < AVG_COUNT; k++) {
            if (get_double(c, &list->items[i], fake_averaged_names[k], 0, 1e18, 0, &g->value[k], &has)) return -1;
            if (has) g->has |= 1u << k;
            if (i && (d->integrals[i - 1].has >> k & 1) != (unsigned)has)
                return bad(c, "integrals", "item %zu: every item carries the same readings", i);
            if (i && has && g->value[k] < d->integrals[i - 1].value[k])
                return bad(c, "integrals", "item %zu: %s must not decrease", i, fake_averaged_names[k]);
        }
    }
    d->nintegrals = list->count;
    return 0;
}

static int parse_device(ctx *c, const json_value *dev, size_t pos, fake_device *d) {
    int has_total, has_util_gpu, has_util_mem, lost, dummy;
    unsigned long long index;
    snprintf(c->where, sizeof c->where, "devices[%zu].", pos);
    memset(d, 0, sizeof *d);
    if (get_u64(c, dev, "index", 1, pos, FAKE_MAX_DEVICES - 1, &index, NULL)) return -1;
    d->index = (unsigned)index;
    snprintf(d->name, sizeof d->name, "NVIDIA H100 80GB HBM3");
    snprintf(d->uuid, sizeof d->uuid, "GPU-fa4e0000-0000-4000-8000-%012x", d->index);
    snprintf(d->pci_bus_id, sizeof d->pci_bus_id, "00000000:%02X:00.0", 0x18 + d->index);
    if (get_string(c, dev, "name", d->name, sizeof d->name) || get_string(c, dev, "uuid", d->uuid, sizeof d->uuid) ||
        get_string(c, dev, "pci_bus_id", d->pci_bus_id, sizeof d->pci_bus_id))
        return -1;
    if (get_u32(c, dev, "utilization_gpu", 1, 0, &d->utilization_gpu, &has_util_gpu) ||
        get_u32(c, dev, "utilization_memory", 1, 0, &d->utilization_memory, &has_util_mem))
        return -1;
    if (d->utilization_gpu > 100 || d->utilization_memory > 100)
        return bad(c, "utilization_gpu", "utilization is a percentage (0-100)");
    d->has_utilization = has_util_gpu && has_util_mem;
    if (get_u64(c, dev, "memory_total_bytes", 1, 0, ULLONG_MAX, &d->memory_total, &has_total) ||
        get_u64(c, dev, "memory_used_bytes", 1, 0, ULLONG_MAX, &d->memory_used, &dummy) ||
        get_u64(c, dev, "memory_reserved_bytes", 1, 0, ULLONG_MAX, &d->memory_reserved, &dummy))
        return -1;
    d->has_memory = has_total;
    if (d->has_memory && d->memory_used + d->memory_reserved > d->memory_total)
        return bad(c, "memory_used_bytes", "used + reserved exceeds memory_total_bytes");
    if (get_u32(c, dev, "power_mw", 1, 0, &d->power_mw, &d->has_power) ||
        get_u32(c, dev, "power_limit_mw", 1, 0, &d->power_limit_mw, &d->has_power_limit) ||
        get_u32(c, dev, "sm_clock_mhz", 1, 0, &d->sm_clock_mhz, &d->has_sm_clock) ||
        get_u32(c, dev, "mem_clock_mhz", 0, 0, &d->mem_clock_mhz, &d->has_mem_clock) ||
        get_u64(c, dev, "clocks_event_reasons", 1, 0, ULLONG_MAX, &d->clocks_event_reasons,
                &d->has_clocks_event_reasons))
        return -1;
    double temp;
    if (get_double(c, dev, "temperature_c", -273, 1000, 1, &temp, &d->has_temperature)) return -1;
    d->temperature_c = (int)temp;
    if (get_u64(c, dev, "pcie_tx_bytes", 1, 0, ULLONG_MAX, &d->pcie_tx, &d->has_pcie_tx) ||
        get_u64(c, dev, "pcie_rx_bytes", 1, 0, ULLONG_MAX, &d->pcie_rx, &d->has_pcie_rx) ||
        get_u64(c, dev, "nvlink_tx_kib", 0, 0, ULLONG_MAX, &d->nvlink_tx_kib, &d->has_nvlink_tx) ||
        get_u64(c, dev, "nvlink_rx_kib", 0, 0, ULLONG_MAX, &d->nvlink_rx_kib, &d->has_nvlink_rx))
        return -1;
    if (get_double(c, dev, "sm_active", 0, 100, 0, &d->sm_active, &d->has_sm_active) ||
        get_double(c, dev, "tensor_active", 0, 100, 0, &d->tensor_active, &d->has_tensor_active) ||
        get_double(c, dev, "dram_active", 0, 100, 0, &d->dram_active, &d->has_dram_active))
        return -1;
    if (get_u64(c, dev, "ecc_uncorrected", 0, 0, ULLONG_MAX, &d->ecc_uncorrected, &d->has_ecc) ||
        get_u64(c, dev, "ecc_corrected", 1, 0, ULLONG_MAX, &d->ecc_corrected, &dummy))
        return -1;
    int failure, pending;
    if (get_bool(c, dev, "row_remap_failure", 0, &failure, &d->has_row_remap) ||
        get_bool(c, dev, "row_remap_pending", 0, &pending, NULL) ||
        get_u32(c, dev, "remapped_rows_correctable", 1, 0, &d->remapped_rows_correctable, &dummy) ||
        get_u32(c, dev, "remapped_rows_uncorrectable", 1, 0, &d->remapped_rows_uncorrectable, &dummy))
        return -1;
    d->row_remap_failure = (unsigned)failure;
    d->row_remap_pending = (unsigned)pending;
    if (get_bool(c, dev, "lost", 0, &lost, NULL)) return -1;
    d->lost = lost;
    if (get_u32(c, dev, "delay_ms", 1, 0, &d->delay_ms, &dummy)) return -1;
    if (d->delay_ms > 600000) return bad(c, "delay_ms", "at most 600000 (10 minutes)");
    if (get_functions(c, dev, "unsupported", d->unsupported)) return -1;
    if (parse_processes(c, dev, d) || parse_xids(c, dev, d) || parse_integrals(c, dev, d) ||
        parse_clock_event_seconds(c, dev, d))
        return -1;
    return 0;
}

static const struct {
    const char *name;
    nvmlReturn_t code;
} driver_errors[] = {
    {"UNINITIALIZED", NVML_ERROR_UNINITIALIZED},
    {"DRIVER_NOT_LOADED", NVML_ERROR_DRIVER_NOT_LOADED},
    {"NO_PERMISSION", NVML_ERROR_NO_PERMISSION},
    {"IRQ_ISSUE", NVML_ERROR_IRQ_ISSUE},
    {"GPU_IS_LOST", NVML_ERROR_GPU_IS_LOST},
    {"RESET_REQUIRED", NVML_ERROR_RESET_REQUIRED},
    {"OPERATING_SYSTEM", NVML_ERROR_OPERATING_SYSTEM},
    {"LIB_RM_VERSION_MISMATCH", NVML_ERROR_LIB_RM_VERSION_MISMATCH},
    {"MEMORY", NVML_ERROR_MEMORY},
    {"UNKNOWN", NVML_ERROR_UNKNOWN},
};

static int parse_driver_error(ctx *c, const json_value *top, nvmlReturn_t *out) {
    const json_value *v = json_get(top, "driver_error");
    *out = NVML_SUCCESS;
    if (!v || v->type == JSON_NULL) return 0;
    if (v->type == JSON_NUMBER) {
        long code = strtol(v->text, NULL, 10);
        if (code <= 0 || code > 999) return bad(c, "driver_error", "not an NVML error code: %s", v->text);
        *out = (nvmlReturn_t)code;
        return 0;
    }
    if (v->type != JSON_STRING) return bad(c, "driver_error", "expected an NVML error name like \"UNKNOWN\"");
    const char *name = v->text;
    if (strncmp(name, "NVML_ERROR_", 11) == 0) name += 11;
    for (size_t i = 0; i < sizeof driver_errors / sizeof driver_errors[0]; i++)
        if (strcmp(driver_errors[i].name, name) == 0) {
            *out = driver_errors[i].code;
            return 0;
        }
    return bad(c, "driver_error", "unknown error name %s", v->text);
}

int fake_state_parse(const char *text, size_t len, fake_state *out, char *err, size_t errlen, char *warn,
                     size_t warnlen) {
    ctx c = {err, errlen, warn, warnlen, ""};
    json_value top;
    err[0] = '\0';
    if (warnlen) warn[0] = '\0';
    if (json_parse(text, len, &top, err, errlen)) return -1;
    int rc = -1;
    memset(out, 0, sizeof *out);
    if (top.type != JSON_OBJECT) {
        bad(&c, "(top level)", "expected an object");
        goto done;
    }
    snprintf(out->driver_version, sizeof out->driver_version, "550.54.15");
    snprintf(out->nvml_version, sizeof out->nvml_version, "12.550.54.15");
    unsigned cuda;
    int dummy;
    if (get_string(&c, &top, "driver_version", out->driver_version, sizeof out->driver_version) ||
        get_string(&c, &top, "nvml_version", out->nvml_version, sizeof out->nvml_version) ||
        get_u32(&c, &top, "cuda_driver_version", 1, 12040, &cuda, &dummy) ||
        parse_driver_error(&c, &top, &out->driver_error) || get_functions(&c, &top, "missing_functions", out->missing))
        goto done;
    out->cuda_driver_version = (int)cuda;
    const json_value *devices = json_get(&top, "devices");
    if (devices && devices->type != JSON_NULL) {
        if (devices->type != JSON_ARRAY) {
            bad(&c, "devices", "expected a list");
            goto done;
        }
        if (devices->count > FAKE_MAX_DEVICES) {
            bad(&c, "devices", "more than %d devices", FAKE_MAX_DEVICES);
            goto done;
        }
        int seen[FAKE_MAX_DEVICES] = {0};
        static fake_device parsed; /* callers serialise parsing (the library's lock) */
        for (size_t i = 0; i < devices->count; i++) {
            if (devices->items[i].type != JSON_OBJECT) {
                bad(&c, "devices", "item %zu is not an object", i);
                goto done;
            }
            if (parse_device(&c, &devices->items[i], i, &parsed)) goto done;
            if (parsed.index >= devices->count || seen[parsed.index]) {
                bad(&c, "index", "indexes must be 0..%zu, each once; got %u", devices->count - 1, parsed.index);
                goto done;
            }
            seen[parsed.index] = 1;
            out->devices[parsed.index] = parsed;
        }
        out->ndevices = (unsigned)devices->count;
    }
    rc = 0;
done:
    json_free(&top);
    return rc;
}

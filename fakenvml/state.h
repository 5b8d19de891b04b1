/* The fake's devices as the JSON state file (FAKE_NVML_STATE) describes them. docs/fake-nvml.md is
 * the contract; keep the two in step. */
#ifndef FAKE_NVML_STATE_H
#define FAKE_NVML_STATE_H

#include <stddef.h>

#include "functions.h"
#include "nvml_subset.h"

#define FAKE_MAX_DEVICES 64
#define FAKE_MAX_PROCESSES 128
#define FAKE_MAX_XIDS 256
#define FAKE_MAX_INTEGRALS 64
#define FAKE_MAX_SAMPLE_DEPTH 10000
#define FAKE_NVLINK_MAX_LINKS 36 /* pynvml's NVML_NVLINK_MAX_LINKS (nvidia-ml-py 13) */

/* The readings a real GPU averages over time (docs/fake-nvml.md, "Readings averaged over time"). */
enum fake_averaged { AVG_UTIL_GPU, AVG_UTIL_MEMORY, AVG_POWER, AVG_SM, AVG_TENSOR, AVG_DRAM, AVG_COUNT };

/* A running integral of each averaged reading (value x seconds) at ``at`` (CLOCK_MONOTONIC seconds);
 * ``has`` is a bitmask of the readings it carries. */
typedef struct {
    double at;
    unsigned has;
    double value[AVG_COUNT];
} fake_integral;

/* The clock of nvmlDeviceGetSamples' timestamps (docs/fake-nvml.md, "The sample buffer"). */
enum fake_sample_clock { CLOCK_KIND_REALTIME, CLOCK_KIND_BOOTTIME, CLOCK_KIND_MONOTONIC };

/* What the NVML_FI_DEV_POWER_* field values answer: neither, the instant's only, or both. */
enum fake_power_fields { POWER_FIELDS_NONE, POWER_FIELDS_INSTANT, POWER_FIELDS_BOTH };

/* A product's defaults for the keys a state omits, picked by the device name
 * (docs/fake-nvml.md, "Products"). */
typedef struct {
    const char *match; /* a case-insensitive substring of the name */
    const char *family;
    double utilization_average_s, power_average_s, sample_period_s;
    unsigned sample_depth;
    enum fake_sample_clock sample_clock;
    int energy_counter;
    enum fake_power_fields power_fields;
    int gpm; /* documentation only: GPM follows the state's sm/tensor/dram keys */
    unsigned pcie_generation, pcie_width; /* the link's max, and its default current value */
    unsigned nvlinks;                     /* NVLink links; 0: no NVLink (NOT_SUPPORTED) */
    unsigned power_default_limit_mw, sm_clock_max_mhz;
} fake_profile;

/* The profile for ``name``; an unknown name gets the H100's. */
const fake_profile *fake_profile_for(const char *name);

typedef struct {
    unsigned long long seq;
    unsigned long long xid;
} fake_xid;

typedef struct {
    unsigned int pid;
    int has_memory;
    unsigned long long used_memory;
} fake_process;

/* ``has_*`` is 0 where the state says the value is unavailable: the call that returns it answers
 * NVML_ERROR_NOT_SUPPORTED (or the field value / GPM metric alone carries NOT_SUPPORTED). */
typedef struct {
    unsigned int index;
    char name[96];
    char uuid[96];
    char pci_bus_id[32];
    int has_utilization;
    unsigned int utilization_gpu, utilization_memory;
    int has_memory;
    unsigned long long memory_total, memory_used, memory_reserved;
    int has_power, has_power_limit, has_temperature, has_sm_clock, has_mem_clock, has_clocks_event_reasons;
    unsigned int power_mw, power_limit_mw, sm_clock_mhz, mem_clock_mhz;
    int temperature_c;
    unsigned long long clocks_event_reasons;
    int has_pcie_tx, has_pcie_rx, has_nvlink_tx, has_nvlink_rx;
    unsigned long long pcie_tx, pcie_rx, nvlink_tx_kib, nvlink_rx_kib;
    int has_sm_active, has_tensor_active, has_dram_active;
    double sm_active, tensor_active, dram_active; /* percent */
    int has_ecc;
    unsigned long long ecc_uncorrected, ecc_corrected;
    int has_row_remap;
    unsigned int row_remap_failure, row_remap_pending, remapped_rows_correctable, remapped_rows_uncorrectable;
    int has_pcie_generation, has_pcie_width, has_pcie_generation_max, has_pcie_width_max;
    unsigned int pcie_generation, pcie_width, pcie_generation_max, pcie_width_max;
    int has_nvlink_links;
    unsigned int nvlink_links;
    unsigned char nvlink_inactive[FAKE_NVLINK_MAX_LINKS];
    /* NVLink error counters over all links, in the order of fake_nvlink_error_names */
    int has_nvlink_errors[4];
    unsigned long long nvlink_errors[4];
    int clocks_event_counters; /* the NVML_FI_DEV_CLOCKS_EVENT_REASON_* fields answer */
    /* the writer's own count of those (seconds at ``clocks_event_at``, CLOCK_MONOTONIC), in the order of
     * fake_clock_event_names; without it the fake integrates the bits of the states it loads */
    int has_clocks_event_seconds;
    double clocks_event_seconds[5], clocks_event_at;
    int has_power_default_limit, has_sm_clock_max;
    unsigned int power_default_limit_mw, sm_clock_max_mhz;
    int lost;
    unsigned int delay_ms;
    unsigned char unsupported[FN_COUNT];
    size_t nprocesses;
    fake_process processes[FAKE_MAX_PROCESSES];
    size_t nxids;
    fake_xid xids[FAKE_MAX_XIDS];
    double utilization_average_s, power_average_s; /* 0: the instant's value */
    double sample_period_s;                        /* nvmlDeviceGetSamples: one sample per period */
    unsigned sample_depth;                         /* samples the buffer holds; 0: no buffer */
    enum fake_sample_clock sample_clock;
    int energy_counter;
    enum fake_power_fields power_fields;
    double gpm_min_interval_s; /* nvmlGpmMetricsGet refuses samples closer than this (0: no floor) */
    size_t nintegrals;
    fake_integral integrals[FAKE_MAX_INTEGRALS]; /* oldest first, ``at`` strictly increasing */
} fake_device;

extern const char *const fake_averaged_names[AVG_COUNT];
extern const char *const fake_nvlink_error_names[4];
extern const char *const fake_clock_event_names[5];

typedef struct {
    char driver_version[80];
    char nvml_version[80];
    int cuda_driver_version;
    nvmlReturn_t driver_error; /* NVML_SUCCESS, or what every call answers while it is set */
    unsigned char missing[FN_COUNT];
    unsigned int ndevices;
    fake_device devices[FAKE_MAX_DEVICES]; /* devices[i].index == i */
} fake_state;

/* Parses a state document. Returns 0, or -1 with a one-line reason naming the key in ``err``.
 * Names in ``unsupported``/``missing_functions`` that the fake does not know are listed in ``warn``. */
int fake_state_parse(const char *text, size_t len, fake_state *out, char *err, size_t errlen, char *warn,
                     size_t warnlen);

#endif

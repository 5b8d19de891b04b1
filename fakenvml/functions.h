/* Every NVML function the fake exports, once: the state file names them in ``unsupported`` and
 * ``missing_functions``, and the loader hides the symbols of missing ones. */
#ifndef FAKE_NVML_FUNCTIONS_H
#define FAKE_NVML_FUNCTIONS_H

#define FAKE_FUNCTIONS(X)                                                                            \
    X(nvmlInit)                                                                                      \
    X(nvmlInit_v2)                                                                                   \
    X(nvmlInitWithFlags)                                                                             \
    X(nvmlShutdown)                                                                                  \
    X(nvmlErrorString)                                                                               \
    X(nvmlSystemGetDriverVersion)                                                                    \
    X(nvmlSystemGetNVMLVersion)                                                                      \
    X(nvmlSystemGetCudaDriverVersion)                                                                \
    X(nvmlSystemGetCudaDriverVersion_v2)                                                             \
    X(nvmlDeviceGetCount)                                                                            \
    X(nvmlDeviceGetCount_v2)                                                                         \
    X(nvmlDeviceGetHandleByIndex)                                                                    \
    X(nvmlDeviceGetHandleByIndex_v2)                                                                 \
    X(nvmlDeviceGetHandleByUUID)                                                                     \
    X(nvmlDeviceGetIndex)                                                                            \
    X(nvmlDeviceGetMinorNumber)                                                                      \
    X(nvmlDeviceGetName)                                                                             \
    X(nvmlDeviceGetUUID)                                                                             \
    X(nvmlDeviceGetPciInfo_v2)                                                                       \
    X(nvmlDeviceGetPciInfo_v3)                                                                       \
    X(nvmlDeviceGetUtilizationRates)                                                                 \
    X(nvmlDeviceGetMemoryInfo)                                                                       \
    X(nvmlDeviceGetMemoryInfo_v2)                                                                    \
    X(nvmlDeviceGetPowerUsage)                                                                       \
    X(nvmlDeviceGetTotalEnergyConsumption)                                                           \
    X(nvmlDeviceGetSamples)                                                                          \
    X(nvmlDeviceGetEnforcedPowerLimit)                                                               \
    X(nvmlDeviceGetPowerManagementLimit)                                                             \
    X(nvmlDeviceGetPowerManagementDefaultLimit)                                                      \
    X(nvmlDeviceGetTemperature)                                                                      \
    X(nvmlDeviceGetTemperatureV)                                                                     \
    X(nvmlDeviceGetClockInfo)                                                                        \
    X(nvmlDeviceGetMaxClockInfo)                                                                     \
    X(nvmlDeviceGetCurrPcieLinkGeneration)                                                           \
    X(nvmlDeviceGetCurrPcieLinkWidth)                                                                \
    X(nvmlDeviceGetMaxPcieLinkGeneration)                                                            \
    X(nvmlDeviceGetMaxPcieLinkWidth)                                                                 \
    X(nvmlDeviceGetGpuMaxPcieLinkGeneration)                                                         \
    X(nvmlDeviceGetNvLinkState)                                                                      \
    X(nvmlDeviceGetCurrentClocksEventReasons)                                                        \
    X(nvmlDeviceGetCurrentClocksThrottleReasons)                                                     \
    X(nvmlDeviceGetFieldValues)                                                                      \
    X(nvmlDeviceGetComputeRunningProcesses)                                                          \
    X(nvmlDeviceGetComputeRunningProcesses_v2)                                                       \
    X(nvmlDeviceGetComputeRunningProcesses_v3)                                                       \
    X(nvmlDeviceGetTotalEccErrors)                                                                   \
    X(nvmlDeviceGetRemappedRows)                                                                     \
    X(nvmlDeviceGetSupportedEventTypes)                                                              \
    X(nvmlDeviceRegisterEvents)                                                                      \
    X(nvmlEventSetCreate)                                                                            \
    X(nvmlEventSetWait)                                                                              \
    X(nvmlEventSetWait_v2)                                                                           \
    X(nvmlEventSetFree)                                                                              \
    X(nvmlGpmQueryDeviceSupport)                                                                     \
    X(nvmlGpmSampleAlloc)                                                                            \
    X(nvmlGpmSampleFree)                                                                             \
    X(nvmlGpmSampleGet)                                                                              \
    X(nvmlGpmMetricsGet)

#define FAKE_FN_ENUM(name) FN_##name,
enum fake_function { FAKE_FUNCTIONS(FAKE_FN_ENUM) FN_COUNT };
#undef FAKE_FN_ENUM

extern const char *const fake_function_names[FN_COUNT];

/* Marks every function ``name`` stands for: its exact name, or its unversioned base name, which
 * covers all versions (``nvmlDeviceGetComputeRunningProcesses`` covers ``_v2`` and ``_v3`` too).
 * Returns how many functions matched. */
int fake_function_mark(const char *name, unsigned char marks[FN_COUNT]);

#endif

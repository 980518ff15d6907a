/* A stand-in for the CUDA driver (libcuda.so.1) with the four driver-API calls aotbench's architecture
 * detection makes, for tests on machines without a GPU. FAKE_CUDA_CC ("86") is device 0's compute capability;
 * FAKE_CUDA_DEVICES the device count (default 1). Every call is logged to stderr when FAKE_CUDA_LOG is set. */
#include <stdio.h>
#include <stdlib.h>

static int cc(void) {
  const char *text = getenv("FAKE_CUDA_CC");
  return text ? atoi(text) : 90;
}

static void note(const char *call) {
  if (getenv("FAKE_CUDA_LOG")) fprintf(stderr, "fake libcuda: %s\n", call);
}

int cuInit(unsigned flags) {
  note("cuInit");
  return flags == 0 ? 0 : 1;
}

int cuDeviceGetCount(int *count) {
  note("cuDeviceGetCount");
  const char *text = getenv("FAKE_CUDA_DEVICES");
  *count = text ? atoi(text) : 1;
  return 0;
}

int cuDeviceGet(int *device, int ordinal) {
  note("cuDeviceGet");
  *device = ordinal;
  return ordinal == 0 ? 0 : 101; /* CUDA_ERROR_INVALID_DEVICE */
}

int cuDeviceGetAttribute(int *value, int attribute, int device) {
  note("cuDeviceGetAttribute");
  if (device != 0) return 101;
  if (attribute == 75) *value = cc() / 10; /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR */
  else if (attribute == 76) *value = cc() % 10;
  else return 1;
  return 0;
}

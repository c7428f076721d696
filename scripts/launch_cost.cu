// Host time of the CUDA calls one fused-swiglu launch makes, each timed alone (no kernel work).
//
// Build (any machine with nvcc; it runs on a Hopper GPU):
//   nvcc -std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a scripts/launch_cost.cu -o launch_cost
// Prints microseconds per call, averaged over `reps` calls after a warm-up:
//   cudaGetDriverEntryPointByVersion   the lookup CUTLASS does before every TMA descriptor encode
//   cuTensorMapEncodeTiled             one 2-D descriptor encode through a cached entry point
//   cudaFuncSetAttribute               the dynamic shared-memory attribute CUTLASS sets on every initialize()
//   cudaLaunchKernelExC (cluster 2)    the launch itself, an empty kernel with a 2 x 1 cluster
//   cudaGetDevice                      for scale
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

__global__ void empty_kernel(int) {}

#define CHECK(call)                                                                              \
  do {                                                                                           \
    cudaError_t e_ = (call);                                                                     \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(e_));                   \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

template <class F>
double us_per_call(F&& f, int reps) {
  for (int i = 0; i < reps / 10; ++i) f();
  CHECK(cudaDeviceSynchronize());
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) f();
  auto t1 = std::chrono::steady_clock::now();
  CHECK(cudaDeviceSynchronize());
  return std::chrono::duration<double, std::micro>(t1 - t0).count() / reps;
}

int main() {
  int const reps = 20000;
  CHECK(cudaFree(nullptr));  // create the context

  void* pfn = nullptr;
  cudaDriverEntryPointQueryResult q;
  auto lookup = [&] {
    CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &pfn, 12000, cudaEnableDefault, &q));
  };
  lookup();
  auto encode_fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(pfn);

  void* buf = nullptr;
  CHECK(cudaMalloc(&buf, 4096 * 4096 * 2));
  CUtensorMap map;
  cuuint64_t dims[2] = {4096, 4096};
  cuuint64_t strides[1] = {4096 * 2};
  cuuint32_t box[2] = {64, 128};
  cuuint32_t elem[2] = {1, 1};
  auto encode = [&] {
    CUresult r = encode_fn(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, buf, dims, strides, box, elem,
                           CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                           CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
      std::fprintf(stderr, "cuTensorMapEncodeTiled failed: %d\n", int(r));
      std::exit(1);
    }
  };
  auto set_attr = [&] {
    CHECK(cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  };
  set_attr();

  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = 2;
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(132, 1, 1);
  config.blockDim = dim3(384, 1, 1);
  config.dynamicSmemBytes = 200 * 1024;
  config.stream = nullptr;
  config.attrs = &cluster;
  config.numAttrs = 1;
  int arg = 0;
  void* args[] = {&arg};
  auto launch = [&] { CHECK(cudaLaunchKernelExC(&config, reinterpret_cast<void const*>(empty_kernel), args)); };
  int device = 0;
  auto get_device = [&] { CHECK(cudaGetDevice(&device)); };

  std::printf("%-36s %8.3f us\n", "cudaGetDriverEntryPointByVersion", us_per_call(lookup, reps));
  std::printf("%-36s %8.3f us\n", "cuTensorMapEncodeTiled", us_per_call(encode, reps));
  std::printf("%-36s %8.3f us\n", "cudaFuncSetAttribute", us_per_call(set_attr, reps));
  std::printf("%-36s %8.3f us\n", "cudaLaunchKernelExC (cluster 2)", us_per_call(launch, reps));
  std::printf("%-36s %8.3f us\n", "cudaGetDevice", us_per_call(get_device, reps));
  CHECK(cudaFree(buf));
  return 0;
}

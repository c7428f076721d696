// cuTensorMapEncodeTiled for CUTLASS's TMA descriptors, through a driver entry point looked up once.
//
// The library links the CUDA runtime statically and not libcuda, so the driver's descriptor encoder
// is reached through cudaGetDriverEntryPointByVersion. CUTLASS's default wrapper repeats that lookup
// before every encode (3 to 5 descriptors per launch). The build defines
// CUTLASS_ENABLE_DIRECT_CUDA_DRIVER_CALL (build/compile.py), so CUTLASS calls cuTensorMapEncodeTiled
// by name, and this definition forwards the call to the entry point looked up on first use. Its
// visibility is hidden (-fvisibility=hidden): the symbol is the library's own and never exported, so
// it does not interpose on libcuda for anything else in the process.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

namespace {

PFN_cuTensorMapEncodeTiled_v12000 lookup_encode_tiled() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found);
  if (e != cudaSuccess || found != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
}

}  // namespace

extern "C" CUresult CUDAAPI cuTensorMapEncodeTiled(
    CUtensorMap* tensor_map, CUtensorMapDataType data_type, cuuint32_t rank, void* global_address,
    const cuuint64_t* global_dim, const cuuint64_t* global_strides, const cuuint32_t* box_dim,
    const cuuint32_t* element_strides, CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
    CUtensorMapL2promotion l2_promotion, CUtensorMapFloatOOBfill oob_fill) {
  static PFN_cuTensorMapEncodeTiled_v12000 const encode = lookup_encode_tiled();  // thread-safe, once
  if (encode == nullptr) return CUDA_ERROR_NOT_FOUND;
  return encode(tensor_map, data_type, rank, global_address, global_dim, global_strides, box_dim,
                element_strides, interleave, swizzle, l2_promotion, oob_fill);
}

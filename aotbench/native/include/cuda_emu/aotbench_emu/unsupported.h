// What a GPU has and aotbench's CUDA emulator does not run: each is a compile-time error that names the feature
// at the line that uses it (included by aotbench_cuda_emu.h; the headers of whole features, such as <mma.h>,
// are refused where they are included).
#pragma once

#define AOTB_EMU_REFUSE(name, what)                                                                  \
  template <class... T>                                                                            \
  inline int name(T...) {                                                                          \
    static_assert(aotb_emu::always_false<std::tuple<T...>>::value, what " is not emulated by aotbench: run this " \
                  "kernel on a GPU (emulate=False)");                                              \
    return 0;                                                                                      \
  }
AOTB_EMU_REFUSE(tex1Dfetch, "texture memory (tex1Dfetch)")
AOTB_EMU_REFUSE(tex1D, "texture memory (tex1D)")
AOTB_EMU_REFUSE(tex2D, "texture memory (tex2D)")
AOTB_EMU_REFUSE(tex3D, "texture memory (tex3D)")
AOTB_EMU_REFUSE(surf2Dread, "surface memory (surf2Dread)")
AOTB_EMU_REFUSE(surf2Dwrite, "surface memory (surf2Dwrite)")
AOTB_EMU_REFUSE(cudaCreateTextureObject, "texture objects (cudaCreateTextureObject)")
AOTB_EMU_REFUSE(cudaCreateSurfaceObject, "surface objects (cudaCreateSurfaceObject)")
AOTB_EMU_REFUSE(__pipeline_memcpy_async, "cp.async (__pipeline_memcpy_async)")
AOTB_EMU_REFUSE(__pipeline_commit, "cp.async (__pipeline_commit)")
AOTB_EMU_REFUSE(__pipeline_wait_prior, "cp.async (__pipeline_wait_prior)")
AOTB_EMU_REFUSE(cudaGraphCreate, "CUDA graphs (cudaGraphCreate)")
AOTB_EMU_REFUSE(cudaStreamBeginCapture, "CUDA graph capture (cudaStreamBeginCapture)")
#undef AOTB_EMU_REFUSE
typedef unsigned long long cudaTextureObject_t;
typedef unsigned long long cudaSurfaceObject_t;

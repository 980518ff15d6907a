// The emulator's assert (aotbench_cuda_emu.h): a failed assertion in a kernel stops the kernel with
// cudaErrorAssert and names the line, as on a GPU, instead of aborting the whole process.
#include_next <assert.h>
#undef assert
#ifdef NDEBUG
#define assert(e) ((void)0)
#else
#define assert(e) ((e) ? (void)0 : ::aotb_emu::kernel_fault("assertion `" #e "` failed", __FILE__, __LINE__))
#endif

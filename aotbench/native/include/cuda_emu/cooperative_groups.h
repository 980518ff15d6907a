// cooperative_groups for aotbench's CUDA emulator: the thread block, tiles of up to 32 threads (tiled_partition)
// with their shuffles and votes, coalesced_threads(), and cg::reduce (<cooperative_groups/reduce.h>). A tile's
// operations are the warp operations with the tile's lanes as the mask. Grid-wide groups (this_grid().sync(),
// cooperative launches) and memcpy_async are not emulated: using them is a compile-time error that says so.
#pragma once
#include "aotbench_cuda_emu.h"

namespace cooperative_groups {

class thread_block {
 public:
  void sync(AOTB_EMU_HERE) const { aotb_emu::barrier(aotb_emu::kBarrier, 1, aotb_file, aotb_line); }
  unsigned thread_rank() const {
    return (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  }
  unsigned size() const { return blockDim.x * blockDim.y * blockDim.z; }
  unsigned num_threads() const { return size(); }
  dim3 group_index() const { return dim3(blockIdx.x, blockIdx.y, blockIdx.z); }
  dim3 thread_index() const { return dim3(threadIdx.x, threadIdx.y, threadIdx.z); }
  dim3 group_dim() const { return blockDim; }
  dim3 dim_threads() const { return blockDim; }
};

inline thread_block this_thread_block() { return thread_block(); }

// A tile of Size consecutive threads of the block (Size a power of two up to 32): the warp's lanes
// [base, base + Size) where base is the thread's lane rounded down.
template <unsigned Size>
class thread_block_tile {
  static_assert(Size >= 1 && Size <= 32 && (Size & (Size - 1)) == 0,
                "tiled_partition<N>: N must be a power of two from 1 to 32 (larger tiles are not emulated)");

 public:
  static constexpr unsigned num_threads() { return Size; }
  static constexpr unsigned size() { return Size; }
  unsigned thread_rank() const { return lane() % Size; }
  unsigned meta_group_rank() const { return this_thread_block().thread_rank() / Size; }
  unsigned meta_group_size() const { return (this_thread_block().size() + Size - 1) / Size; }
  unsigned mask() const {
    const unsigned base = lane() / Size * Size;
    return (Size == 32 ? 0xffffffffu : ((1u << Size) - 1u)) << base;
  }
  void sync(AOTB_EMU_HERE) const {
    aotb_emu::warp_op(aotb_emu::kSyncWarp, mask(), 0, 0, 32, 0, aotb_file, aotb_line);
  }
  template <class T>
  T shfl(T var, int src_rank, AOTB_EMU_HERE) const {
    return aotb_emu::shuffle(aotb_emu::kShfl, mask(), var, src_rank, Size, aotb_file, aotb_line);
  }
  template <class T>
  T shfl_down(T var, unsigned delta, AOTB_EMU_HERE) const {
    return aotb_emu::shuffle(aotb_emu::kShflDown, mask(), var, static_cast<int>(delta), Size, aotb_file, aotb_line);
  }
  template <class T>
  T shfl_up(T var, unsigned delta, AOTB_EMU_HERE) const {
    return aotb_emu::shuffle(aotb_emu::kShflUp, mask(), var, static_cast<int>(delta), Size, aotb_file, aotb_line);
  }
  template <class T>
  T shfl_xor(T var, unsigned lane_mask, AOTB_EMU_HERE) const {
    return aotb_emu::shuffle(aotb_emu::kShflXor, mask(), var, static_cast<int>(lane_mask), Size, aotb_file,
                             aotb_line);
  }
  unsigned ballot(int predicate, AOTB_EMU_HERE) const {  // bit i: the tile's thread of rank i
    const unsigned all = static_cast<unsigned>(
        aotb_emu::warp_op(aotb_emu::kBallot, mask(), predicate != 0, 0, 32, 0, aotb_file, aotb_line));
    return all >> (lane() / Size * Size);
  }
  bool any(int predicate, AOTB_EMU_HERE) const {
    return aotb_emu::warp_op(aotb_emu::kAny, mask(), predicate != 0, 0, 32, 0, aotb_file, aotb_line) != 0;
  }
  bool all(int predicate, AOTB_EMU_HERE) const {
    return aotb_emu::warp_op(aotb_emu::kAll, mask(), predicate != 0, 0, 32, 0, aotb_file, aotb_line) != 0;
  }

 private:
  static unsigned lane() { return this_thread_block().thread_rank() % 32; }
};

template <unsigned Size, class Parent>
inline thread_block_tile<Size> tiled_partition(const Parent &) {
  return thread_block_tile<Size>();
}

// The threads of the warp that are here now (the emulator's warps do not diverge: the lanes that have not
// exited).
class coalesced_group {
 public:
  unsigned size() const { return static_cast<unsigned>(__builtin_popcount(aotb_emu::active_mask())); }
  unsigned num_threads() const { return size(); }
  unsigned thread_rank() const {
    return static_cast<unsigned>(__builtin_popcount(aotb_emu::active_mask() & aotb_emu::lane_mask(0)));
  }
  void sync(AOTB_EMU_HERE) const {
    aotb_emu::warp_op(aotb_emu::kSyncWarp, aotb_emu::active_mask(), 0, 0, 32, 0, aotb_file, aotb_line);
  }
  unsigned ballot(int predicate, AOTB_EMU_HERE) const {
    return static_cast<unsigned>(aotb_emu::warp_op(aotb_emu::kBallot, aotb_emu::active_mask(), predicate != 0, 0,
                                                   32, 0, aotb_file, aotb_line));
  }
};
inline coalesced_group coalesced_threads() { return coalesced_group(); }

template <class T>
inline void sync(const T &group, AOTB_EMU_HERE) {
  group.sync(aotb_file, aotb_line);
}
template <class T>
inline unsigned thread_rank(const T &group) { return group.thread_rank(); }

// Grid-wide groups need a cooperative launch, which the emulator does not run.
struct grid_group {
  template <class T = void>
  void sync() const {
    static_assert(aotb_emu::always_false<T>::value,
                  "grid-wide sync (this_grid().sync()) is not emulated by aotbench: run this kernel on a GPU");
  }
};
template <class T = void>
inline grid_group this_grid() {
  static_assert(aotb_emu::always_false<T>::value,
                "grid groups (this_grid()) are not emulated by aotbench: run this kernel on a GPU");
  return grid_group();
}

// cg::reduce's operators (<cooperative_groups/reduce.h>).
template <class T>
struct plus {
  T operator()(T a, T b) const { return a + b; }
};
template <class T>
struct less {
  T operator()(T a, T b) const { return b < a ? b : a; }
};
template <class T>
struct greater {
  T operator()(T a, T b) const { return a < b ? b : a; }
};
template <class T>
struct bit_and {
  T operator()(T a, T b) const { return a & b; }
};
template <class T>
struct bit_or {
  T operator()(T a, T b) const { return a | b; }
};
template <class T>
struct bit_xor {
  T operator()(T a, T b) const { return a ^ b; }
};

// The reduction of `value` over the tile, given to every thread of it (a butterfly of shfl_xor).
template <unsigned Size, class T, class Op>
inline T reduce(const thread_block_tile<Size> &tile, T value, Op op) {
  for (unsigned offset = Size / 2; offset > 0; offset /= 2) value = op(value, tile.shfl_xor(value, offset));
  return value;
}

}  // namespace cooperative_groups

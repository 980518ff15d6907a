// aotbench's CUDA emulator: the scheduler that runs a launch's threads on the CPU (the header the kernel sees is
// native/include/cuda_emu/aotbench_cuda_emu.h). Compiled into every emulated kernel library, so each library has
// its own state (hidden symbols, -fno-gnu-unique) and two emulated ops never share a block's shared memory.
//
// A block runs on one CPU thread. Its CUDA threads run one after another as plain calls on a "runner" fiber;
// a thread that reaches a rendezvous (__syncthreads, a warp operation) is suspended there, keeps that fiber, and
// a fresh runner goes on with the next thread. When every thread of the block has exited or waits, the waits
// are resolved: complete warp operations get their results, a barrier that every live thread reached opens, and
// anything else (threads at different barriers, a warp whose mask names lanes that are gone, a deadlock) stops
// the kernel with an error that names the line, the block and the threads. Threads that never wait cost one
// call each and no fiber. The order in which waiting threads resume (and in which warps start) is a seeded
// permutation, so a kernel that races on shared memory does not come out right by luck. Blocks are spread over
// the cores by a small pool of CPU threads.
//
// Python drives it through the extern "C" aotb_emu_* functions at the end (configure, take the report).
#include <pthread.h>
#include <signal.h>
#include <sched.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "aotbench_cuda_emu.h"

// The scheduler is never instrumented itself; its asan and tsan builds (-DAOTB_EMU_ASAN / -DAOTB_EMU_TSAN, linked
// into sanitized libraries) tell the sanitizer about fiber switches, barriers and warp operations, run every
// block on one CPU thread, and name the CUDA thread in reports.
#if defined(AOTB_EMU_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(AOTB_EMU_TSAN)
#include <sanitizer/tsan_interface.h>
#endif
#if defined(AOTB_EMU_ASAN) || defined(AOTB_EMU_TSAN)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

#undef printf

namespace aotb_emu {


namespace {

// -- fibers ------------------------------------------------------------------------------------------------------
#if defined(__x86_64__) && !defined(AOTB_EMU_UCONTEXT)
// Saves the callee-saved registers on this stack, stores the stack pointer in *from, continues on `to`. It ends
// with an indirect jump rather than `ret`: a return to another stack always misses the return-stack predictor,
// which costs about 8 ns a switch here (20 ns per round trip with `ret`, 4-7 ns with the jump, measured).
extern "C" void aotb_emu_switch(void **from, void *to);
extern "C" void aotb_emu_trampoline();
asm(R"(
  .text
  .p2align 4
  .hidden aotb_emu_switch
  .globl aotb_emu_switch
  .type aotb_emu_switch, @function
aotb_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  popq %rcx
  jmpq *%rcx
  .size aotb_emu_switch, .-aotb_emu_switch
  .hidden aotb_emu_trampoline
  .globl aotb_emu_trampoline
  .type aotb_emu_trampoline, @function
aotb_emu_trampoline:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size aotb_emu_trampoline, .-aotb_emu_trampoline
)");
struct Context {
  void *sp = nullptr;
};
inline void make_context(Context *c, char *stack, size_t size, void (*entry)(void *), void *arg) {
  uintptr_t top = (reinterpret_cast<uintptr_t>(stack) + size) & ~uintptr_t(15);
  void **sp = reinterpret_cast<void **>(top - 72);  // six registers and the return address; 16-aligned at the call
  sp[0] = nullptr;                                   // r15
  sp[1] = nullptr;                                   // r14
  sp[2] = reinterpret_cast<void *>(entry);           // r13
  sp[3] = arg;                                       // r12
  sp[4] = nullptr;                                   // rbx
  sp[5] = nullptr;                                   // rbp
  sp[6] = reinterpret_cast<void *>(&aotb_emu_trampoline);
  c->sp = sp;
}
inline void switch_context(Context *from, Context *to) { aotb_emu_switch(&from->sp, to->sp); }
#else
}  // namespace
}  // namespace aotb_emu
#include <ucontext.h>
namespace aotb_emu {
namespace {
// Other architectures: ucontext (a system call per switch, so about 40x slower than the x86-64 switch).
struct Context {
  ucontext_t uc;
};
void (*g_entry)(void *);
void ucontext_entry(unsigned lo, unsigned hi) {
  void *arg = reinterpret_cast<void *>((static_cast<uintptr_t>(hi) << 32) | lo);
  g_entry(arg);
}
inline void make_context(Context *c, char *stack, size_t size, void (*entry)(void *), void *arg) {
  getcontext(&c->uc);
  c->uc.uc_stack.ss_sp = stack;
  c->uc.uc_stack.ss_size = size;
  c->uc.uc_link = nullptr;
  g_entry = entry;
  const uintptr_t a = reinterpret_cast<uintptr_t>(arg);
  makecontext(&c->uc, reinterpret_cast<void (*)()>(ucontext_entry), 2, static_cast<unsigned>(a),
              static_cast<unsigned>(a >> 32));
}
inline void switch_context(Context *from, Context *to) { swapcontext(&from->uc, &to->uc); }
#endif

constexpr size_t kStackBytes = AOTB_EMU_STACK_BYTES;  // a fiber's whole region, aligned to its size
static_assert((kStackBytes & (kStackBytes - 1)) == 0, "fiber regions are aligned to their power-of-two size");


struct Worker;
// A fiber's record lives in its own region, in the slot aotb_emu::here() reads (fiber_slot): `current` first.
struct Fiber {
  const Builtins *current = nullptr;  // the builtins of the thread on this fiber
  Context context;
  Worker *worker = nullptr;
  char *mapping = nullptr;  // the region: a guard page, the stack, this record
  size_t stack_bytes = 0;   // the stack, right below this record
  bool idle = true;         // its runner loop found no thread to start: back in the pool
#ifdef AOTB_EMU_TSAN
  void *tsan = nullptr;
#endif
};
static_assert(sizeof(Fiber) <= 128, "a fiber's record fits its slot");

// -- launches ----------------------------------------------------------------------------------------------------
enum Status : uint8_t { kNotStarted, kRunning, kWaiting, kExited };

struct ThreadRecord {
  uint8_t status;
  uint8_t op;  // what it waits for (Op)
  uint8_t width;
  uint8_t is_signed;
  int line;
  unsigned mask;
  int param;
  const char *file;
  uint64_t value;
  uint64_t result;
  Fiber *fiber;
};

struct Settings {
  uint64_t seed = 0x5eedULL;  // 0: index order
  int threads = 0;            // CPU threads for blocks; 0: every usable core
  int synccheck = 0;          // report hazards a GPU tolerates (threads that exited before a barrier)
};
Settings g_settings;
std::mutex g_report_mutex;
std::string g_hazards;      // synccheck's findings (they do not stop the kernel)
constexpr size_t kPrintfBytes = 1 << 20;  // device printf kept per launch (a GPU's default printf buffer)

// What one call of the host function has met, kept per host thread (two Python threads may call one op).
struct CallState {
  std::string report;                    // the first error of the call: what stops it
  cudaError_t last_error = cudaSuccess;  // what cudaGetLastError returns
  cudaError_t sticky = cudaSuccess;      // an error inside a kernel: later launches of this call do not run
  int unchecked = 0;                     // a refused launch nobody asked cudaGetLastError about ...
  std::string refused;                   // ... and what it was
};
thread_local CallState t_call;
int g_max_dynamic_shared = 48 * 1024;
constexpr int kMaxDynamicSharedOptin = 227 * 1024;

struct LaunchState {
  void (*body)(void *);
  void *args;
  dim3 grid, block;
  size_t shared_bytes;
  const char *kernel;
  const char *file;
  int line;
  uint64_t blocks;
  unsigned nthreads;
  uint64_t serial;  // unique per launch in this library (never 0)
  std::mutex error_mutex;
  std::string error;  // the first error a block met (any CPU thread), handed to the host thread at the end
  cudaError_t error_code = cudaSuccess;
  std::atomic<size_t> printed{0};  // bytes of device printf kept so far (capped like a GPU's printf buffer)
  std::atomic<uint64_t> next_block{0};
  std::atomic<int> failed{0};
  std::atomic<int> busy{0};
  std::mutex prints_mutex;
  std::vector<std::pair<uint64_t, std::string>> prints;
#ifdef AOTB_EMU_TSAN
  char host_before = 0;  // the host's work before the launch happens before every thread of it ...
  char host_after = 0;   // ... and every thread's work before the host's after it
#endif
};

std::string where(const char *file, int line) { return std::string(file ? file : "?") + ":" + std::to_string(line); }

std::string triple(unsigned x, unsigned y, unsigned z) {
  return "(" + std::to_string(x) + "," + std::to_string(y) + "," + std::to_string(z) + ")";
}

struct Block {
  LaunchState *launch = nullptr;
  uint64_t prepared_for = 0;  // the launch (its serial number) `builtins` holds the thread indices of
  uint64_t linear = 0;
  uint3 index{};
  unsigned nthreads = 0;
  std::vector<ThreadRecord> threads;
  std::vector<Builtins> builtins;
  std::vector<unsigned> order;  // the order threads start in
  std::vector<unsigned> released;  // the threads a resolution lets go on
  unsigned warp_waiters = 0;       // threads waiting at a warp operation now
  unsigned cursor = 0;
  unsigned live = 0;
  uint64_t phase = 0;
  bool abort = false;
  std::string prints;
  std::vector<char> dynamic_shared;
  char sync_object = 0;     // racecheck: a barrier's arrivals release it, its departures acquire it
  char warp_sync[32] = {};  // the same for each warp's operations
#ifdef AOTB_EMU_TSAN
  std::vector<Fiber *> held;  // racecheck: each CUDA thread of the block keeps a fiber (an identity) of its own
#endif
};

// One CPU thread that runs blocks: its scheduler context, its pool of fibers, the block it runs now.
struct Worker {
  Context scheduler;
  std::vector<Fiber *> pool;
  std::vector<Fiber *> all;
  Block block;
  unsigned running = 0;  // the CUDA thread on the CPU now
  bool in_block = false;  // while a block runs on this CPU thread (its threads may call the emulator)
#ifdef AOTB_EMU_TSAN
  void *tsan_scheduler = nullptr;
  char block_end[2] = {};  // block k's threads release [k % 2] as they exit; block k+1's acquire it as they start
#endif
#ifdef AOTB_EMU_ASAN
  const void *scheduler_stack = nullptr;
  size_t scheduler_stack_size = 0;
#endif
  ~Worker() {
    for (Fiber *f : all) {
#ifdef AOTB_EMU_TSAN
      __tsan_destroy_fiber(f->tsan);
#endif
      munmap(f->mapping, kStackBytes);  // the record goes with its region
    }
  }
};
thread_local Worker *t_worker = nullptr;

void fiber_main(void *arg);

#ifdef AOTB_EMU_ASAN
inline char *stack_bottom(Fiber *f) { return f->mapping + sysconf(_SC_PAGESIZE); }
#endif

void reset_fiber(Fiber *f) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
#ifdef AOTB_EMU_ASAN
  __asan_unpoison_memory_region(f->mapping + page, f->stack_bytes);  // frames a stopped kernel left
#endif
  make_context(&f->context, f->mapping + page, f->stack_bytes, &fiber_main, f);
  f->idle = true;
}

Fiber *new_fiber(Worker *w) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  // Twice the size, then trimmed to a region aligned to its size (what aotb_emu::here() relies on).
  void *m = mmap(nullptr, 2 * kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (m == MAP_FAILED) return nullptr;
  const uintptr_t raw = reinterpret_cast<uintptr_t>(m);
  const uintptr_t start = (raw + kStackBytes - 1) & ~(kStackBytes - 1);
  if (start > raw) munmap(m, start - raw);
  const uintptr_t end = start + kStackBytes;
  if (raw + 2 * kStackBytes > end) munmap(reinterpret_cast<void *>(end), raw + 2 * kStackBytes - end);
  mprotect(reinterpret_cast<void *>(start), page, PROT_NONE);  // an overflow faults, not writes over the next stack
  auto *f = new (reinterpret_cast<void *>(fiber_slot(start))) Fiber;
  f->mapping = reinterpret_cast<char *>(start);
  f->stack_bytes = reinterpret_cast<uintptr_t>(f) - start - page;
  f->worker = w;
#ifdef AOTB_EMU_TSAN
  f->tsan = __tsan_create_fiber(0);
#endif
  reset_fiber(f);
  w->all.push_back(f);
  return f;
}

// Into a fiber from the scheduler, and back.
void enter(Worker *w, Fiber *f) {
#ifdef AOTB_EMU_TSAN
  __tsan_switch_to_fiber(f->tsan, 1);  // 1: no synchronisation implied (barriers say when threads sync)
#endif
#ifdef AOTB_EMU_ASAN
  void *fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, stack_bottom(f), f->stack_bytes);
#endif
  switch_context(&w->scheduler, &f->context);
#ifdef AOTB_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}
void leave(Worker *w, Fiber *f) {
#ifdef AOTB_EMU_TSAN
  __tsan_switch_to_fiber(w->tsan_scheduler, 1);
#endif
#ifdef AOTB_EMU_ASAN
  void *fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, w->scheduler_stack, w->scheduler_stack_size);
#endif
  switch_context(&f->context, &w->scheduler);
#ifdef AOTB_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

// On the host thread: the first error of the call stops it (later ones are consequences).
void record_error(cudaError_t code, const std::string &message) {
  if (t_call.report.empty()) t_call.report = message;
  if (t_call.sticky == cudaSuccess) t_call.sticky = code;
  t_call.last_error = code;
}

std::string thread_name(const Block &b, unsigned t) {
  const Builtins &bi = b.builtins[t];
  return triple(bi.thread_idx.x, bi.thread_idx.y, bi.thread_idx.z);
}

uint3 thread_index(const Block &b, unsigned t) {
  const dim3 d = b.launch->block;
  return uint3{t % d.x, (t / d.x) % d.y, t / (d.x * d.y)};
}

// A list of threads by their index, compressed into ranges of linear ids where it is long.
std::string thread_list(const Block &b, const std::vector<unsigned> &ids) {
  std::string out;
  size_t shown = 0;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) j++;
    if (!out.empty()) out += ", ";
    out += thread_name(b, ids[i]);
    if (j > i) out += "..." + thread_name(b, ids[j]);
    i = j + 1;
    if (++shown == 4 && i < ids.size()) {
      out += ", ... (" + std::to_string(ids.size()) + " threads)";
      break;
    }
  }
  return out;
}

std::string block_name(const Block &b) { return triple(b.index.x, b.index.y, b.index.z); }

std::string kernel_prefix(const Block &b) {
  return "kernel " + std::string(b.launch->kernel) + " (launched at " + where(b.launch->file, b.launch->line) +
         "), block " + block_name(b) + ": ";
}

// Stops the block (and the launch) with an error; called on the scheduler's side.
void fail_block(Block &b, cudaError_t code, const std::string &message) {
  LaunchState *L = b.launch;
  {
    std::lock_guard<std::mutex> lock(L->error_mutex);
    if (L->error.empty()) {
      L->error = kernel_prefix(b) + message;
      L->error_code = code;
    }
  }
  b.abort = true;
  L->failed.store(1, std::memory_order_relaxed);
}

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

// A permutation of 0..n-1 from a seed: an offset and a stride prime to n.
void permute(std::vector<unsigned> &items, uint64_t seed) {
  const size_t n = items.size();
  if (n < 2 || seed == 0) return;
  const uint64_t r = mix(seed);
  size_t stride = 1 + (r % n);
  auto gcd = [](size_t a, size_t b) {
    while (b) {
      const size_t t = a % b;
      a = b;
      b = t;
    }
    return a;
  };
  while (gcd(stride, n) != 1) stride++;
  if (stride >= n) stride -= n;
  size_t at = (r >> 32) % n;
  thread_local std::vector<unsigned> out;
  out.resize(n);
  for (size_t k = 0; k < n; k++) {
    out[k] = items[at];
    at += stride;
    if (at >= n) at -= n;
  }
  items.swap(out);
}

// -- running a block -------------------------------------------------------------------------------------------
std::string escaped_what() {
  try {
    throw;
  } catch (const std::exception &e) {
    return e.what();
  } catch (...) {
    return "not a std::exception";
  }
}

inline void run_thread(Worker *w, Block &b, unsigned t, Fiber *f) {
  ThreadRecord &r = b.threads[t];
  r.status = kRunning;
  r.fiber = f;
  w->running = t;
  f->current = &b.builtins[t];
#ifdef AOTB_EMU_TSAN
  __tsan_acquire(&b.launch->host_before);
  __tsan_acquire(&w->block_end[(b.linear + 1) & 1]);
  const uint3 ti = b.builtins[t].thread_idx;
  const std::string name = "thread " + triple(ti.x, ti.y, ti.z) + " of block " + block_name(b);
  __tsan_set_fiber_name(f->tsan, name.c_str());
#endif
  try {
    b.launch->body(b.launch->args);
  } catch (...) {  // device code cannot throw on a GPU; here it must not unwind past the fiber
    fail_block(b, cudaErrorLaunchFailure, "thread " + thread_name(b, t) + " let a C++ exception escape (" +
                                              escaped_what() + "): device code cannot throw");
  }
  r.status = kExited;
  b.live--;
#ifdef AOTB_EMU_TSAN
  __tsan_release(&w->block_end[b.linear & 1]);
  __tsan_release(&b.launch->host_after);
#endif
}

void fiber_main(void *arg) {
  auto *f = static_cast<Fiber *>(arg);
  Worker *w = f->worker;
#ifdef AOTB_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &w->scheduler_stack, &w->scheduler_stack_size);  // its first entry
#endif
  for (;;) {
    Block &b = w->block;
    f->idle = false;
    while (b.cursor < b.nthreads && !b.abort) {
      const unsigned t = b.order[b.cursor++];
      run_thread(w, b, t, f);
#ifdef AOTB_EMU_TSAN
      break;  // one CUDA thread per fiber: ThreadSanitizer tells threads apart by their fibers
#endif
    }
    f->idle = true;
    leave(w, f);
  }
}

Fiber *take_fiber(Worker *w) {
  if (!w->pool.empty()) {
    Fiber *f = w->pool.back();
    w->pool.pop_back();
    return f;
  }
  return new_fiber(w);
}

std::string op_name(int op) {
  switch (op) {
    case kBarrier: return "__syncthreads()";
    case kBarrierCount: return "__syncthreads_count()";
    case kBarrierAnd: return "__syncthreads_and()";
    case kBarrierOr: return "__syncthreads_or()";
    case kSyncWarp: return "__syncwarp()";
    case kShfl: return "__shfl_sync()";
    case kShflUp: return "__shfl_up_sync()";
    case kShflDown: return "__shfl_down_sync()";
    case kShflXor: return "__shfl_xor_sync()";
    case kBallot: return "__ballot_sync()";
    case kAny: return "__any_sync()";
    case kAll: return "__all_sync()";
    case kMatchAny: return "__match_any_sync()";
    case kMatchAll: return "__match_all_sync()";
    default: return "a warp reduction (__reduce_*_sync)";
  }
}

bool is_barrier(int op) { return op >= kBarrier && op <= kBarrierOr; }

char hex_digit(unsigned v) { return "0123456789abcdef"[v & 15]; }
std::string hex(unsigned v) {
  std::string s = "0x";
  for (int i = 7; i >= 0; i--) s += hex_digit(v >> (4 * i));
  return s;
}

// The warps' complete operations get their results; returns the threads released. A mask that names lanes that
// have exited or do not exist, or lanes of one operation waiting at different ones, stops the block.
std::vector<unsigned> resolve_warps(Block &b) {
  std::vector<unsigned> released;
  const unsigned warps = (b.nthreads + 31) / 32;
  for (unsigned wi = 0; wi < warps && !b.abort; wi++) {
    const unsigned base = wi * 32;
    const unsigned lanes = std::min(32u, b.nthreads - base);
    unsigned waiting = 0, present = 0;
    for (unsigned l = 0; l < lanes; l++) {
      const ThreadRecord &r = b.threads[base + l];
      if (r.status != kExited) present |= 1u << l;
      if (r.status == kWaiting && !is_barrier(r.op)) waiting |= 1u << l;
    }
    unsigned done = 0;
    for (unsigned l = 0; l < lanes && !b.abort; l++) {
      if (!(waiting >> l & 1) || (done >> l & 1)) continue;
      const ThreadRecord &r = b.threads[base + l];
      const unsigned mask = r.mask;
      if (!(mask >> l & 1)) {
        fail_block(b, cudaErrorLaunchFailure,
                   op_name(r.op) + " at " + where(r.file, r.line) + ": thread " + thread_name(b, base + l) +
                       " (lane " + std::to_string(l) + ") calls it with mask " + hex(mask) +
                       ", which does not name its own lane");
        break;
      }
      const unsigned missing = mask & ~present;
      if (missing) {
        int first = __builtin_ctz(missing);
        std::string why = base + first >= b.nthreads ? "do not exist (the block has " + std::to_string(b.nthreads) +
                                                           " threads)"
                                                     : "have exited";
        fail_block(b, cudaErrorLaunchFailure,
                   op_name(r.op) + " at " + where(r.file, r.line) + " in warp " + std::to_string(wi) +
                       ": its mask " + hex(mask) + " names lanes that " + why + " (mask of those lanes: " +
                       hex(missing) + "). Pass a mask of the lanes that take part, e.g. __activemask() or " +
                       "__ballot_sync(0xffffffff, i < n) computed before any thread returns.");
        break;
      }
      if ((mask & waiting) != mask) continue;  // some lanes of the mask are elsewhere (at a barrier): not yet
      for (unsigned k = 0; k < lanes; k++) {
        if (!(mask >> k & 1)) continue;
        const ThreadRecord &o = b.threads[base + k];
        if (o.op != r.op || o.mask != mask) {
          fail_block(b, cudaErrorLaunchFailure,
                     "warp " + std::to_string(wi) + ": lane " + std::to_string(l) + " is at " + op_name(r.op) +
                         " (" + where(r.file, r.line) + ", mask " + hex(mask) + ") while lane " + std::to_string(k) +
                         " it names is at " + op_name(o.op) + " (" + where(o.file, o.line) + ", mask " +
                         hex(o.mask) + "): every lane of a mask must take part in the same operation");
          break;
        }
      }
      if (b.abort) break;
      const int width = r.width;
      if (width <= 0 || width > 32 || (width & (width - 1))) {
        fail_block(b, cudaErrorLaunchFailure,
                   op_name(r.op) + " at " + where(r.file, r.line) + ": width " + std::to_string(width) +
                       " is not a power of two from 1 to 32");
        break;
      }
      // Results for every lane of this mask.
      uint64_t vote = 0;
      uint64_t agg = 0;
      bool first = true;
      for (unsigned k = 0; k < lanes; k++) {
        if (!(mask >> k & 1)) continue;
        const ThreadRecord &o = b.threads[base + k];
        if (o.value) vote |= uint64_t(1) << k;
        const uint64_t v = o.value;
        if (first) {
          agg = v;
          first = false;
          continue;
        }
        switch (r.op) {
          case kReduceAdd: agg = static_cast<uint32_t>(agg + v); break;
          case kReduceMin:
            agg = r.is_signed ? (static_cast<int32_t>(v) < static_cast<int32_t>(agg) ? v : agg) : std::min(agg, v);
            break;
          case kReduceMax:
            agg = r.is_signed ? (static_cast<int32_t>(v) > static_cast<int32_t>(agg) ? v : agg) : std::max(agg, v);
            break;
          case kReduceAnd: agg &= v; break;
          case kReduceOr: agg |= v; break;
          case kReduceXor: agg ^= v; break;
          default: break;
        }
      }
      bool all_same = true;
      for (unsigned k = 0; k < lanes; k++)
        if ((mask >> k & 1) && b.threads[base + k].value != r.value) all_same = false;
      for (unsigned k = 0; k < lanes; k++) {
        if (!(mask >> k & 1)) continue;
        ThreadRecord &o = b.threads[base + k];
        const unsigned seg = (k / width) * width;
        int src = -1;
        switch (r.op) {
          case kShfl: src = static_cast<int>(seg + (static_cast<unsigned>(o.param) % width)); break;
          case kShflUp: src = static_cast<int>(k) - o.param < static_cast<int>(seg) ? static_cast<int>(k)
                                                                                    : static_cast<int>(k) - o.param;
            break;
          case kShflDown: src = k + o.param >= seg + width ? static_cast<int>(k) : static_cast<int>(k + o.param);
            break;
          case kShflXor: {
            const unsigned s = k ^ static_cast<unsigned>(o.param);
            src = s >= seg + width ? static_cast<int>(k) : static_cast<int>(s);
            break;
          }
          default: break;
        }
        if (src >= 0) {
          const bool there = src < 32 && base + src < b.nthreads && (present >> src & 1) &&
                             b.threads[base + src].status == kWaiting && b.threads[base + src].op == r.op;
          if (!there) {
            fail_block(b, cudaErrorLaunchFailure,
                       op_name(r.op) + " at " + where(o.file, o.line) + ": lane " + std::to_string(k) +
                           " of warp " + std::to_string(wi) + " reads lane " + std::to_string(src) +
                           ", which is not taking part (exited, absent, or outside the mask " + hex(mask) +
                           "): the value would be undefined on a GPU");
            break;
          }
          o.result = b.threads[base + src].value;
        } else {
          switch (r.op) {
            case kBallot: o.result = vote; break;
            case kAny: o.result = vote != 0; break;
            case kAll: o.result = vote == mask; break;
            case kMatchAny: {
              uint64_t same = 0;
              for (unsigned q = 0; q < lanes; q++)
                if ((mask >> q & 1) && b.threads[base + q].value == o.value) same |= uint64_t(1) << q;
              o.result = same;
              break;
            }
            case kMatchAll: o.result = all_same ? mask : 0; break;
            case kSyncWarp: o.result = 0; break;
            default: o.result = agg; break;
          }
        }
      }
      if (b.abort) break;
      for (unsigned k = 0; k < lanes; k++)
        if (mask >> k & 1) {
          released.push_back(base + k);
          done |= 1u << k;
        }
    }
  }
  return released;
}

// Everyone live waits and no warp operation completed: open the barrier, or stop with what went wrong.
bool same_site(const ThreadRecord &a, const ThreadRecord &b) {
  return a.line == b.line && a.op == b.op && (a.file == b.file || std::strcmp(a.file, b.file) == 0);
}

std::vector<unsigned> resolve_barrier(Block &b) {
  // The common case first: every live thread waits at one barrier (no allocation, one pass).
  const ThreadRecord *site = nullptr;
  bool simple = true;
  unsigned exited_count = 0;
  for (unsigned t = 0; t < b.nthreads && simple; t++) {
    const ThreadRecord &r = b.threads[t];
    if (r.status == kExited) {
      exited_count++;
    } else if (!is_barrier(r.op)) {
      simple = false;
    } else if (site == nullptr) {
      site = &r;
    } else if (!same_site(r, *site)) {
      simple = false;
    }
  }
  if (simple && site != nullptr && (exited_count == 0 || !g_settings.synccheck)) {
    std::vector<unsigned> &released = b.released;
    released.clear();
    int count = 0;
    for (unsigned t = 0; t < b.nthreads; t++) {
      const ThreadRecord &r = b.threads[t];
      if (r.status == kExited) continue;
      released.push_back(t);
      count += r.value != 0;
    }
    const int live = static_cast<int>(released.size());
    if (site->op != kBarrier) {
      for (unsigned t : released) {
        ThreadRecord &r = b.threads[t];
        r.result = r.op == kBarrierCount ? static_cast<uint64_t>(count)
                                         : (r.op == kBarrierAnd ? count == live : count > 0);
      }
    }
    return released;
  }
  std::vector<unsigned> at_barrier, at_warp, exited;
  for (unsigned t = 0; t < b.nthreads; t++) {
    const ThreadRecord &r = b.threads[t];
    if (r.status == kExited)
      exited.push_back(t);
    else if (is_barrier(r.op))
      at_barrier.push_back(t);
    else
      at_warp.push_back(t);
  }
  if (!at_warp.empty()) {
    const ThreadRecord &w = b.threads[at_warp[0]];
    std::string message = op_name(w.op) + " at " + where(w.file, w.line) + " waits for lanes that never arrive: " +
                          "threads " + thread_list(b, at_warp) + " wait at warp operations";
    if (!at_barrier.empty()) {
      const ThreadRecord &s = b.threads[at_barrier[0]];
      message += ", threads " + thread_list(b, at_barrier) + " at " + op_name(s.op) + " (" +
                 where(s.file, s.line) + ")";
    }
    fail_block(b, cudaErrorLaunchFailure, message + ". On a GPU this kernel would hang.");
    return {};
  }
  // Group by barrier site.
  const ThreadRecord &first = b.threads[at_barrier[0]];
  std::vector<unsigned> elsewhere;
  for (unsigned t : at_barrier) {
    const ThreadRecord &r = b.threads[t];
    if (!same_site(r, first)) elsewhere.push_back(t);
  }
  if (!elsewhere.empty()) {
    std::vector<unsigned> here;
    for (unsigned t : at_barrier)
      if (std::find(elsewhere.begin(), elsewhere.end(), t) == elsewhere.end()) here.push_back(t);
    const ThreadRecord &o = b.threads[elsewhere[0]];
    fail_block(b, cudaErrorLaunchFailure,
               op_name(first.op) + " at " + where(first.file, first.line) +
                   " is not reached by every thread of the block: threads " + thread_list(b, here) +
                   " wait there, threads " + thread_list(b, elsewhere) + " wait at " + op_name(o.op) + " at " +
                   where(o.file, o.line) +
                   ". Every thread of a block must reach the same __syncthreads (do not call it inside a branch "
                   "that only some threads take).");
    return {};
  }
  if (!exited.empty() && g_settings.synccheck) {
    std::lock_guard<std::mutex> lock(g_report_mutex);
    if (g_hazards.size() < 64 * 1024)
      g_hazards += kernel_prefix(b) + op_name(first.op) + " at " + where(first.file, first.line) + ": threads " +
                   thread_list(b, exited) + " exited before reaching it (a GPU counts them as arrived; the CUDA " +
                   "programming guide leaves it undefined)\n";
  }
  int count = 0;
  for (unsigned t : at_barrier) count += b.threads[t].value != 0;
  const int live = static_cast<int>(at_barrier.size());
  for (unsigned t : at_barrier) {
    ThreadRecord &r = b.threads[t];
    switch (r.op) {
      case kBarrierCount: r.result = static_cast<uint64_t>(count); break;
      case kBarrierAnd: r.result = count == live; break;
      case kBarrierOr: r.result = count > 0; break;
      default: r.result = 0; break;
    }
  }
  return at_barrier;
}

void run_block(Worker *w, LaunchState *L, uint64_t linear) {
  Block &b = w->block;
  b.launch = L;
  b.linear = linear;
  const uint64_t gx = L->grid.x, gy = L->grid.y;
  b.index = uint3{static_cast<unsigned>(linear % gx), static_cast<unsigned>((linear / gx) % gy),
                  static_cast<unsigned>(linear / (gx * gy))};
  b.nthreads = L->nthreads;
  b.threads.assign(b.nthreads, ThreadRecord{});
  if (b.prepared_for != L->serial) {  // the threads' indices, once per launch on this CPU thread (by serial
    b.prepared_for = L->serial;      // number: a later launch's state may reuse an earlier one's address)
    b.builtins.resize(b.nthreads);
    for (unsigned t = 0; t < b.nthreads; t++) {
      Builtins &bi = b.builtins[t];
      bi.thread_idx = thread_index(b, t);
      bi.block_dim = L->block;
      bi.grid_dim = L->grid;
    }
  }
  for (Builtins &bi : b.builtins) bi.block_idx = b.index;
  // Threads start warp by warp (lanes in order, as a GPU's printf shows them), the warps in a seeded order.
  const unsigned warps = (b.nthreads + 31) / 32;
  std::vector<unsigned> warp_order(warps);
  for (unsigned i = 0; i < warps; i++) warp_order[i] = i;
  const uint64_t seed = g_settings.seed;
  permute(warp_order, seed == 0 ? 0 : seed ^ mix(linear + 1));
  b.order.clear();
  for (unsigned wi : warp_order)
    for (unsigned l = wi * 32; l < std::min(b.nthreads, wi * 32 + 32); l++) b.order.push_back(l);
  b.cursor = 0;
  b.warp_waiters = 0;
  b.live = b.nthreads;
  b.phase = 0;
  b.abort = false;
  w->in_block = true;
  b.prints.clear();
  if (L->shared_bytes) b.dynamic_shared.assign(L->shared_bytes, 0);

  auto run_fiber = [&](Fiber *f) {
    enter(w, f);
    if (!f->idle) return;  // it holds a waiting thread
#ifdef AOTB_EMU_TSAN
    b.held.push_back(f);  // not reused by another thread of this block
#else
    w->pool.push_back(f);
#endif
  };
  for (;;) {
    while (b.cursor < b.nthreads && !b.abort) {
      Fiber *f = take_fiber(w);
      if (f == nullptr) {
        fail_block(b, cudaErrorMemoryAllocation, "no memory for another fiber stack");
        break;
      }
      run_fiber(f);
    }
    if (!b.abort && L->failed.load(std::memory_order_relaxed)) b.abort = true;  // another block failed, or the
    if (b.abort || b.live == 0) break;                                          // launch was abandoned: stop here
    std::vector<unsigned> released;
    if (b.warp_waiters) {  // threads wait at warp operations: those whose lanes are all there go on
      released = resolve_warps(b);
      b.warp_waiters -= static_cast<unsigned>(released.size());
    }
    if (b.abort) break;
    if (released.empty()) released = resolve_barrier(b);
    if (b.abort) break;
    b.phase++;
    permute(released, seed == 0 ? 0 : seed ^ mix((linear << 20) + b.phase));
    for (size_t k = 0; k < released.size(); k++) {
      const unsigned t = released[k];
      if (k + 1 < released.size()) {  // the next thread's record and fiber, fetched while this one runs
        const ThreadRecord &next = b.threads[released[k + 1]];
        __builtin_prefetch(&next);
        __builtin_prefetch(next.fiber);
      }
      ThreadRecord &r = b.threads[t];
      r.status = kRunning;
      Fiber *f = r.fiber;
      w->running = t;
      run_fiber(f);
      if (b.abort) break;
    }
    if (b.abort) break;
  }
  w->in_block = false;
#ifdef AOTB_EMU_TSAN
  w->pool.insert(w->pool.end(), b.held.begin(), b.held.end());
  b.held.clear();
#endif
  if (b.abort) {  // the fibers of threads left waiting start afresh
    w->pool.clear();
    for (Fiber *f : w->all) {
      if (!f->idle) reset_fiber(f);
      w->pool.push_back(f);
    }
  }
  if (!b.prints.empty()) {
    std::lock_guard<std::mutex> lock(L->prints_mutex);
    L->prints.emplace_back(linear, std::move(b.prints));
    b.prints = std::string();
  }
}

Worker *this_worker() {
  if (t_worker == nullptr) {
    t_worker = new Worker;
#ifdef AOTB_EMU_TSAN
    t_worker->tsan_scheduler = __tsan_get_current_fiber();
#endif
  }
  return t_worker;
}

#ifdef AOTB_EMU_ASAN
// Said right after AddressSanitizer's report: which CUDA thread made the access (ASan knows only CPU threads).
void asan_report(const char *) {
  Worker *w = t_worker;
  if (w == nullptr || !w->in_block) return;
  const Block &b = w->block;
  const std::string line = "aotbench-emulator: the access was made by " + std::string("thread ") +
                           thread_name(b, w->running) + " of block " + block_name(b) + " of kernel " +
                           b.launch->kernel + " (launched at " + where(b.launch->file, b.launch->line) + ")\n";
  if (write(2, line.data(), line.size()) < 0) return;
}
#endif

void run_blocks(LaunchState *L) {
  Worker *w = this_worker();
#ifdef AOTB_EMU_ASAN
  static bool hooked = [] {
    __asan_set_error_report_callback(asan_report);
    return true;
  }();
  (void)hooked;
#endif
#ifdef AOTB_EMU_TSAN
  w->tsan_scheduler = __tsan_get_current_fiber();
#endif
#ifdef AOTB_EMU_ASAN
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    void *addr = nullptr;
    size_t size = 0;
    pthread_attr_getstack(&attr, &addr, &size);
    w->scheduler_stack = addr;
    w->scheduler_stack_size = size;
    pthread_attr_destroy(&attr);
  }
#endif
  for (;;) {
    if (L->failed.load(std::memory_order_relaxed)) break;
    const uint64_t linear = L->next_block.fetch_add(1, std::memory_order_relaxed);
    if (linear >= L->blocks) break;
    run_block(w, L, linear);
  }
}

// -- the pool of CPU threads that run blocks beside the caller --------------------------------------------------
struct Pool {
  std::mutex mutex;
  std::condition_variable wake;
  std::condition_variable done;
  LaunchState *launch = nullptr;
  uint64_t generation = 0;
  int wanted = 0;   // helpers asked to join this launch
  int joined = 0;   // helpers that took it
  int finished = 0;
  std::vector<std::thread> threads;
};
Pool *g_pool = nullptr;

void helper_loop(Pool *p) {
  uint64_t seen = 0;
  for (;;) {
    LaunchState *L;
    {
      std::unique_lock<std::mutex> lock(p->mutex);
      p->wake.wait(lock, [&] { return p->generation != seen && p->joined < p->wanted; });
      seen = p->generation;
      p->joined++;
      L = p->launch;
    }
    run_blocks(L);
    {
      std::lock_guard<std::mutex> lock(p->mutex);
      p->finished++;
    }
    p->done.notify_all();
  }
}

int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)) > 0 ? static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)) : 1;
}

int worker_count() {
  if (kSanitized) return 1;  // static __shared__ variables are plain statics there: one block at a time
  if (g_settings.threads > 0) return g_settings.threads;
  static const int cores = [] {
    const char *env = getenv("AOTBENCH_EMULATOR_THREADS");
    const int n = env ? atoi(env) : 0;
    return n > 0 ? n : usable_cores();
  }();
  return cores;
}

std::mutex g_launch_mutex;  // one launch at a time per library (a GPU's default stream is in order too)
LaunchState *g_active = nullptr;  // the launch running now (under g_launch_mutex's protection of its start)
pthread_t g_active_thread;

// A launch whose caller was stopped (the interrupt's longjmp left the kernel): its helpers are told to stop
// after their current block, the pool they belong to is dropped (a helper stuck in an endless thread body keeps
// its core until the process ends) and the caller's fibers are reset. Its state is never freed: a helper may
// still read it.
void abandon_active() {
  LaunchState *L = g_active;
  if (L == nullptr) return;
  L->failed.store(1);
  g_active = nullptr;
  g_pool = nullptr;
  if (t_worker != nullptr) {
    Worker *w = t_worker;
    w->pool.clear();
    for (Fiber *f : w->all) {
      reset_fiber(f);
      w->pool.push_back(f);
    }
  }
  if (t_worker != nullptr) t_worker->in_block = false;
  g_launch_mutex.unlock();  // taken by the abandoned launch on this thread
}

void run_everywhere(LaunchState *L) {
  const int helpers = static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(worker_count() - 1), L->blocks - 1));
  if (helpers <= 0) {
    run_blocks(L);
    return;
  }
  static const bool fork_safe = [] {
    // A child made by fork() has none of the parent's helper threads: it starts a pool of its own, and the
    // locks another thread of the parent held at the fork are made anew.
    pthread_atfork(nullptr, nullptr, [] {
      g_pool = nullptr;
      new (&g_launch_mutex) std::mutex;
      new (&g_report_mutex) std::mutex;
      g_active = nullptr;
    });
    return true;
  }();
  (void)fork_safe;
  if (g_pool == nullptr) g_pool = new Pool;  // never freed: helpers outlive every launch
  Pool *p = g_pool;
  {
    std::lock_guard<std::mutex> lock(p->mutex);
    while (static_cast<int>(p->threads.size()) < helpers) {
      sigset_t all, old;
      sigfillset(&all);
      pthread_sigmask(SIG_SETMASK, &all, &old);  // helpers take no signals: SIGINT is the caller's
      p->threads.emplace_back(helper_loop, p);
      p->threads.back().detach();
      pthread_sigmask(SIG_SETMASK, &old, nullptr);
    }
    p->launch = L;
    p->wanted = helpers;
    p->joined = 0;
    p->finished = 0;
    p->generation++;
  }
  p->wake.notify_all();
  run_blocks(L);
  std::unique_lock<std::mutex> lock(p->mutex);
  p->done.wait(lock, [&] { return p->finished == p->joined && p->joined == p->wanted; });
}

}  // namespace

// -- what the header calls --------------------------------------------------------------------------------------
namespace {
__attribute__((noinline, cold)) void outside_kernel(int op, const char *file, int line) {
  record_error(cudaErrorLaunchFailure, op_name(op) + " at " + where(file, line) + " was called outside a kernel");
}

// The calling CUDA thread waits (its record says for what) until the scheduler resolves it and resumes it.
// `sync` is what ThreadSanitizer sees released on arrival and acquired on departure.
uint64_t wait_here(Worker *w, ThreadRecord &r, char *sync) {
  r.status = kWaiting;
#ifdef AOTB_EMU_TSAN
  __tsan_release(sync);
#endif
  leave(w, r.fiber);
#ifdef AOTB_EMU_TSAN
  __tsan_acquire(sync);
#endif
  (void)sync;
  return r.result;
}

ThreadRecord &record_of_running(Worker *w, int op, const char *file, int line, uint64_t value) {
  ThreadRecord &r = w->block.threads[w->running];
  r.op = static_cast<uint8_t>(op);
  r.file = file;
  r.line = line;
  r.value = value;
  return r;
}
}  // namespace

int barrier(int op, int predicate, const char *file, int line) {
  Worker *w = t_worker;
  if (__builtin_expect(w == nullptr || !w->in_block, 0)) {
    outside_kernel(op, file, line);
    return 0;
  }
  ThreadRecord &r = record_of_running(w, op, file, line, static_cast<uint64_t>(predicate));
  return static_cast<int>(wait_here(w, r, &w->block.sync_object));
}

uint64_t warp_op(int op, unsigned mask, uint64_t value, int param, int width, int is_signed, const char *file,
                 int line) {
  Worker *w = t_worker;
  if (__builtin_expect(w == nullptr || !w->in_block, 0)) {
    outside_kernel(op, file, line);
    return value;
  }
  ThreadRecord &r = record_of_running(w, op, file, line, value);
  r.mask = mask;
  r.param = param;
  r.width = static_cast<uint8_t>(width > 0 && width <= 32 ? width : 0);  // 0: refused when resolved
  r.is_signed = static_cast<uint8_t>(is_signed);
  w->block.warp_waiters++;
  return wait_here(w, r, &w->block.warp_sync[(w->running / 32) % 32]);
}

unsigned active_mask() {
  Worker *w = t_worker;
  if (w == nullptr || !w->in_block) return 0;
  const Block &b = w->block;
  const unsigned base = w->running / 32 * 32;
  unsigned m = 0;
  for (unsigned l = 0; l < 32 && base + l < b.nthreads; l++)
    if (b.threads[base + l].status != kExited) m |= 1u << l;
  return m;
}

unsigned lane_mask(int which) {
  const unsigned lane = t_worker ? t_worker->running % 32 : 0;
  const unsigned eq = 1u << lane, lt = eq - 1;
  switch (which) {
    case 0: return lt;
    case 1: return lt | eq;
    case 2: return eq;
    case 3: return ~lt;
    default: return ~(lt | eq);
  }
}

void *dynamic_shared_memory() {
  Worker *w = t_worker;
  if (w == nullptr || !w->in_block || w->block.dynamic_shared.empty()) return nullptr;
  return w->block.dynamic_shared.data();
}

void kernel_fault(const char *what, const char *file, int line) {
  Worker *w = t_worker;
  if (w == nullptr || !w->in_block) {
    record_error(cudaErrorAssert, std::string(what) + " at " + where(file, line) + " (host code)");
    return;
  }
  Block &b = w->block;
  const unsigned t = w->running;
  fail_block(b, cudaErrorAssert, "thread " + thread_name(b, t) + ": " + what + " at " + where(file, line));
  ThreadRecord &r = b.threads[t];
  r.status = kWaiting;  // never resumed: the block is stopped
  leave(w, r.fiber);
  std::abort();  // not reached
}

uint64_t clock_ticks() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

int run_launch(void (*body)(void *), void *args, dim3 grid, dim3 block, size_t shared_bytes, const char *kernel,
               const char *file, int line) {
  const std::string name = "kernel " + std::string(kernel) + " launched at " + where(file, line);
  if (t_worker != nullptr && t_worker->in_block) {
    record_error(cudaErrorNotSupported, name + " from inside a kernel: dynamic parallelism is not emulated");
    return cudaErrorNotSupported;
  }
  if (t_call.sticky != cudaSuccess) return t_call.sticky;  // an earlier kernel of this call failed: nothing runs
  const uint64_t threads = static_cast<uint64_t>(block.x) * block.y * block.z;
  std::string refused;
  cudaError_t code = cudaErrorInvalidConfiguration;
  if (block.x == 0 || block.y == 0 || block.z == 0 || grid.x == 0 || grid.y == 0 || grid.z == 0)
    refused = "a grid or block dimension is 0";
  else if (threads > 1024)
    refused = "a block of " + std::to_string(threads) + " threads (" + triple(block.x, block.y, block.z) +
              "): at most 1024 threads per block";
  else if (block.x > 1024 || block.y > 1024 || block.z > 64)
    refused = "block " + triple(block.x, block.y, block.z) + ": at most (1024, 1024, 64)";
  else if (grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535)
    refused = "grid " + triple(grid.x, grid.y, grid.z) + ": at most (2147483647, 65535, 65535)";
  else if (shared_bytes > static_cast<size_t>(g_max_dynamic_shared)) {
    code = cudaErrorInvalidValue;
    refused = std::to_string(shared_bytes) + " bytes of dynamic shared memory: the limit is " +
              std::to_string(g_max_dynamic_shared) +
              (g_max_dynamic_shared < kMaxDynamicSharedOptin
                   ? " (raise it up to " + std::to_string(kMaxDynamicSharedOptin) +
                         " with cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes))"
                   : "");
  }
  if (!refused.empty()) {
    t_call.last_error = code;
    if (!t_call.unchecked) {
      t_call.unchecked = 1;
      t_call.refused = name + " was refused with " + cudaGetErrorName(code) + ": " + refused;
    }
    return code;
  }
  if (g_active != nullptr && pthread_equal(g_active_thread, pthread_self())) abandon_active();
  auto *L = new LaunchState;
  L->body = body;
  L->args = args;
  L->grid = grid;
  L->block = block;
  L->shared_bytes = shared_bytes;
  L->kernel = kernel;
  L->file = file;
  L->line = line;
  L->blocks = static_cast<uint64_t>(grid.x) * grid.y * grid.z;
  L->nthreads = static_cast<unsigned>(threads);
  static std::atomic<uint64_t> launches{0};
  L->serial = ++launches;
  g_launch_mutex.lock();
  g_active = L;
  g_active_thread = pthread_self();
#ifdef AOTB_EMU_TSAN
  __tsan_release(&L->host_before);
#endif
  run_everywhere(L);
#ifdef AOTB_EMU_TSAN
  __tsan_acquire(&L->host_after);
#endif
  g_active = nullptr;
  g_launch_mutex.unlock();
  if (!L->prints.empty()) {
    std::sort(L->prints.begin(), L->prints.end(),
              [](const auto &a, const auto &b) { return a.first < b.first; });
    for (const auto &p : L->prints) fwrite(p.second.data(), 1, p.second.size(), stdout);
    fflush(stdout);
  }
  const bool failed = L->failed.load();
  if (!L->error.empty()) record_error(L->error_code, L->error);
  delete L;
  return failed ? static_cast<int>(t_call.sticky) : cudaSuccess;
}

}  // namespace aotb_emu

using namespace aotb_emu;

// -- device printf ------------------------------------------------------------------------------------------------
extern "C" AOTB_EMU_API int aotb_emu_printf(const char *format, ...) {
  va_list args;
  va_start(args, format);
  int n;
  Worker *w = t_worker;
  if (w != nullptr && w->in_block) {  // in a kernel: kept with the block's output, in order
    LaunchState *L = w->block.launch;
    if (L->printed.load(std::memory_order_relaxed) >= kPrintfBytes) {  // a GPU's printf buffer is full too
      va_end(args);
      return 0;
    }
    char small[512];
    va_list again;
    va_copy(again, args);
    n = vsnprintf(small, sizeof(small), format, args);
    if (n >= 0 && static_cast<size_t>(n) < sizeof(small)) {
      w->block.prints.append(small, static_cast<size_t>(n));
    } else if (n > 0) {
      std::string big(static_cast<size_t>(n) + 1, '\0');
      vsnprintf(&big[0], big.size(), format, again);
      w->block.prints.append(big.data(), static_cast<size_t>(n));
    }
    va_end(again);
    const size_t before = n > 0 ? L->printed.fetch_add(static_cast<size_t>(n)) : kPrintfBytes;
    if (before < kPrintfBytes && before + static_cast<size_t>(n) >= kPrintfBytes) {
      w->block.prints += "\n[aotbench emulator: device printf stopped after 1 MiB in this launch, as a GPU's "
                         "printf buffer (cudaLimitPrintfFifoSize) would]\n";
    }
  } else {
    n = vprintf(format, args);
  }
  va_end(args);
  return n;
}

// -- the runtime API's errors and device ------------------------------------------------------------------------
extern "C" {
AOTB_EMU_API cudaError_t cudaGetLastError() {
  const cudaError_t e = t_call.last_error;
  t_call.last_error = t_call.sticky;  // a kernel's error stays for the rest of the call, as a GPU context's does
  t_call.unchecked = 0;
  return e;
}
AOTB_EMU_API cudaError_t cudaPeekAtLastError() {
  t_call.unchecked = 0;
  return t_call.last_error;
}
AOTB_EMU_API const char *cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorAssert: return "cudaErrorAssert";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    default: return "cudaErrorUnknown";
  }
}
AOTB_EMU_API const char *cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorAssert: return "device-side assert triggered";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotSupported: return "operation not supported";
    default: return "unknown error";
  }
}
AOTB_EMU_API cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device) {
  if (device != 0) return cudaErrorInvalidDevice;
  std::memset(prop, 0, sizeof(*prop));
  std::snprintf(prop->name, sizeof(prop->name), "aotbench CUDA emulator (CPU, %d cores)", worker_count());
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  prop->totalGlobalMem = pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : 0;
  prop->sharedMemPerBlock = 48 * 1024;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = 1024;
  prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647;
  prop->maxGridSize[1] = 65535;
  prop->maxGridSize[2] = 65535;
  prop->clockRate = 1000000;
  prop->totalConstMem = 64 * 1024;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = worker_count();
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->sharedMemPerMultiprocessor = 228 * 1024;
  prop->sharedMemPerBlockOptin = kMaxDynamicSharedOptin;
  prop->regsPerMultiprocessor = 65536;
  prop->l2CacheSize = 0;
  prop->concurrentKernels = 0;
  prop->maxBlocksPerMultiProcessor = 32;
  return cudaSuccess;
}
AOTB_EMU_API cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int device) {
  cudaDeviceProp p;
  const cudaError_t e = cudaGetDeviceProperties(&p, device);
  if (e != cudaSuccess) return e;
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxBlockDimX: *value = p.maxThreadsDim[0]; break;
    case cudaDevAttrMaxBlockDimY: *value = p.maxThreadsDim[1]; break;
    case cudaDevAttrMaxBlockDimZ: *value = p.maxThreadsDim[2]; break;
    case cudaDevAttrMaxGridDimX: *value = p.maxGridSize[0]; break;
    case cudaDevAttrMaxGridDimY: *value = p.maxGridSize[1]; break;
    case cudaDevAttrMaxGridDimZ: *value = p.maxGridSize[2]; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = static_cast<int>(p.sharedMemPerBlock); break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
    case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = static_cast<int>(p.sharedMemPerBlockOptin); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}
AOTB_EMU_API cudaError_t cudaMalloc(void **pointer, size_t bytes) {
  void *p = nullptr;
  if (posix_memalign(&p, 256, bytes ? bytes : 1) != 0) return cudaErrorMemoryAllocation;
  *pointer = p;
  return cudaSuccess;
}
AOTB_EMU_API cudaError_t cudaMallocHost(void **pointer, size_t bytes) { return cudaMalloc(pointer, bytes); }
AOTB_EMU_API cudaError_t cudaMallocManaged(void **pointer, size_t bytes, unsigned) {
  return cudaMalloc(pointer, bytes);
}
AOTB_EMU_API cudaError_t cudaFree(void *pointer) {
  free(pointer);
  return cudaSuccess;
}
AOTB_EMU_API cudaError_t cudaFreeHost(void *pointer) { return cudaFree(pointer); }
AOTB_EMU_API cudaError_t aotb_emu_set_max_dynamic_shared(int bytes) {
  if (bytes < 0 || bytes > kMaxDynamicSharedOptin) return cudaErrorInvalidValue;
  if (bytes > g_max_dynamic_shared) g_max_dynamic_shared = bytes;
  return cudaSuccess;
}
AOTB_EMU_API cudaError_t aotb_emu_check_stream(const void *stream) {
  (void)stream;  // every stream handle (the op's, the legacy and per-thread ones, a created one) is the one queue
  return cudaSuccess;
}

// -- for Python ---------------------------------------------------------------------------------------------------
// These are the library's own (default visibility): aotbench finds them with dlsym in the op's library.
__attribute__((visibility("default"))) int aotb_emu_version() { return 1; }

// seed: the order threads resume in (0: index order); threads: CPU threads for blocks (0: every usable core);
// synccheck: 1 records the hazards a GPU tolerates.
__attribute__((visibility("default"))) void aotb_emu_configure(uint64_t seed, int threads, int synccheck) {
  g_settings.seed = seed;
  g_settings.threads = threads;
  g_settings.synccheck = synccheck;
}

// What stopped the last call, and forgets it: 0 and nothing, or a cudaError_t value and its message in `buffer`.
// A launch the GPU would have refused counts only when the host function never asked cudaGetLastError (or
// cudaPeekAtLastError) about it: a host function that checks sees the same error code a GPU gives.
// Of the calling thread's last call (Python asks on the thread that made the call).
__attribute__((visibility("default"))) int aotb_emu_take_report(char *buffer, size_t size) {
  CallState &c = t_call;
  int code = 0;
  std::string message;
  if (!c.report.empty()) {
    code = c.sticky != cudaSuccess ? c.sticky : cudaErrorLaunchFailure;
    message = c.report;
  } else if (c.unchecked) {
    code = c.last_error != cudaSuccess ? c.last_error : cudaErrorInvalidConfiguration;
    message = c.refused;
  }
  if (size > 0) std::snprintf(buffer, size, "%s", message.c_str());
  c = CallState();
  return code;
}

// synccheck's findings since the last time they were taken (one per line).
__attribute__((visibility("default"))) size_t aotb_emu_take_hazards(char *buffer, size_t size) {
  std::lock_guard<std::mutex> lock(g_report_mutex);
  const size_t n = g_hazards.size();
  if (size > 0) std::snprintf(buffer, size, "%s", g_hazards.c_str());
  if (n < size) g_hazards.clear();
  return n;
}

// After an interrupt stopped a call in a kernel: the launch it left is told to stop.
__attribute__((visibility("default"))) void aotb_emu_abandon() {
  if (g_active != nullptr) abandon_active();
}
}

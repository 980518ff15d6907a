// The sampling profiler behind op.profile (included at the end of native/src/runtime.cc; driven by
// aotbench/run/profiling.py).
//
// No privileges needed: each thread being profiled gets a POSIX timer on CLOCK_MONOTONIC that sends it SIGPROF
// every interval (SIGEV_THREAD_ID; high-resolution timers, so the rate is not bound to the scheduler tick, 250 Hz
// on some kernels, as CPU-time timers are). The handler records the interrupted program counter, the thread's slot
// and its callers (kProfileDepth return addresses in all, from glibc's backtrace: libgcc's unwinder, which finds
// unwind tables without a lock through _dl_find_object on glibc >= 2.35), and the CPU time the thread used since
// its previous sample up to the end of that sample's handler (the handler's own cost is not the program's): a
// thread that was waiting (an OpenMP worker between parallel regions) is sampled too, but its samples weigh only
// what delivering the signal cost it (~25 us here). Python maps the counters to modules, functions and source
// lines afterwards; nothing in the handler allocates or locks (clock_gettime and backtrace only).
//
// One profile at a time per process (Python holds a lock). The handler, once installed, stays: a timer's last
// signal may still be pending when the profile stops, and SIGPROF's default action would end the process. It runs
// with every asynchronous signal blocked: the host's SIGINT handler may longjmp out of an abandoned kernel call,
// and a longjmp out of this handler would leave `inflight` raised (aotb_profile_stop would wait for ever) and
// SIGPROF blocked on that thread. A child forked during a profile starts with the sampler idle (SamplerAfterFork).

#include <sched.h>
#include <time.h>
#include <sys/syscall.h>

namespace {

constexpr int kMaxProfiledThreads = 256;
constexpr int kProfileDepth = 8;  // per sample: the program counter, then up to 7 return addresses (0: none)

struct Sampler {
  uint64_t *pcs = nullptr;       // kProfileDepth per sample: the interrupted program counter, its callers
  int32_t *slots = nullptr;      // the thread's index in the tids passed to aotb_profile_start
  int64_t *cpu_ns = nullptr;     // CPU time the thread used since its previous sample (0 for its first)
  int64_t capacity = 0;
  int64_t next = 0;              // samples taken (may pass capacity: the rest are counted, not stored)
  int active = 0;
  int inflight = 0;              // handlers between their check of `active` and their last write
  int nthreads = 0;
  timer_t timers[kMaxProfiledThreads];
  int64_t last_cpu[kMaxProfiledThreads];
  struct sigaction previous;     // SIGPROF's handler before the first profile: other SIGPROFs go to it
  int installed = 0;
};
Sampler g_sampler;

int64_t ThreadCpuNs(clockid_t clock) {
  struct timespec ts;
  if (clock_gettime(clock, &ts) != 0) return -1;
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// The CPU-time clock of another thread of this process (the kernel's encoding for a thread's sched clock).
clockid_t ThreadClock(pid_t tid) { return static_cast<clockid_t>((~static_cast<unsigned>(tid) << 3) | 6); }

void OnProfileSignal(int sig, siginfo_t *info, void *context) {
  const int saved_errno = errno;
  Sampler &s = g_sampler;
  __atomic_fetch_add(&s.inflight, 1, __ATOMIC_SEQ_CST);
  if (info != nullptr && info->si_code == SI_TIMER && __atomic_load_n(&s.active, __ATOMIC_SEQ_CST)) {
    const int slot = info->si_value.sival_int;
    if (slot >= 0 && slot < s.nthreads) {
      const int64_t now = ThreadCpuNs(CLOCK_THREAD_CPUTIME_ID);
      const int64_t before = s.last_cpu[slot];
      const int64_t i = __atomic_fetch_add(&s.next, 1, __ATOMIC_RELAXED);
      if (i < s.capacity) {
        void *pc = FaultingPc(context);
        uint64_t *stack = s.pcs + i * kProfileDepth;
        stack[0] = reinterpret_cast<uint64_t>(pc);
        void *frames[kProfileDepth + 8];
        const int got = backtrace(frames, kProfileDepth + 8);  // this handler, the signal frame, pc, its callers
        int at = 0;
        while (at < got && frames[at] != pc) ++at;
        for (int k = 1; k < kProfileDepth; ++k) {
          stack[k] = (at + k < got) ? reinterpret_cast<uint64_t>(frames[at + k]) : 0;
        }
        s.slots[i] = slot;
        s.cpu_ns[i] = (before >= 0 && now >= before) ? now - before : 0;
      }
      s.last_cpu[slot] = ThreadCpuNs(CLOCK_THREAD_CPUTIME_ID);
    }
  } else if (info == nullptr || info->si_code != SI_TIMER) {  // not ours: what SIGPROF did before
    const struct sigaction &p = s.previous;
    if (p.sa_flags & SA_SIGINFO) {
      if (p.sa_sigaction != nullptr) p.sa_sigaction(sig, info, context);
    } else if (p.sa_handler != SIG_DFL && p.sa_handler != SIG_IGN && p.sa_handler != nullptr) {
      p.sa_handler(sig);
    }
  }
  __atomic_fetch_sub(&s.inflight, 1, __ATOMIC_SEQ_CST);
  errno = saved_errno;
}

void DeleteTimers(int count) {
  for (int i = 0; i < count; ++i) timer_delete(g_sampler.timers[i]);
}

// In a child forked while a profile ran: the parent's timers are not inherited, and a handler that the fork caught
// on another thread never finishes here, so a copied `active` or `inflight` would make every profile in the child
// fail with EBUSY or wait for ever.
void SamplerAfterFork() {
  __atomic_store_n(&g_sampler.active, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&g_sampler.inflight, 0, __ATOMIC_RELAXED);
  g_sampler.nthreads = 0;
}
[[maybe_unused]] const int g_sampler_atfork = pthread_atfork(nullptr, nullptr, SamplerAfterFork);
}  // namespace

// Start sampling the threads `tids` (of this process) every interval_ns, into the caller's arrays of `capacity`
// entries (`pcs`: capacity * aotb_profile_depth()), which must live until aotb_profile_stop. 0 on success; else
// an errno value (EBUSY: a profile is running; EINVAL: bad arguments; timer_create's or sigaction's errno), and
// nothing is left running.
AOTB_EXPORT int aotb_profile_start(const int32_t *tids, int n, int64_t interval_ns, uint64_t *pcs, int32_t *slots,
                                   int64_t *cpu_ns, int64_t capacity) {
  Sampler &s = g_sampler;
  if (__atomic_load_n(&s.active, __ATOMIC_ACQUIRE)) return EBUSY;
  if (n < 1 || n > kMaxProfiledThreads || interval_ns < 10000 || capacity < 1 || !pcs || !slots || !cpu_ns) {
    return EINVAL;
  }
  struct sigaction current = {};
  if (sigaction(SIGPROF, nullptr, &current) != 0) return errno;
  if (!(current.sa_flags & SA_SIGINFO) || current.sa_sigaction != OnProfileSignal) {
    // First profile, or someone installed a SIGPROF handler since: ours goes back on top, chaining to theirs.
    void *warm[2];
    backtrace(warm, 2);  // the first call loads libgcc_s: now, not inside the handler
    struct sigaction sa = {};
    sa.sa_sigaction = OnProfileSignal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigfillset(&sa.sa_mask);  // see the top of this file; faults stay deliverable (a crash report, not a hang)
    for (int sync : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP}) sigdelset(&sa.sa_mask, sync);
    s.previous = current;
    if (sigaction(SIGPROF, &sa, nullptr) != 0) return errno;
    s.installed = 1;
  }
  s.pcs = pcs;
  s.slots = slots;
  s.cpu_ns = cpu_ns;
  s.capacity = capacity;
  __atomic_store_n(&s.next, 0, __ATOMIC_RELAXED);
  s.nthreads = n;
  for (int i = 0; i < n; ++i) s.last_cpu[i] = ThreadCpuNs(ThreadClock(tids[i]));
  for (int i = 0; i < n; ++i) {
    struct sigevent ev = {};
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev.sigev_signo = SIGPROF;
    ev.sigev_value.sival_int = i;
    ev._sigev_un._tid = tids[i];
    if (timer_create(CLOCK_MONOTONIC, &ev, &s.timers[i]) != 0) {
      const int err = errno;
      DeleteTimers(i);
      return err;
    }
  }
  __atomic_store_n(&s.active, 1, __ATOMIC_RELEASE);
  struct itimerspec spec = {};
  spec.it_interval.tv_sec = interval_ns / 1000000000;
  spec.it_interval.tv_nsec = interval_ns % 1000000000;
  for (int i = 0; i < n; ++i) {
    // Staggered first expiries, so the threads' signals do not all arrive at once.
    const int64_t first = interval_ns + interval_ns * i / n;
    spec.it_value.tv_sec = first / 1000000000;
    spec.it_value.tv_nsec = first % 1000000000;
    if (timer_settime(s.timers[i], 0, &spec, nullptr) != 0) {
      const int err = errno;
      DeleteTimers(n);
      __atomic_store_n(&s.active, 0, __ATOMIC_SEQ_CST);
      while (__atomic_load_n(&s.inflight, __ATOMIC_SEQ_CST) != 0) sched_yield();  // as aotb_profile_stop
      return err;
    }
  }
  return 0;
}

// Stop sampling; the number of samples taken (those past the capacity were not stored). Idempotent.
AOTB_EXPORT int64_t aotb_profile_stop() {
  Sampler &s = g_sampler;
  if (!__atomic_load_n(&s.active, __ATOMIC_ACQUIRE)) return __atomic_load_n(&s.next, __ATOMIC_RELAXED);
  DeleteTimers(s.nthreads);
  __atomic_store_n(&s.active, 0, __ATOMIC_SEQ_CST);
  // A handler that saw `active` may still be writing into the caller's arrays: they are freed after this returns.
  while (__atomic_load_n(&s.inflight, __ATOMIC_SEQ_CST) != 0) sched_yield();
  return __atomic_load_n(&s.next, __ATOMIC_RELAXED);
}

// Samples taken so far by the running (or last) profile.
AOTB_EXPORT int64_t aotb_profile_taken() { return __atomic_load_n(&g_sampler.next, __ATOMIC_RELAXED); }

AOTB_EXPORT int aotb_profile_depth() { return kProfileDepth; }

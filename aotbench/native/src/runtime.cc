// The aotbench native host: implements AotExtra over a typed attribute table and calls a kernel's entry
// points inside try/catch, behind a plain C interface that Python binds with ctypes.
//
// Built on first use by aotbench's build layer with the documented C++ flags, in particular
// -D_GLIBCXX_USE_CXX11_ABI=0: the attribute names that kernels pass to the getters are std::string by value,
// so this file and every kernel must agree on the string ABI.
//
// Error protocol: every aotb_call_* and every attribute setter returns one of the AOTB_* outcome codes below
// (no C++ exception leaves an exported function); on AOTB_EXCEPTION, AOTB_ATTR_ERROR or AOTB_NO_MEMORY the
// details are in thread-local state read by the aotb_error_* functions. Python checks the codes, the attribute
// kinds and struct AotbCall against its mirrors by name when it loads the host (aotb_outcomes, aotb_attr_kinds,
// aotb_call_layout).

#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <map>
#include <new>
#include <string>
#include <utility>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include "custom_aot_extra.h"

#define AOTB_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

constexpr int kHostVersion = 5;

// Every outcome code an entry point returns, and the flag bits OR-ed into one: the one definition. Python's
// Outcome enum (aotbench/native/runtime.py) is compared with it by name at load (aotb_outcomes). The flag bits
// say the kernel changed the thread's state and the host put it back (details in aotb_state_report); the fast
// path, which returns on 0, pays nothing for them.
#define AOTB_OUTCOMES(X)                                                                                        \
  X(OK, 0)                /* the entry point ran and returned 0 */                                          \
  X(STATUS, 1)            /* it returned a non-zero status (aotb_error_status) */                           \
  X(EXCEPTION, 2)         /* it threw (aotb_error_message) */                                               \
  X(ATTR_ERROR, 3)        /* it read a missing or mistyped attribute (aotb_error_attr_*) */                 \
  X(TOO_SMALL, 4)         /* aotb_call_infer's output buffer is too small: call again with *needed */        \
  X(BAD_BUFFER, 5)        /* an argument is not a C-contiguous buffer of the expected size */               \
  X(BUSY, 6)              /* another call is using the plan's workspaces: pass a set of your own */         \
  X(INTERRUPTED, 7)       /* the stop button abandoned the kernel (see RunOnMain) */                        \
  X(NO_MEMORY, 8)         /* the host could not allocate (std::bad_alloc) an attribute's copy */           \
  X(FP_CHANGED, 0x100)    /* flag: rounding mode, exception traps, FTZ/DAZ changed and restored */          \
  X(SIGNALS_CHANGED, 0x200) /* flag: the signal mask or SIGINT's handler changed and restored */
#define AOTB_OUTCOME_ENUMERATOR(name, value) AOTB_##name = value,
enum Outcome : int { AOTB_OUTCOMES(AOTB_OUTCOME_ENUMERATOR) };
#undef AOTB_OUTCOME_ENUMERATOR

// Attribute kinds, by the names of aotbench/native/attrs.py's AttrKind (compared at load: aotb_attr_kinds).
// kEmptyList ([]) satisfies any of the four list getters, kEmptyRows ([[]], [[], []]: rows with no element)
// either 2-D getter.
#define AOTB_ATTR_KINDS(X)                                                                                     \
  X(MISSING, kMissing, 0) X(BOOL, kBool, 1) X(INT, kInt, 2) X(FLOAT, kFloat, 3) X(STR, kStr, 4)              \
  X(INT_VEC, kIntVec, 5) X(FLOAT_VEC, kFloatVec, 6) X(INT_2D, kInt2D, 7) X(FLOAT_2D, kFloat2D, 8)            \
  X(EMPTY_LIST, kEmptyList, 9) X(EMPTY_ROWS, kEmptyRows, 10)
#define AOTB_KIND_ENUMERATOR(name, enumerator, value) enumerator = value,
enum Kind { AOTB_ATTR_KINDS(AOTB_KIND_ENUMERATOR) };
#undef AOTB_KIND_ENUMERATOR

struct AttrValue {
  Kind kind = kMissing;
  bool b = false;
  int64_t i = 0;
  float f = 0.0f;
  std::string s;
  std::vector<int64_t> iv;
  std::vector<float> fv;
  std::vector<std::vector<int64_t>> i2;
  std::vector<std::vector<float>> f2;
};

// Thrown by the getters; caught by the aotb_call_* wrappers (it may travel through kernel frames).
struct AttrFailure {
  std::string name;
  Kind requested;
  Kind registered;
};

struct ErrorState {
  std::string message;
  std::string attr_name;
  int attr_requested = 0;
  int attr_registered = 0;
  int status = 0;  // the kernel's non-zero return value, for AOTB_STATUS
};
thread_local ErrorState g_error;

class HostExtra final : public AotExtra {
 public:
  std::map<std::string, AttrValue> attrs;

  bool HasAttr(std::string name) override { return attrs.count(name) != 0; }

 private:
  const AttrValue &Get(const std::string &name, Kind requested) {
    auto it = attrs.find(name);
    if (it == attrs.end()) throw AttrFailure{name, requested, kMissing};
    Kind have = it->second.kind;
    bool list_ok = have == kEmptyList && requested >= kIntVec && requested <= kFloat2D;
    bool rows_ok = have == kEmptyRows && (requested == kInt2D || requested == kFloat2D);
    if (have != requested && !list_ok && !rows_ok) throw AttrFailure{name, requested, have};
    return it->second;
  }
  bool GetAttrBool(std::string name) override { return Get(name, kBool).b; }
  int64_t GetAttrInt(std::string name) override { return Get(name, kInt).i; }
  float GetAttrFloat(std::string name) override { return Get(name, kFloat).f; }
  std::string GetAttrStr(std::string name) override { return Get(name, kStr).s; }
  std::vector<int64_t> GetAttrIntVec(std::string name) override { return Get(name, kIntVec).iv; }
  std::vector<float> GetAttrFloatVec(std::string name) override { return Get(name, kFloatVec).fv; }
  std::vector<std::vector<int64_t>> GetAttrInt2DVec(std::string name) override { return Get(name, kInt2D).i2; }
  std::vector<std::vector<float>> GetAttrFloat2DVec(std::string name) override { return Get(name, kFloat2D).f2; }
};

HostExtra *AsHost(void *extra) { return static_cast<HostExtra *>(extra); }

AttrValue &Slot(void *extra, const char *name, Kind kind) {
  AttrValue &v = AsHost(extra)->attrs[name];
  v = AttrValue();
  v.kind = kind;
  return v;
}

template <typename T>
std::vector<std::vector<T>> Unflatten(const T *flat, const int64_t *lengths, size_t rows) {
  std::vector<std::vector<T>> out(rows);
  size_t at = 0;
  for (size_t r = 0; r < rows; ++r) {
    out[r].assign(flat + at, flat + at + lengths[r]);
    at += static_cast<size_t>(lengths[r]);
  }
  return out;
}

// Copies error text into thread-local state without throwing (a catch handler must not throw on): when even
// that allocation fails, the text is left empty and Python says so.
void Keep(std::string &to, const char *text) noexcept {
  try {
    to.assign(text);
  } catch (...) {
    to.clear();
  }
}

// Runs `body` and turns anything it throws into an outcome code plus thread-local error text.
template <typename Body>
int Guarded(Body body) {
  try {
    return body();
  } catch (const AttrFailure &e) {
    Keep(g_error.message, "attribute error");
    Keep(g_error.attr_name, e.name.c_str());
    g_error.attr_requested = e.requested;
    g_error.attr_registered = e.registered;
    return AOTB_ATTR_ERROR;
  } catch (const std::exception &e) {
    Keep(g_error.message, e.what());
    return AOTB_EXCEPTION;
  } catch (...) {
    Keep(g_error.message, "an exception that is not a std::exception");
    return AOTB_EXCEPTION;
  }
}

// Runs a host-side step that allocates (storing an attribute): std::bad_alloc becomes AOTB_NO_MEMORY, anything
// else AOTB_EXCEPTION with its text, so no C++ exception unwinds into ctypes.
template <typename Body>
int Storing(Body body) noexcept {
  try {
    body();
    return AOTB_OK;
  } catch (const std::bad_alloc &e) {
    Keep(g_error.message, e.what());
    return AOTB_NO_MEMORY;
  } catch (const std::exception &e) {
    Keep(g_error.message, e.what());
    return AOTB_EXCEPTION;
  } catch (...) {
    Keep(g_error.message, "an exception that is not a std::exception");
    return AOTB_EXCEPTION;
  }
}

using KernelFn = int (*)(int, void **, int *, int64_t **, const char **, void *, void *);
using InitFn = int (*)(int *, int64_t **, const char **, AotExtra *);
using InferFn = std::vector<int64_t> (*)(int *, int64_t **, AotExtra *);
using InferMultiFn = std::vector<std::vector<int64_t>> (*)(int *, int64_t **, AotExtra *);

}  // namespace

// One prepared kernel call. Python fills it once per input signature; per call, only the data pointers of
// the inputs and outputs change, and those never touch this struct (see aotb_call_buffers).
struct AotbCall {
  void *fn;
  int32_t nparam;
  int32_t n_in;             // inputs, then n_out outputs, then workspaces in params
  int32_t n_out;
  int32_t busy;             // 1 while a call runs on the workspaces in params (taken and released atomically)
  void **params;            // workspace entries filled in; input/output slots are unused
  int *ndims;
  int64_t **shapes;
  const char **dtypes;
  void *stream;
  void *extra;
  const int64_t *nbytes;    // expected byte size of each input and output buffer
  uint32_t fp_set;          // floating-point control bits turned on around F (a -ffast-math build's FTZ/DAZ)
  uint32_t fp_clear;        // and bits turned off; both 0 for an ordinary library
  uint32_t flags;           // kCallSaveSignals: the library calls signal functions (see RunKernel)
  const char *label;        // "op X (kernel X in libx.so)": named by the abort report; may be null
};

namespace {

// AotbCall field by field, for Python's CallRecord to be compared with by name at load (aotb_call_layout).
struct FieldLayout {
  const char *name;
  int64_t offset;
  int64_t size;
};
#define AOTB_CALL_FIELD(field) FieldLayout{#field, offsetof(AotbCall, field), sizeof(AotbCall::field)}
constexpr FieldLayout kCallFields[] = {
    AOTB_CALL_FIELD(fn),     AOTB_CALL_FIELD(nparam), AOTB_CALL_FIELD(n_in),    AOTB_CALL_FIELD(n_out),
    AOTB_CALL_FIELD(busy),   AOTB_CALL_FIELD(params), AOTB_CALL_FIELD(ndims),   AOTB_CALL_FIELD(shapes),
    AOTB_CALL_FIELD(dtypes), AOTB_CALL_FIELD(stream), AOTB_CALL_FIELD(extra),   AOTB_CALL_FIELD(nbytes),
    AOTB_CALL_FIELD(fp_set), AOTB_CALL_FIELD(fp_clear), AOTB_CALL_FIELD(flags), AOTB_CALL_FIELD(label),
};
#undef AOTB_CALL_FIELD
constexpr int kCallFieldCount = static_cast<int>(sizeof(kCallFields) / sizeof(kCallFields[0]));

// The table names each field once, in order (offsets strictly increasing) ...
constexpr bool InOrder(const FieldLayout *fields, int n) {
  for (int k = 1; k < n; ++k) {
    if (fields[k].offset < fields[k - 1].offset + fields[k - 1].size) return false;
  }
  return true;
}
static_assert(InOrder(kCallFields, kCallFieldCount), "kCallFields: list AotbCall's fields once each, in order");

// ... and names every field: a structured binding needs exactly one name per field of AotbCall, so a field added
// to the struct but not to kCallFields stops the build here.
[[maybe_unused]] void EveryCallFieldListed(AotbCall &c) {
  [[maybe_unused]] auto &[f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15] = c;
  static_assert(kCallFieldCount == 16, "kCallFields: a field of AotbCall is missing (or the binding above is)");
}

struct NamedValue {
  const char *name;
  int value;
};
#define AOTB_NAMED_OUTCOME(name, value) NamedValue{#name, value},
constexpr NamedValue kOutcomeNames[] = {AOTB_OUTCOMES(AOTB_NAMED_OUTCOME)};
#undef AOTB_NAMED_OUTCOME
#define AOTB_NAMED_KIND(name, enumerator, value) NamedValue{#name, enumerator},
constexpr NamedValue kKindNames[] = {AOTB_ATTR_KINDS(AOTB_NAMED_KIND)};
#undef AOTB_NAMED_KIND

// Copies up to `max` entries of a name table out; returns how many there are.
template <size_t N>
int CopyNames(const NamedValue (&table)[N], const char **names, int32_t *values, int max) {
  for (int k = 0; k < static_cast<int>(N) && k < max; ++k) {
    names[k] = table[k].name;
    values[k] = table[k].value;
  }
  return static_cast<int>(N);
}

// The few CPython C-API functions aotb_call_buffers needs, handed over by Python (ctypes.pythonapi) so this
// file needs no Python headers. Their signatures are part of CPython's stable ABI.
struct PyBufferView {  // Py_buffer
  void *buf;
  void *obj;
  intptr_t len;
  intptr_t itemsize;
  int readonly;
  int ndim;
  char *format;
  intptr_t *shape;
  intptr_t *strides;
  intptr_t *suboffsets;
  void *internal;
};
struct PythonApi {
  int (*get_buffer)(void *, PyBufferView *, int);
  void (*release_buffer)(PyBufferView *);
  intptr_t (*tuple_size)(void *);
  void *(*tuple_item)(void *, intptr_t);
  void (*err_clear)();
  void *(*save_thread)();
  void (*restore_thread)(void *);
};
PythonApi g_py = {};
constexpr int kBufferC = 0x0038;          // PyBUF_C_CONTIGUOUS
constexpr int kBufferCWritable = 0x0039;  // PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE
constexpr int kMaxParams = 64;

// The thread's floating-point control register (MXCSR on x86-64, FPCR on AArch64): what a library linked with
// crtfastmath.o changes at load time. aotbench restores it after loading and switches it only around F.
#if defined(__x86_64__) || defined(__i386__)
uint32_t GetFpControl() { return _mm_getcsr(); }
void SetFpControl(uint32_t v) { _mm_setcsr(v); }
#elif defined(__aarch64__)
uint32_t GetFpControl() { return static_cast<uint32_t>(__builtin_aarch64_get_fpcr()); }
void SetFpControl(uint32_t v) { __builtin_aarch64_set_fpcr(v); }
#else
uint32_t GetFpControl() { return 0; }
void SetFpControl(uint32_t) {}
#endif

// The x87 control word (precision, rounding, exception masks): libm's fesetround/feenableexcept change it too.
#if defined(__x86_64__) || defined(__i386__)
uint32_t GetX87Control() {
  uint16_t cw;
  __asm__ volatile("fnstcw %0" : "=m"(cw));
  return cw;
}
void SetX87Control(uint32_t v) {
  uint16_t cw = static_cast<uint16_t>(v);
  __asm__ volatile("fldcw %0" : : "m"(cw));
}
constexpr uint32_t kFpControlBits = 0xFFC0;  // MXCSR without its sticky exception flags
#else
uint32_t GetX87Control() { return 0; }
void SetX87Control(uint32_t) {}
constexpr uint32_t kFpControlBits = 0xFFFFFFFF;
#endif

// What the last call on this thread changed and the host restored (read by aotb_fp_report/aotb_signal_report).
struct StateReport {
  uint32_t control_before, control_after, x87_before, x87_after;
  uint64_t blocked, unblocked;  // signals 1..64 the kernel blocked / unblocked (bit n-1 for signal n)
  uint64_t sigint_changed;      // 1 when it replaced SIGINT's handler
};
thread_local StateReport g_report;

constexpr uint32_t kCallSaveSignals = 1;

uint64_t SignalBits(const sigset_t &set) {
  uint64_t bits = 0;
  for (int s = 1; s <= 64 && s < NSIG; ++s) {
    if (sigismember(&set, s) == 1) bits |= uint64_t{1} << (s - 1);
  }
  return bits;
}

// The calling thread's signal mask and SIGINT's disposition, for a library that may change them (two syscalls,
// so only for libraries whose undefined symbols include signal functions: see aotbench/native/elf.py).
struct SignalState {
  sigset_t mask;
  struct sigaction sigint;
  void Save() {
    sigemptyset(&mask);
    pthread_sigmask(SIG_BLOCK, nullptr, &mask);
    sigaction(SIGINT, nullptr, &sigint);
  }
  // Puts the saved state back if the kernel changed it; AOTB_SIGNALS_CHANGED then.
  int Restore() const {
    SignalState now;
    now.Save();
    const uint64_t was = SignalBits(mask), is = SignalBits(now.mask);
    const bool handler_changed = now.sigint.sa_handler != sigint.sa_handler;
    if (was == is && !handler_changed) return 0;
    if (handler_changed) sigaction(SIGINT, &sigint, nullptr);
    if (was != is) pthread_sigmask(SIG_SETMASK, &mask, nullptr);
    g_report.blocked = is & ~was;
    g_report.unblocked = was & ~is;
    g_report.sigint_changed = handler_changed ? 1 : 0;
    return AOTB_SIGNALS_CHANGED;
  }
};

// After kernel code ran: if the control registers differ from what it was given (`expected`: the caller's mode,
// switched for a fast-math library), record the change for aotb_state_report and report AOTB_FP_CHANGED; either
// way the caller's `saved` mode is back afterwards.
int RestoreFp(uint32_t expected, uint32_t saved, uint32_t saved_x87) {
  const uint32_t after = GetFpControl(), after_x87 = GetX87Control();
  if (((after ^ expected) & kFpControlBits) == 0 && after_x87 == saved_x87) {
    if (expected != saved) SetFpControl(saved);  // a fast-math library's own mode, switched back
    return 0;
  }
  g_report.control_before = expected;
  g_report.control_after = after;
  g_report.x87_before = saved_x87;
  g_report.x87_after = after_x87;
  SetX87Control(saved_x87);
  SetFpControl(saved);
  return AOTB_FP_CHANGED;
}

int CallF(const AotbCall *c, void **params, void *stream) {
  return Guarded([&] {
    int status = reinterpret_cast<KernelFn>(c->fn)(c->nparam, params, c->ndims, c->shapes, c->dtypes, stream,
                                                   c->extra);
    g_error.status = status;
    return status == 0 ? AOTB_OK : AOTB_STATUS;
  });
}

// -- interrupts (the stop button on an endless kernel) ---------------------------------------------------------
// The kernel runs on the calling thread with the GIL released. On the main thread RunOnMain marks the call
// (kernel_call, a sequence number) after a cheap __builtin_setjmp. The host's SIGINT handler chains to the
// handler it replaced (Python's, which records the KeyboardInterrupt) and, while a kernel runs on the main
// thread, wakes the watchdog thread. If that same call is still running after the grace period, the watchdog marks it
// abandoned and sends SIGINT to the main thread, whose handler then longjmps back into RunOnMain:
// AOTB_INTERRUPTED, and the outer frames (GIL, buffers, busy flag) unwind normally.
//
// A process may load several hosts (one per cache folder), but SIGINT has one handler: every host works on ONE
// InterruptState, the first host's (Python hands its address to the later ones, aotb_use_interrupt_state), and
// only the first host's handler and watchdog are ever installed.
struct InterruptState {
  pthread_t main_thread;
  int main_known;
  void *jump[5];                // __builtin_setjmp's buffer: frame, label, stack pointer (cheaper than sigsetjmp's)
  uint64_t call_counter;        // main thread only
  uint64_t kernel_call;         // the main thread's call in F, 0 when none (atomic)
  uint64_t abandon_call;        // the call the watchdog gave up on (atomic)
  const AotbCall *abandoned;    // the record of the last abandoned call, until Python takes it (atomic)
  int watchdog_kill;            // 1 while the SIGINT the watchdog sent is on its way: it is not chained (atomic)
  uint64_t interrupted_call;    // the call a SIGINT found running: the only one the watchdog may abandon (atomic)
  sigset_t handler_mask;        // what the SIGINT handler runs with: unblocked again after the longjmp
  pthread_key_t current_key;    // the call in F on each thread, for the abort report (pthread_getspecific
  int key_made;                 // allocates nothing, so the handler may read it on any thread)
};
InterruptState g_own_state = {};
InterruptState *g_state = &g_own_state;

bool OnMainThread() {
  const InterruptState *st = g_state;
  return __atomic_load_n(&st->main_known, __ATOMIC_RELAXED) && pthread_equal(pthread_self(), st->main_thread);
}

// Runs kernel code (`body`: F, Init or InferShape) on the main thread so that the stop button can abandon it;
// `c` names the call to Python afterwards (kInitCall for Init and InferShape, which have no record).
template <typename Body>
__attribute__((noinline)) int RunOnMain(const AotbCall *c, Body body) {
  InterruptState *st = g_state;
  if (__builtin_setjmp(st->jump) != 0) {  // the SIGINT handler gave up on F: its mask is still blocked
    st = g_state;
    __atomic_store_n(&st->kernel_call, 0, __ATOMIC_SEQ_CST);
    pthread_sigmask(SIG_UNBLOCK, &st->handler_mask, nullptr);
    __atomic_store_n(&st->abandoned, c, __ATOMIC_SEQ_CST);
    return AOTB_INTERRUPTED;
  }
  __atomic_store_n(&st->abandoned, nullptr, __ATOMIC_RELAXED);  // an older abandonment nobody asked about is stale
  __atomic_store_n(&st->kernel_call, ++st->call_counter, __ATOMIC_RELEASE);
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  int outcome = body();
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  __atomic_store_n(&st->kernel_call, 0, __ATOMIC_RELEASE);
  return outcome;
}

const AotbCall kInitCall = {};  // what an abandoned Init or InferShape is named by (it has no call record)

// Kernel code other than F, interruptible on the main thread like F.
template <typename Body>
int Interruptible(Body body) {
  return OnMainThread() ? RunOnMain(&kInitCall, body) : body();
}

// Calls F under the floating-point mode its library was built for, and gives the thread its floating-point
// environment (and, for a flagged library, its signal state) back after: a change is reported by a flag bit.
// Reading the two control registers (stmxcsr and fnstcw; FPCR on AArch64) costs about a nanosecond, so it is
// done around every F; the signal state costs syscalls, so only libraries flagged kCallSaveSignals pay for it.
int RunKernel(const AotbCall *c, void **params, void *stream) {
  const uint32_t saved = GetFpControl(), saved_x87 = GetX87Control();
  const bool switch_fp = (c->fp_set | c->fp_clear) != 0;
  const uint32_t expected = switch_fp ? (saved | c->fp_set) & ~c->fp_clear : saved;
  if (switch_fp) SetFpControl(expected);
  SignalState signals;
  const bool save_signals = (c->flags & kCallSaveSignals) != 0;
  if (save_signals) signals.Save();
  const InterruptState *st = g_state;
  const void *outer = st->key_made ? pthread_getspecific(st->current_key) : nullptr;
  if (st->key_made) pthread_setspecific(st->current_key, c);
  int outcome = OnMainThread() ? RunOnMain(c, [&] { return CallF(c, params, stream); }) : CallF(c, params, stream);
  if (st->key_made) pthread_setspecific(st->current_key, outer);
  outcome |= RestoreFp(expected, saved, saved_x87);
  if (save_signals) outcome |= signals.Restore();
  return outcome;
}

// Runs an Init or InferShape call (once per signature, so its four syscalls are affordable): interruptible, and
// the thread's floating-point environment, signal mask and SIGINT handler given back the same way as after F.
template <typename Body>
int StateGuarded(Body body) {
  const uint32_t saved = GetFpControl(), saved_x87 = GetX87Control();
  SignalState signals;
  signals.Save();
  int outcome = Interruptible(body);
  outcome |= RestoreFp(saved, saved, saved_x87);
  return outcome | signals.Restore();
}

}  // namespace

// -- crash report (an isolated op's worker only) ------------------------------------------------------------
// On a fatal signal, writes where the process was to a file descriptor in lines the parent parses
// (aotbench/run/native_stack.py), then dies of the same signal:
//   aotbench-native-stack <signal number>
//   aotbench-pc <module-relative hex offset> <module path>          the faulting instruction
//   aotbench-frame <module-relative hex offset> <symbol or -> <module path>   innermost first
//   aotbench-native-stack-end
// Only async-signal-safe calls in practice (write, backtrace after a warm-up, dladdr); it runs on its own stack
// so that a stack overflow in the kernel is reported too.
namespace {
int g_crash_fd = 2;

// Writes all of `text` to `fd` (async-signal-safe: only write), giving up on an error.
void WriteAll(int fd, const char *text) {
  size_t n = strlen(text);
  while (n > 0) {
    ssize_t w = write(fd, text, n);
    if (w <= 0) return;
    text += w;
    n -= static_cast<size_t>(w);
  }
}

void CrashWrite(const char *text) { WriteAll(g_crash_fd, text); }

void CrashWriteHex(uintptr_t value) {
  char buf[2 + 2 * sizeof(uintptr_t) + 1];
  char *end = buf + sizeof(buf) - 1;
  *end = '\0';
  char *at = end;
  do {
    *--at = "0123456789abcdef"[value & 0xF];
    value >>= 4;
  } while (value != 0);
  *--at = 'x';
  *--at = '0';
  CrashWrite(at);
}

void CrashWriteLocation(const char *tag, void *address, bool with_symbol) {
  Dl_info info;
  CrashWrite(tag);
  if (dladdr(address, &info) != 0 && info.dli_fname != nullptr) {
    CrashWriteHex(reinterpret_cast<uintptr_t>(address) - reinterpret_cast<uintptr_t>(info.dli_fbase));
    if (with_symbol) {
      CrashWrite(" ");
      CrashWrite(info.dli_sname != nullptr ? info.dli_sname : "-");
    }
    CrashWrite(" ");
    CrashWrite(info.dli_fname);
  } else {
    CrashWriteHex(reinterpret_cast<uintptr_t>(address));
    CrashWrite(with_symbol ? " - ?" : " ?");
  }
  CrashWrite("\n");
}

void *FaultingPc(void *context) {
  auto *uc = static_cast<ucontext_t *>(context);
#if defined(__x86_64__)
  return reinterpret_cast<void *>(uc->uc_mcontext.gregs[REG_RIP]);
#elif defined(__aarch64__)
  return reinterpret_cast<void *>(uc->uc_mcontext.pc);
#else
  (void)uc;
  return nullptr;
#endif
}

void CrashReport(int sig, siginfo_t *, void *context) {
  char number[4] = {static_cast<char>('0' + sig / 10 % 10), static_cast<char>('0' + sig % 10), '\n', '\0'};
  CrashWrite("\naotbench-native-stack ");
  CrashWrite(number);
  void *pc = FaultingPc(context);
  if (pc != nullptr) CrashWriteLocation("aotbench-pc ", pc, false);
  void *frames[64];
  int n = backtrace(frames, 64);
  for (int i = 0; i < n; ++i) CrashWriteLocation("aotbench-frame ", frames[i], true);
  CrashWrite("aotbench-native-stack-end\n");
  raise(sig);  // the handler was reset (SA_RESETHAND) and the signal is not blocked (SA_NODEFER): die of it
}
}  // namespace

AOTB_EXPORT int aotb_install_crash_report(int fd) {
  g_crash_fd = fd;
  void *warm[2];
  backtrace(warm, 2);  // the first call loads libgcc_s: do it now, not inside a signal handler
  static char alt_stack[1 << 16];
  stack_t ss = {};
  ss.ss_sp = alt_stack;
  ss.ss_size = sizeof(alt_stack);
  if (sigaltstack(&ss, nullptr) != 0) return -1;
  struct sigaction sa = {};
  sa.sa_sigaction = CrashReport;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) {
    if (sigaction(sig, &sa, nullptr) != 0) return -1;
  }
  return 0;
}

// -- the host's own SIGINT and SIGABRT handlers (in-process ops) ---------------------------------------------
namespace {
struct sigaction g_prev_int_slots[2];
struct sigaction *g_prev_int = nullptr;  // the SIGINT handler ours replaced (atomic pointer into the slots)
struct sigaction g_prev_abrt;
int g_abrt_installed = 0;
int g_abort_fds[2] = {2, -1};  // where the abort report goes: fd 2 and, inside ipykernel, the saved real stderr
int g_abort_report = 1;        // 0 in an isolated op's worker: its parent reports the crash
sem_t g_watch;
int g_watchdog_running = 0;
int g_grace_ms = 500;

int g_chaining = 0;  // 1 while OnInterrupt calls the handler it replaced (atomic)
void *g_python_handler = nullptr;  // Python's C-level signal handler, when Python told us (aotb_set_python_handler)

void OnInterrupt(int sig, siginfo_t *info, void *context) {
  const int saved_errno = errno;
  InterruptState *st = g_state;
  const struct sigaction *prev = __atomic_load_n(&g_prev_int, __ATOMIC_ACQUIRE);
  // The watchdog's own SIGINT is not a second interrupt: Python was told of the first one already.
  const bool from_watchdog = __atomic_exchange_n(&st->watchdog_kill, 0, __ATOMIC_ACQ_REL) != 0 &&
                             info != nullptr && info->si_code == SI_TKILL && info->si_pid == getpid();
  // A handler that chains back to this one (faulthandler.register(SIGINT, chain=True) installed over it, then
  // this one over that) re-enters here while it is being chained to: that inner call chains no further.
  if (prev != nullptr && !from_watchdog && __atomic_exchange_n(&g_chaining, 1, __ATOMIC_ACQ_REL) == 0) {
    if (prev->sa_flags & SA_SIGINFO) {  // chain first: Python's handler records the KeyboardInterrupt
      if (prev->sa_sigaction != nullptr) prev->sa_sigaction(sig, info, context);
    } else if (prev->sa_handler != SIG_DFL && prev->sa_handler != SIG_IGN) {
      prev->sa_handler(sig);
    }
    __atomic_store_n(&g_chaining, 0, __ATOMIC_RELEASE);
  }
  const uint64_t running = __atomic_load_n(&st->kernel_call, __ATOMIC_ACQUIRE);
  if (running != 0) {
    if (running == __atomic_load_n(&st->abandon_call, __ATOMIC_ACQUIRE) && OnMainThread()) {
      errno = saved_errno;
      __builtin_longjmp(st->jump, 1);  // back into RunOnMain, which returns AOTB_INTERRUPTED
    }
    if (!from_watchdog) {
      __atomic_store_n(&st->interrupted_call, running, __ATOMIC_RELEASE);
      sem_post(&g_watch);  // async-signal-safe
    }
  }
  errno = saved_errno;
}

void *Watchdog(void *) {
  for (;;) {
    if (sem_wait(&g_watch) != 0) continue;
    InterruptState *st = g_state;
    const uint64_t call = __atomic_load_n(&st->interrupted_call, __ATOMIC_ACQUIRE);
    if (call == 0 || __atomic_load_n(&st->kernel_call, __ATOMIC_ACQUIRE) != call) continue;  // returned already
    for (int waited = 0; waited < g_grace_ms && __atomic_load_n(&st->kernel_call, __ATOMIC_ACQUIRE) == call;
         waited += 10) {
      usleep(10000);
    }
    if (__atomic_load_n(&st->kernel_call, __ATOMIC_ACQUIRE) != call) continue;  // it returned: nothing to abandon
    __atomic_store_n(&st->abandon_call, call, __ATOMIC_RELEASE);
    __atomic_store_n(&st->watchdog_kill, 1, __ATOMIC_RELEASE);
    pthread_kill(st->main_thread, SIGINT);
  }
  return nullptr;
}

// Threads do not survive fork: the watchdog is started again on the next install, and a kernel call the parent's
// main thread was in (fork from another thread) is not this process's.
void AfterForkInChild() {
  g_watchdog_running = 0;
  __atomic_store_n(&g_state->kernel_call, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&g_state->abandon_call, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&g_state->watchdog_kill, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&g_state->interrupted_call, 0, __ATOMIC_RELAXED);
}

bool StartWatchdog() {
  if (g_watchdog_running) return true;
  static bool once = false;
  if (!once) {
    pthread_atfork(nullptr, nullptr, AfterForkInChild);
    once = true;
  }
  if (sem_init(&g_watch, 0, 0) != 0) return false;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);  // the watchdog inherits a mask that blocks every signal
  pthread_t thread;
  const bool ok = pthread_create(&thread, nullptr, Watchdog, nullptr) == 0;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (!ok) return false;
  pthread_detach(thread);
  g_watchdog_running = 1;
  return true;
}

void AbortWrite(const char *text) {
  for (int fd : g_abort_fds) {
    if (fd >= 0) WriteAll(fd, text);
  }
}

void OnAbort(int sig, siginfo_t *, void *) {
  const InterruptState *st = g_state;
  const auto *c = st->key_made ? static_cast<const AotbCall *>(pthread_getspecific(st->current_key)) : nullptr;
  if (g_abort_report && c != nullptr && c->label != nullptr) {
    AbortWrite("\naotbench: ");
    AbortWrite(c->label);
    AbortWrite(" called abort() in this process, which ends it now (variables are lost). Run the op with "
               "isolate=True (Custom(..., isolate=True), %%aot_kernel --isolate) to get a KernelCrashedError "
               "instead.\n");
  }
  // Die as before: the handler this one replaced gets the signal, pending until this handler returns.
  sigaction(SIGABRT, &g_prev_abrt, nullptr);
  raise(sig);
}
}  // namespace

// Installs (again) the host's SIGINT handler over the current one, which it chains to, and starts the watchdog;
// ipykernel replaces the handler at the start of every execute request, so Python calls this again then (and
// on every slow-path call). 1: installed; 0: SIGINT is ignored or has its default action, or the program handles
// it itself (grace_ms < 0), and that stays as it is; -1: failed. The first call also installs the abort report.
AOTB_EXPORT int aotb_install_signal_handlers(unsigned long main_thread, int grace_ms) {
  InterruptState *st = g_state;
  if (st != &g_own_state) return -1;  // a later host: the first host's handler serves every host
  st->main_thread = static_cast<pthread_t>(main_thread);
  __atomic_store_n(&st->main_known, 1, __ATOMIC_RELEASE);
  if (!st->key_made && pthread_key_create(&st->current_key, nullptr) == 0) st->key_made = 1;
  if (grace_ms > 0) g_grace_ms = grace_ms;
  if (!g_abrt_installed) {
    struct sigaction sa = {};
    sa.sa_sigaction = OnAbort;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGABRT, &sa, &g_prev_abrt) == 0) g_abrt_installed = 1;
  }
  if (grace_ms < 0) return 0;  // the program handles SIGINT itself: leave its handler alone
  struct sigaction current = {};
  if (sigaction(SIGINT, nullptr, &current) != 0) return -1;
  if ((current.sa_flags & SA_SIGINFO) && current.sa_sigaction == OnInterrupt) return StartWatchdog() ? 1 : -1;
  // Only Python's own handler is replaced (and chained to): another C handler (faulthandler.register(SIGINT,
  // chain=True) ...) may chain back to this one, or re-register itself over it, and the two would loop.
  const void *current_fn = (current.sa_flags & SA_SIGINFO) ? reinterpret_cast<void *>(current.sa_sigaction)
                                                           : reinterpret_cast<void *>(current.sa_handler);
  if (g_python_handler != nullptr && current_fn != g_python_handler) return 0;
  if (!(current.sa_flags & SA_SIGINFO) && (current.sa_handler == SIG_IGN || current.sa_handler == SIG_DFL)) return 0;
  if (!StartWatchdog()) return -1;
  struct sigaction *slot = &g_prev_int_slots[g_prev_int == &g_prev_int_slots[0] ? 1 : 0];
  *slot = current;
  __atomic_store_n(&g_prev_int, slot, __ATOMIC_RELEASE);
  struct sigaction sa = {};
  sa.sa_sigaction = OnInterrupt;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | (current.sa_flags & SA_RESTART);
  sa.sa_mask = current.sa_mask;
  sigaddset(&sa.sa_mask, SIGINT);
  st->handler_mask = sa.sa_mask;
  return sigaction(SIGINT, &sa, nullptr) == 0 ? 1 : -1;
}

// This host's interrupt state, and: work on another host's (the first one loaded in the process), so that one
// SIGINT handler and one watchdog serve the kernels of every host.
AOTB_EXPORT void *aotb_interrupt_state() { return &g_own_state; }
AOTB_EXPORT void aotb_use_interrupt_state(void *state) {
  g_state = state != nullptr ? static_cast<InterruptState *>(state) : &g_own_state;
}

// The C function a signal's handler is now (0 for SIG_DFL): Python learns its own signal handler's address from
// a signal it installs one on, and hands it to aotb_set_python_handler.
AOTB_EXPORT void *aotb_handler_of(int sig) {
  struct sigaction current = {};
  if (sigaction(sig, nullptr, &current) != 0) return nullptr;
  return (current.sa_flags & SA_SIGINFO) ? reinterpret_cast<void *>(current.sa_sigaction)
                                         : reinterpret_cast<void *>(current.sa_handler);
}
AOTB_EXPORT void aotb_set_python_handler(void *fn) { g_python_handler = fn; }

// The record of the call the stop button abandoned last (0 if none), cleared by the read.
AOTB_EXPORT void *aotb_take_abandoned() {
  return const_cast<AotbCall *>(__atomic_exchange_n(&g_state->abandoned, nullptr, __ATOMIC_SEQ_CST));
}

// Whether the abort report is written (an isolated op's worker turns it off: the parent reports the crash).
AOTB_EXPORT void aotb_set_abort_report(int on) { g_abort_report = on; }

// A second descriptor the abort report is written to (-1: none), besides fd 2.
AOTB_EXPORT void aotb_set_abort_fd(int fd) { g_abort_fds[1] = fd == 2 ? -1 : fd; }

// What the last call on this thread changed and the host restored (after AOTB_FP_CHANGED / SIGNALS_CHANGED):
// out[0..3] = control before, after, x87 before, after; out[4..6] = signals blocked, unblocked, SIGINT replaced.
AOTB_EXPORT void aotb_state_report(uint64_t *out) {
  out[0] = g_report.control_before;
  out[1] = g_report.control_after;
  out[2] = g_report.x87_before;
  out[3] = g_report.x87_after;
  out[4] = g_report.blocked;
  out[5] = g_report.unblocked;
  out[6] = g_report.sigint_changed;
}

AOTB_EXPORT int aotb_host_version() { return kHostVersion; }
AOTB_EXPORT int aotb_host_call_size() { return static_cast<int>(sizeof(AotbCall)); }
AOTB_EXPORT int aotb_host_extra_size() { return static_cast<int>(sizeof(AotExtra)); }
AOTB_EXPORT int aotb_host_max_params() { return kMaxParams; }

// The ABI by name, for Python to compare with its mirrors at load (aotbench/native/runtime.py): each fills up to
// `max` entries and returns how many there are. The outcome codes and attribute kinds (name, value) ...
AOTB_EXPORT int aotb_outcomes(const char **names, int32_t *values, int max) {
  return CopyNames(kOutcomeNames, names, values, max);
}
AOTB_EXPORT int aotb_attr_kinds(const char **names, int32_t *values, int max) {
  return CopyNames(kKindNames, names, values, max);
}
// ... and struct AotbCall's fields (name, offset, size), in order.
AOTB_EXPORT int aotb_call_layout(const char **names, int64_t *offsets, int64_t *sizes, int max) {
  for (int k = 0; k < kCallFieldCount && k < max; ++k) {
    names[k] = kCallFields[k].name;
    offsets[k] = kCallFields[k].offset;
    sizes[k] = kCallFields[k].size;
  }
  return kCallFieldCount;
}

AOTB_EXPORT void *aotb_extra_new() { return new (std::nothrow) HostExtra(); }

// Destroys an extra, deleting its kernel data first (kernel code: the library must still be loaded).
AOTB_EXPORT int aotb_extra_free(void *extra) {
  return Guarded([&] {
    HostExtra *h = AsHost(extra);
    h->DestructKernelData();
    delete h;
    return AOTB_OK;
  });
}

AOTB_EXPORT int64_t aotb_extra_workspace_count(void *extra) {
  return static_cast<int64_t>(AsHost(extra)->WorkSpace().size());
}

AOTB_EXPORT void aotb_extra_workspace_sizes(void *extra, uint64_t *out) {
  const std::vector<size_t> &w = AsHost(extra)->WorkSpace();
  for (size_t k = 0; k < w.size(); ++k) out[k] = w[k];
}

// The attribute setters: 0 (AOTB_OK) once stored, else AOTB_NO_MEMORY or AOTB_EXCEPTION (aotb_error_message).
AOTB_EXPORT int aotb_extra_set_bool(void *extra, const char *name, int value) {
  return Storing([&] { Slot(extra, name, kBool).b = value != 0; });
}
AOTB_EXPORT int aotb_extra_set_int(void *extra, const char *name, int64_t value) {
  return Storing([&] { Slot(extra, name, kInt).i = value; });
}
AOTB_EXPORT int aotb_extra_set_float(void *extra, const char *name, float value) {
  return Storing([&] { Slot(extra, name, kFloat).f = value; });
}
AOTB_EXPORT int aotb_extra_set_str(void *extra, const char *name, const char *data, size_t size) {
  return Storing([&] { Slot(extra, name, kStr).s.assign(data, size); });
}
AOTB_EXPORT int aotb_extra_set_int_vec(void *extra, const char *name, const int64_t *data, size_t n) {
  return Storing([&] { Slot(extra, name, kIntVec).iv.assign(data, data + n); });
}
AOTB_EXPORT int aotb_extra_set_float_vec(void *extra, const char *name, const float *data, size_t n) {
  return Storing([&] { Slot(extra, name, kFloatVec).fv.assign(data, data + n); });
}
AOTB_EXPORT int aotb_extra_set_int_2d(void *extra, const char *name, const int64_t *flat, const int64_t *lengths,
                                      size_t rows) {
  return Storing([&] { Slot(extra, name, kInt2D).i2 = Unflatten(flat, lengths, rows); });
}
AOTB_EXPORT int aotb_extra_set_float_2d(void *extra, const char *name, const float *flat, const int64_t *lengths,
                                        size_t rows) {
  return Storing([&] { Slot(extra, name, kFloat2D).f2 = Unflatten(flat, lengths, rows); });
}
AOTB_EXPORT int aotb_extra_set_empty_list(void *extra, const char *name) {
  return Storing([&] { Slot(extra, name, kEmptyList); });
}
AOTB_EXPORT int aotb_extra_set_empty_rows(void *extra, const char *name, size_t rows) {
  return Storing([&] {
    AttrValue &v = Slot(extra, name, kEmptyRows);
    v.i2.assign(rows, {});
    v.f2.assign(rows, {});
  });
}

AOTB_EXPORT void aotb_set_python_api(void *get_buffer, void *release_buffer, void *tuple_size, void *tuple_item,
                                     void *err_clear, void *save_thread, void *restore_thread) {
  g_py.get_buffer = reinterpret_cast<int (*)(void *, PyBufferView *, int)>(get_buffer);
  g_py.release_buffer = reinterpret_cast<void (*)(PyBufferView *)>(release_buffer);
  g_py.tuple_size = reinterpret_cast<intptr_t (*)(void *)>(tuple_size);
  g_py.tuple_item = reinterpret_cast<void *(*)(void *, intptr_t)>(tuple_item);
  g_py.err_clear = reinterpret_cast<void (*)()>(err_clear);
  g_py.save_thread = reinterpret_cast<void *(*)()>(save_thread);
  g_py.restore_thread = reinterpret_cast<void (*)(void *)>(restore_thread);
}

// Calls F with a complete params array of the caller's (inputs, outputs, workspaces) on `stream`: the
// universal path (check mode, guarded calls, arrays the buffer protocol refuses, device pointers).
AOTB_EXPORT int aotb_call_params(AotbCall *c, void **params, void *stream) { return RunKernel(c, params, stream); }

namespace {

// Reads the data pointers of the `inputs` and `outputs` tuples through the buffer protocol into a params array
// of its own, copies the workspace pointers from `workspaces`, releases the GIL, calls F, and returns an outcome
// code. AOTB_BAD_BUFFER (no Python error left set) asks the caller to convert its arguments and try again.
int CallBuffers(AotbCall *c, void *inputs, void *outputs, void *const *workspaces) {
  void *params[kMaxParams];
  PyBufferView views[kMaxParams];
  const int n_buffers = c->n_in + c->n_out;
  for (int k = n_buffers; k < c->nparam; ++k) params[k] = workspaces[k - n_buffers];
  int taken = 0;
  for (; taken < n_buffers; ++taken) {
    const bool is_input = taken < c->n_in;
    void *obj = g_py.tuple_item(is_input ? inputs : outputs, is_input ? taken : taken - c->n_in);
    // Inputs too are asked for writable buffers: a read-only one (np.memmap mode "r", np.frombuffer(bytes))
    // is refused here, and the caller passes a copy (a kernel writing into it would crash or change it).
    if (g_py.get_buffer(obj, &views[taken], kBufferCWritable) != 0) {
      g_py.err_clear();
      break;
    }
    if (views[taken].len != c->nbytes[taken]) {
      g_py.release_buffer(&views[taken]);
      break;
    }
    params[taken] = views[taken].buf;
  }
  int outcome = AOTB_BAD_BUFFER;
  if (taken == n_buffers) {
    void *thread_state = g_py.save_thread();
    outcome = RunKernel(c, params, c->stream);
    g_py.restore_thread(thread_state);
  }
  for (int k = 0; k < taken; ++k) g_py.release_buffer(&views[k]);
  return outcome;
}

bool BadShape(const AotbCall *c, void *inputs, void *outputs) {
  return c->nparam > kMaxParams || g_py.tuple_size(inputs) != c->n_in || g_py.tuple_size(outputs) != c->n_out;
}

}  // namespace

// The hot path, called with the GIL held (ctypes.PyDLL), on the plan's own workspaces. Concurrent calls of one
// plan cannot interfere: the inputs and outputs are read per call, and the workspaces are taken by one call at
// a time (AOTB_BUSY tells another that they are in use, before anything is read).
AOTB_EXPORT int aotb_call_buffers(AotbCall *c, void *inputs, void *outputs) {
  if (BadShape(c, inputs, outputs)) return AOTB_BAD_BUFFER;
  const bool has_workspaces = c->nparam > c->n_in + c->n_out;
  if (has_workspaces && __atomic_exchange_n(&c->busy, 1, __ATOMIC_ACQUIRE) != 0) return AOTB_BUSY;
  int outcome = CallBuffers(c, inputs, outputs, c->params + c->n_in + c->n_out);
  if (has_workspaces) __atomic_store_n(&c->busy, 0, __ATOMIC_RELEASE);
  return outcome;
}

// The same call on a set of workspaces the caller checked out for itself (one pointer per workspace).
AOTB_EXPORT int aotb_call_buffers_with(AotbCall *c, void *inputs, void *outputs, void *const *workspaces) {
  if (BadShape(c, inputs, outputs)) return AOTB_BAD_BUFFER;
  return CallBuffers(c, inputs, outputs, workspaces);
}

AOTB_EXPORT int aotb_call_init(void *fn, int *ndims, int64_t **shapes, const char **dtypes, void *extra,
                               int32_t *status) {
  return StateGuarded([&] {
    return Guarded([&] {
      *status = reinterpret_cast<InitFn>(fn)(ndims, shapes, dtypes, AsHost(extra));
      return *status == 0 ? AOTB_OK : AOTB_STATUS;
    });
  });
}

// Calls FInferShape (multi != 0: the vector-of-vectors form) and writes the result into `out` as
// [n_outputs, rank_0, dims_0..., rank_1, dims_1...]. When `capacity` is too small, *needed receives the size
// and AOTB_TOO_SMALL is returned (call again with a larger buffer).
AOTB_EXPORT int aotb_call_infer(void *fn, int multi, int *ndims, int64_t **shapes, void *extra, int64_t *out,
                                int64_t capacity, int64_t *needed) {
  return StateGuarded([&] { return Guarded([&] {
    std::vector<std::vector<int64_t>> result;
    if (multi) {
      result = reinterpret_cast<InferMultiFn>(fn)(ndims, shapes, AsHost(extra));
    } else {
      result.push_back(reinterpret_cast<InferFn>(fn)(ndims, shapes, AsHost(extra)));
    }
    int64_t size = 1;
    for (const auto &s : result) size += 1 + static_cast<int64_t>(s.size());
    *needed = size;
    if (size > capacity) return AOTB_TOO_SMALL;
    int64_t at = 0;
    out[at++] = static_cast<int64_t>(result.size());
    for (const auto &s : result) {
      out[at++] = static_cast<int64_t>(s.size());
      for (int64_t d : s) out[at++] = d;
    }
    return AOTB_OK;
  }); });
}

AOTB_EXPORT const char *aotb_error_message() { return g_error.message.c_str(); }
AOTB_EXPORT const char *aotb_error_attr_name() { return g_error.attr_name.c_str(); }
AOTB_EXPORT int aotb_error_attr_requested() { return g_error.attr_requested; }
AOTB_EXPORT int aotb_error_attr_registered() { return g_error.attr_registered; }
AOTB_EXPORT int aotb_error_status() { return g_error.status; }

#include "aotb_sampler.h"  // the sampling profiler (op.profile)

// ThreadSanitizer annotations for Debian's abseil synchronization, linked into every executable
// of a TSan build (STRATA_SANITIZE=thread: cmake/StrataHelpers.cmake); no other build has it.
//
// Debian ships abseil (and gRPC, which locks absl::Mutex everywhere) compiled without
// -fsanitize=thread, so absl::Mutex's lock and unlock, out of line in libabsl_synchronization.so,
// are invisible to TSan: it would see no happens-before between two critical sections and report
// every access under a Mutex as a race, ours and those of gRPC's callbacks into our code alike.
// This file defines those entry points in the executable itself. The dynamic linker binds every
// caller to them, our code and the shared libraries alike (the executable comes first in the
// symbol search order); each calls abseil's own definition (the next one, found with
// dlsym(RTLD_NEXT)) inside the annotations that abseil's mutex.cc makes itself when it is built
// with TSan (sanitizer/tsan_interface.h). TSan so models each Mutex as a mutex: ordering, reader
// and writer modes, lock-order inversions, destroying a locked mutex. What abseil does inside a
// lock or unlock (evaluating a waiter's Condition, say) is ignored, as it is there.
//
// Await and CondVar::Wait are annotated as an unlock and a lock again of a Mutex held in writer
// mode (TSan reports a mismatch should one be called under a reader lock).
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/base/options.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace {

#define STRATA_TSAN_STRINGIFY_(x) #x
#define STRATA_TSAN_STRINGIFY(x) STRATA_TSAN_STRINGIFY_(x)

// abseil's definition of the member function whose mangled name is "_ZN4absl<ns><rest>" (or
// "_ZNK4absl..." for a const one), <ns> being abseil's inline namespace as mangled (7debian3).
template <typename Function>
Function Real(const char* prefix, const char* rest) {
  std::string name = std::string(prefix) + "4absl";
#if ABSL_OPTION_USE_INLINE_NAMESPACE
  const std::string ns = STRATA_TSAN_STRINGIFY(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  name += std::to_string(ns.size()) + ns;
#endif
  name += rest;
  void* real = dlsym(RTLD_NEXT, name.c_str());
  if (real == nullptr) {
    std::fprintf(stderr, "tsan absl annotations: %s not found\n", name.c_str());
    std::abort();
  }
  return reinterpret_cast<Function>(real);
}

// Looked up once, at first use (which may come before main).
#define STRATA_REAL(Type, prefix, rest) static const auto real = Real<Type>(prefix, rest)

// Set while this thread runs one of abseil's Mutex or CondVar functions from here. abseil calls
// some of them itself (CondVar::WaitWithTimeout calls WaitWithDeadline): such a nested call is
// part of the outer one, already annotated, and goes straight to abseil. (Notification's own
// Mutex is locked and unlocked through here like any other.)
thread_local bool in_abseil = false;

// Runs `call` (abseil's function) with `in_abseil` set.
template <typename Call>
auto InAbseil(Call call) {
  in_abseil = true;
  const auto result = call();
  in_abseil = false;
  return result;
}

constexpr unsigned kWriter = 0;
constexpr unsigned kReader = __tsan_mutex_read_lock;

void* Addr(const void* object) { return const_cast<void*>(object); }

// Runs `wait`, which may release `mu` (held in writer mode) and always holds it again on return.
template <typename Wait>
auto ReleasedDuring(absl::Mutex* mu, Wait wait) {
  if (in_abseil) return wait();
  __tsan_mutex_pre_unlock(mu, kWriter);
  const auto result = InAbseil(wait);
  __tsan_mutex_post_unlock(mu, kWriter);
  __tsan_mutex_pre_lock(mu, kWriter);
  __tsan_mutex_post_lock(mu, kWriter, 0);
  return result;
}

template <typename Lock>
auto Locking(absl::Mutex* mu, unsigned mode, Lock lock) {
  if (in_abseil) return lock();
  __tsan_mutex_pre_lock(mu, mode);
  const auto result = InAbseil(lock);
  __tsan_mutex_post_lock(mu, mode, 0);
  return result;
}

template <typename TryLock>
bool TryLocking(absl::Mutex* mu, unsigned mode, TryLock try_lock) {
  if (in_abseil) return try_lock();
  mode |= __tsan_mutex_try_lock;
  __tsan_mutex_pre_lock(mu, mode);
  const bool acquired = InAbseil(try_lock);
  __tsan_mutex_post_lock(mu, acquired ? mode : mode | __tsan_mutex_try_lock_failed, 0);
  return acquired;
}

template <typename Unlock>
void Unlocking(absl::Mutex* mu, unsigned mode, Unlock unlock) {
  if (in_abseil) return unlock();
  __tsan_mutex_pre_unlock(mu, mode);
  InAbseil([&] { return (unlock(), 0); });
  __tsan_mutex_post_unlock(mu, mode);
}

// Notification::HasBeenNotified() is inline: an acquire load of `notified_yet_`, the member after
// the Notification's Mutex, which abseil's Notify() stores to. TSan learns of that store here.
void* NotifiedFlag(absl::Notification* notification) {
  static_assert(sizeof(absl::Notification) == 2 * sizeof(absl::Mutex),
                "absl::Notification is no longer {Mutex mutex_; atomic<bool> notified_yet_;}");
  return reinterpret_cast<char*>(notification) + sizeof(absl::Mutex);
}

using MutexFn = void (*)(absl::Mutex*);
using TryFn = bool (*)(absl::Mutex*);
using CondFn = void (*)(absl::Mutex*, const absl::Condition&);
using CondTimeoutFn = bool (*)(absl::Mutex*, const absl::Condition&, absl::Duration);
using CondDeadlineFn = bool (*)(absl::Mutex*, const absl::Condition&, absl::Time);

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

Mutex::~Mutex() {
  STRATA_REAL(MutexFn, "_ZN", "5MutexD1Ev");
  __tsan_mutex_destroy(this, __tsan_mutex_not_static);
  real(this);
}

void Mutex::Lock() {
  STRATA_REAL(MutexFn, "_ZN", "5Mutex4LockEv");
  Locking(this, kWriter, [&] { return (real(this), 0); });
}

void Mutex::ReaderLock() {
  STRATA_REAL(MutexFn, "_ZN", "5Mutex10ReaderLockEv");
  Locking(this, kReader, [&] { return (real(this), 0); });
}

bool Mutex::TryLock() {
  STRATA_REAL(TryFn, "_ZN", "5Mutex7TryLockEv");
  return TryLocking(this, kWriter, [&] { return real(this); });
}

bool Mutex::ReaderTryLock() {
  STRATA_REAL(TryFn, "_ZN", "5Mutex13ReaderTryLockEv");
  return TryLocking(this, kReader, [&] { return real(this); });
}

void Mutex::Unlock() {
  STRATA_REAL(MutexFn, "_ZN", "5Mutex6UnlockEv");
  Unlocking(this, kWriter, [&] { real(this); });
}

void Mutex::ReaderUnlock() {
  STRATA_REAL(MutexFn, "_ZN", "5Mutex12ReaderUnlockEv");
  Unlocking(this, kReader, [&] { real(this); });
}

void Mutex::LockWhen(const Condition& cond) {
  STRATA_REAL(CondFn, "_ZN", "5Mutex8LockWhenERKNS0_9ConditionE");
  Locking(this, kWriter, [&] { return (real(this, cond), 0); });
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  STRATA_REAL(CondFn, "_ZN", "5Mutex14ReaderLockWhenERKNS0_9ConditionE");
  Locking(this, kReader, [&] { return (real(this, cond), 0); });
}

// The *WithTimeout and *WithDeadline forms hold the Mutex on return whatever they return.
bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  STRATA_REAL(CondTimeoutFn, "_ZN", "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  return Locking(this, kWriter, [&] { return real(this, cond, timeout); });
}

bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, Duration timeout) {
  STRATA_REAL(CondTimeoutFn, "_ZN",
              "5Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  return Locking(this, kReader, [&] { return real(this, cond, timeout); });
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  STRATA_REAL(CondDeadlineFn, "_ZN", "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  return Locking(this, kWriter, [&] { return real(this, cond, deadline); });
}

bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, Time deadline) {
  STRATA_REAL(CondDeadlineFn, "_ZN",
              "5Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  return Locking(this, kReader, [&] { return real(this, cond, deadline); });
}

void Mutex::Await(const Condition& cond) {
  STRATA_REAL(CondFn, "_ZN", "5Mutex5AwaitERKNS0_9ConditionE");
  ReleasedDuring(this, [&] { return (real(this, cond), 0); });
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  STRATA_REAL(CondTimeoutFn, "_ZN", "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  return ReleasedDuring(this, [&] { return real(this, cond, timeout); });
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  STRATA_REAL(CondDeadlineFn, "_ZN", "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  return ReleasedDuring(this, [&] { return real(this, cond, deadline); });
}

// CondVar: waiting releases the Mutex and holds it again on return.
void CondVar::Wait(Mutex* mu) {
  STRATA_REAL(void (*)(CondVar*, Mutex*), "_ZN", "7CondVar4WaitEPNS0_5MutexE");
  ReleasedDuring(mu, [&] { return (real(this, mu), 0); });
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  STRATA_REAL(bool (*)(CondVar*, Mutex*, Duration), "_ZN",
              "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  return ReleasedDuring(mu, [&] { return real(this, mu, timeout); });
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  STRATA_REAL(bool (*)(CondVar*, Mutex*, Time), "_ZN",
              "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  return ReleasedDuring(mu, [&] { return real(this, mu, deadline); });
}

// Notification: Notify() happens before every wait that returns notified, and before
// HasBeenNotified() returns true.
void Notification::Notify() {
  STRATA_REAL(void (*)(Notification*), "_ZN", "12Notification6NotifyEv");
  __tsan_release(this);
  __tsan_release(NotifiedFlag(this));
  real(this);
}

void Notification::WaitForNotification() const {
  STRATA_REAL(void (*)(const Notification*), "_ZNK", "12Notification19WaitForNotificationEv");
  real(this);
  __tsan_acquire(Addr(this));
}

bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  STRATA_REAL(bool (*)(const Notification*, Duration), "_ZNK",
              "12Notification30WaitForNotificationWithTimeoutENS0_8DurationE");
  const bool notified = real(this, timeout);
  if (notified) __tsan_acquire(Addr(this));
  return notified;
}

bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  STRATA_REAL(bool (*)(const Notification*, Time), "_ZNK",
              "12Notification31WaitForNotificationWithDeadlineENS0_4TimeE");
  const bool notified = real(this, deadline);
  if (notified) __tsan_acquire(Addr(this));
  return notified;
}

ABSL_NAMESPACE_END
}  // namespace absl

// Copyright 2026 The Strata Authors.
//
// Lock contracts the compiler checks. With clang and -Wthread-safety (the
// `make check-locks` build, run in CI) reading a GUARDED_BY member without
// its mutex, calling a REQUIRES function unlocked or an EXCLUDES function
// locked is an error; with other compilers the macros expand to nothing.
// The capabilities are strata::Mutex (util/mutex.h); std::mutex carries no
// annotations, so state behind one is not checked.
//
// See https://clang.llvm.org/docs/ThreadSafetyAnalysis.html.
#ifndef STRATA_UTIL_THREAD_ANNOTATIONS_H_
#define STRATA_UTIL_THREAD_ANNOTATIONS_H_

#if defined(__clang__)
#define STRATA_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define STRATA_THREAD_ANNOTATION(x)
#endif

// On a class: it is a lock (a capability named `x`).
#define CAPABILITY(x) STRATA_THREAD_ANNOTATION(capability(x))
// On a class: an RAII holder of a capability.
#define SCOPED_CAPABILITY STRATA_THREAD_ANNOTATION(scoped_lockable)
// On a member: read and written only with `x` held.
#define GUARDED_BY(x) STRATA_THREAD_ANNOTATION(guarded_by(x))
// On a pointer member: what it points to is guarded by `x`.
#define PT_GUARDED_BY(x) STRATA_THREAD_ANNOTATION(pt_guarded_by(x))
// On a mutex: it is taken after (before) the named ones.
#define ACQUIRED_AFTER(...) STRATA_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#define ACQUIRED_BEFORE(...) STRATA_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
// On a function: the caller holds (does not hold) the capabilities.
#define REQUIRES(...) STRATA_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) STRATA_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
// On a function: it takes (gives up) the capabilities.
#define ACQUIRE(...) STRATA_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) STRATA_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) STRATA_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
// On a function: it checks at run time that the capability is held.
#define ASSERT_CAPABILITY(x) STRATA_THREAD_ANNOTATION(assert_capability(x))
// On a function: it returns a reference to the capability.
#define RETURN_CAPABILITY(x) STRATA_THREAD_ANNOTATION(lock_returned(x))
// On a function: the analysis does not look inside (say why where used).
#define NO_THREAD_SAFETY_ANALYSIS STRATA_THREAD_ANNOTATION(no_thread_safety_analysis)

#endif  // STRATA_UTIL_THREAD_ANNOTATIONS_H_

// How Strata's binaries (stratad, strata-controller) take SIGTERM and SIGINT: synchronously, on
// the main thread, which waits for one and then stops the process's parts in order. Call
// BlockStopSignals first thing in main, before any thread starts: every thread inherits the mask,
// so no other thread is interrupted by them.
#pragma once

#include <signal.h>

#include <string_view>

namespace strata {

// Blocks SIGTERM and SIGINT in the calling thread, ignores SIGPIPE (a closed socket is an
// error return, not a death), and returns the set to wait on.
sigset_t BlockStopSignals();

// Waits until one of `signals` arrives; its name ("SIGTERM" or "SIGINT").
std::string_view AwaitStopSignal(const sigset_t& signals);

}  // namespace strata

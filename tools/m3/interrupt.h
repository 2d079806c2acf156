#pragma once
// Ctrl-C (SIGINT) as a flag the commands poll: generate stops after the current step and prints
// its statistics, chat ends the reply streaming (or, at the prompt, the session).
#include <atomic>

namespace m3::cli {

enum class SigintMode {
  StopOnce,       // the first Ctrl-C sets the flag, a second ends the process (generate)
  EveryTimeEINTR  // every Ctrl-C sets the flag, and a blocked read() fails with EINTR (chat's prompt)
};

// Installs the handler; the flag it sets. Call once per process.
std::atomic<bool>& install_sigint_flag(SigintMode mode);

}  // namespace m3::cli

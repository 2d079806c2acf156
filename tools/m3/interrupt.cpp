#include "interrupt.h"

#include <signal.h>

namespace m3::cli {

namespace {
std::atomic<bool> g_sigint{false};
extern "C" void on_sigint_set_flag(int) { g_sigint.store(true); }
}  // namespace

std::atomic<bool>& install_sigint_flag(SigintMode mode) {
  struct sigaction sa {};
  sa.sa_handler = on_sigint_set_flag;
  sigemptyset(&sa.sa_mask);
  // StopOnce: SA_RESETHAND restores the default action, so a second Ctrl-C ends the process;
  // SA_RESTART keeps system calls going. EveryTimeEINTR: neither, so a read waiting at the prompt
  // returns with EINTR.
  sa.sa_flags = mode == SigintMode::StopOnce ? SA_RESETHAND | SA_RESTART : 0;
  sigaction(SIGINT, &sa, nullptr);
  return g_sigint;
}

}  // namespace m3::cli

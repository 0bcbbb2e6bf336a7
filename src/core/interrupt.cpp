// Clean ends on SIGTERM/SIGINT (and on a SIGBUS in a watched mapping); see interrupt.h. The handler may run on any thread at any moment, so
// its state lives in fixed arrays of atomics (no allocation, no locks) and it calls only
// async-signal-safe functions: kill, waitpid, nanosleep, unlink, write, _exit.
#include "core/interrupt.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <ctime>

namespace lmscale {
namespace {

constexpr int kSlots = 32;
constexpr size_t kPathMax = 1024, kNoteMax = 4096;
constexpr int kChildGraceTenths = 50;  // 5 s for a child to end on the signal, then SIGKILL

std::atomic<pid_t> g_children[kSlots];
std::atomic<bool> g_temp_claimed[kSlots];  // a slot in use by a TempFileGuard
std::atomic<bool> g_temp_used[kSlots];     // its path is written and the handler may remove it
char g_temp_path[kSlots][kPathMax];
// Two note buffers: the one not being read is written, then published by flipping the index.
char g_note[2][kNoteMax];
std::atomic<int> g_note_index{-1};
// Mapped files (MappedFileGuard): the range, and the message said when a SIGBUS falls inside it.
constexpr int kMapSlots = 16;
std::atomic<bool> g_map_claimed[kMapSlots];
std::atomic<bool> g_map_used[kMapSlots];
uintptr_t g_map_begin[kMapSlots], g_map_end[kMapSlots];
char g_map_message[kMapSlots][kNoteMax];
std::atomic<int> g_defer_depth{0};   // DeferInterrupts alive
std::atomic<int> g_pending_signal{0};  // a signal that came while deferred

void say(const char* s) { (void)!::write(STDERR_FILENO, s, std::strlen(s)); }

void sleep_tenth() {
  timespec t{0, 100 * 1000 * 1000};
  while (nanosleep(&t, &t) != 0 && errno == EINTR) {
  }
}

// Waits up to the grace period for pid, then kills it hard and reaps it.
void end_child(pid_t pid) {
  int status = 0;
  for (int i = 0; i < kChildGraceTenths; ++i) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR)) return;  // ended (or not ours to wait for any more)
    sleep_tenth();
  }
  kill(pid, SIGKILL);
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

// What a SIGTERM and a SIGBUS in a mapped file both do before exiting: the children signalled and
// waited for, the temporary files removed.
void end_children_and_temp_files(int sig) {
  for (auto& c : g_children)
    if (const pid_t pid = c.load(); pid > 0) kill(pid, sig);
  for (auto& c : g_children)
    if (const pid_t pid = c.exchange(0); pid > 0) end_child(pid);
  for (int i = 0; i < kSlots; ++i)
    if (g_temp_used[i].load()) ::unlink(g_temp_path[i]);
}

void on_bus_error(int sig, siginfo_t* info, void*) {
  const auto addr = reinterpret_cast<uintptr_t>(info ? info->si_addr : nullptr);
  for (int i = 0; i < kMapSlots; ++i) {
    if (!g_map_used[i].load() || addr < g_map_begin[i] || addr >= g_map_end[i]) continue;
    signal(SIGTERM, SIG_DFL);  // no clean-up of its own from here on
    end_children_and_temp_files(SIGTERM);
    say("\nlmscale: error: ");
    say(g_map_message[i]);
    say("\n");
    _exit(1);
  }
  // Not a mapping lmscale watches: the default action (a core dump where enabled), as before.
  signal(sig, SIG_DFL);
  raise(sig);
}

void on_signal(int sig) {
  if (g_defer_depth.load() > 0) {  // finish the write and its count first (DeferInterrupts)
    int none = 0;
    g_pending_signal.compare_exchange_strong(none, sig);
    return;
  }
  signal(sig, SIG_DFL);  // a second signal ends the process at once
  const int saved_errno = errno;
  end_children_and_temp_files(sig);
  say("\nlmscale: stopped by ");
  say(sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal");
  const int note = g_note_index.load();
  if (note >= 0 && g_note[note][0]) {
    say(": ");
    say(g_note[note]);
  }
  say("\n");
  errno = saved_errno;
  _exit(128 + sig);
}

}  // namespace

void install_interrupt_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGTERM);
  sigaddset(&sa.sa_mask, SIGINT);
  for (int sig : {SIGTERM, SIGINT}) sigaction(sig, &sa, nullptr);
  struct sigaction bus {};
  bus.sa_sigaction = on_bus_error;
  bus.sa_flags = SA_SIGINFO;
  sigemptyset(&bus.sa_mask);
  sigaddset(&bus.sa_mask, SIGTERM);
  sigaddset(&bus.sa_mask, SIGINT);
  sigaction(SIGBUS, &bus, nullptr);
}

MappedFileGuard::MappedFileGuard(const void* base, size_t bytes, const std::string& path, const std::string& message) {
  (void)path;  // named in the message
  for (int i = 0; i < kMapSlots; ++i) {
    bool free = false;
    if (!g_map_claimed[i].compare_exchange_strong(free, true)) continue;
    g_map_begin[i] = reinterpret_cast<uintptr_t>(base);
    g_map_end[i] = g_map_begin[i] + bytes;
    const size_t n = std::min(message.size(), kNoteMax - 1);
    std::memcpy(g_map_message[i], message.data(), n);
    g_map_message[i][n] = '\0';
    g_map_used[i].store(true);
    slot_ = i;
    return;
  }
  // More mapped files at once than slots: this one keeps the bare SIGBUS.
}

MappedFileGuard::~MappedFileGuard() {
  if (slot_ < 0) return;
  g_map_used[slot_].store(false);
  g_map_claimed[slot_].store(false);
}

DeferInterrupts::DeferInterrupts() { ++g_defer_depth; }

DeferInterrupts::~DeferInterrupts() {
  if (--g_defer_depth == 0)
    if (const int sig = g_pending_signal.exchange(0); sig != 0) on_signal(sig);
}

void set_interrupt_note(const std::string& note) {
  const int next = g_note_index.load() == 0 ? 1 : 0;
  const size_t n = std::min(note.size(), kNoteMax - 1);
  std::memcpy(g_note[next], note.data(), n);
  g_note[next][n] = '\0';
  g_note_index.store(next);
}

void register_child(pid_t pid) {
  for (auto& c : g_children) {
    pid_t empty = 0;
    if (c.compare_exchange_strong(empty, pid)) return;
  }
  // More children at once than slots: this one still dies with lmscale (PR_SET_PDEATHSIG).
}

void unregister_child(pid_t pid) {
  for (auto& c : g_children) {
    pid_t mine = pid;
    if (c.compare_exchange_strong(mine, 0)) return;
  }
}

TempFileGuard::TempFileGuard(const std::string& path) {
  if (path.size() >= kPathMax) return;
  for (int i = 0; i < kSlots; ++i) {
    // A slot is claimed, its path written, and only then published to the handler.
    bool free = false;
    if (!g_temp_claimed[i].compare_exchange_strong(free, true)) continue;
    std::memcpy(g_temp_path[i], path.c_str(), path.size() + 1);
    g_temp_used[i].store(true);
    slot_ = i;
    return;
  }
}

TempFileGuard::~TempFileGuard() {
  if (slot_ < 0) return;
  g_temp_used[slot_].store(false);
  g_temp_claimed[slot_].store(false);
}

}  // namespace lmscale

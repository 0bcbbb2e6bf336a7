// SIGTERM and SIGINT end a run cleanly (no orphans): the subprocesses run_process started get the same
// signal and are waited for (and die with lmscale anyway: PR_SET_PDEATHSIG, core/process.cpp), the
// temporary files registered here are removed, and one line on stderr says what was kept and how to
// go on (set_interrupt_note); the process then exits 128 + the signal. Records are appended one whole
// cell per write() and pages renamed into place (results/writer.h), so stopping at any instruction
// loses at most the cell in progress. Everything the handler touches is async-signal-safe. A SIGBUS
// inside a mapped file lmscale registered (MappedFileGuard: a token file truncated under a run) is
// turned into a message naming the file, with the same clean-up, and exit status 1.
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <string>

namespace lmscale {

// Installs the handlers (lmscale's main does, once). A second signal while the first is handled
// ends the process at once (the default action).
void install_interrupt_handlers();

// The line's text after "stopped by SIGTERM: " ("12 of 16 cells kept in results/e2e.jsonl; continue
// with: lmscale bench ... --resume"); "" for none. Copied; safe to call as often as a cell ends.
void set_interrupt_note(const std::string& note);

// Holds SIGTERM/SIGINT back while alive: a signal that comes meanwhile ends the run when the outermost
// holder goes, so what the stop line says and what is on disk agree (a cell appended and counted).
class DeferInterrupts {
 public:
  DeferInterrupts();
  ~DeferInterrupts();
  DeferInterrupts(const DeferInterrupts&) = delete;
  DeferInterrupts& operator=(const DeferInterrupts&) = delete;
};

// A subprocess the handler signals and waits for (run_process registers each child it starts).
void register_child(pid_t pid);
void unregister_child(pid_t pid);

// A memory-mapped file whose shrinking under the process (another program truncating it) would end
// it with a bare SIGBUS at the first read past the new end. While the guard lives, a SIGBUS at an
// address inside [base, base + bytes) prints "lmscale: error: <message>" instead, removes the
// temporary files and stops the children as a SIGTERM would, and exits 1. A SIGBUS anywhere else
// keeps its default action. (install_interrupt_handlers installs the handler.)
class MappedFileGuard {
 public:
  MappedFileGuard(const void* base, size_t bytes, const std::string& path, const std::string& message);
  ~MappedFileGuard();
  MappedFileGuard(const MappedFileGuard&) = delete;
  MappedFileGuard& operator=(const MappedFileGuard&) = delete;

 private:
  int slot_ = -1;
};

// A temporary file the handler removes; registered for the guard's life.
class TempFileGuard {
 public:
  explicit TempFileGuard(const std::string& path);
  ~TempFileGuard();
  TempFileGuard(const TempFileGuard&) = delete;
  TempFileGuard& operator=(const TempFileGuard&) = delete;

 private:
  int slot_ = -1;
};

}  // namespace lmscale

// dtsim: simulate distributed training schedules.
//
// Exit status, the same for every command (docs/command-line.md):
//   0  the command did what was asked, and its run finished and is correct
//   1  a run or a check failed: a schedule broke a rule or deadlocked, final weights are
//      wrong, a target was missed under --strict, validate --check missed a target, a
//      file could not be written, the simulator ran out of memory
//   2  bad arguments, or bad input found before anything ran: a malformed or invalid
//      config, schedule, trace or ground-truth file (InputError)
//   3  the run finished but does not fit in the GPUs' memory (run, failures; a sweep or compare:
//      some run does not fit and none failed)
//   130, 143  stopped by SIGINT (130) or SIGTERM (143): what was computed is printed, files
//      finished before the signal are kept, the file being written is removed
//
// Standard output is line-buffered, so every report line is out as soon as it is printed, on a
// pipe or a file too.
#include "commands.hpp"

#include "dtsim/interrupt.hpp"

#include <signal.h>

#include <csignal>
#include <cstdio>

namespace {

extern "C" void on_stop_signal(int signal) { dtsim::request_interrupt(signal); }

// SIGINT and SIGTERM request an interrupt: the run stops at its next poll, cleans up and exits with
// 128 + the signal's number. The handler is for one signal: a second one of the same kind ends the
// process at once (as without the handler). A signal the process was started to ignore (a
// background job's SIGINT) stays ignored.
void handle_stop_signals() {
    for (const int signal : {SIGINT, SIGTERM}) {
        struct sigaction old {};
        if (sigaction(signal, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        struct sigaction action {};
        action.sa_handler = on_stop_signal;
        sigemptyset(&action.sa_mask);
        action.sa_flags = SA_RESTART | SA_RESETHAND;
        sigaction(signal, &action, nullptr);
    }
}

}  // namespace

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // a report line is out once printed
    handle_stop_signals();
    return dtsim::cli::run_command_line(argc, argv);
}

// The watchdog of a run: a thread per process that ends the process when it has made no progress for too long
// (a process of the run stopped or lost, a read that never returns), with an error that names it, its host,
// what it waited for (and for which processes, on any node, where it waited for messages of some) and, among
// the processes of its node, the one that stopped; the others, waiting for it in turn, end the same way, and
// mpirun ends what is left. Without it such a run hangs until the job's limit.
#pragma once

#include <string>
#include <vector>

namespace dsl::backend {

class Comm;

class Watchdog {
public:
    // Watches this process of the run on `comm` until destroyed (collective: the processes learn who each other
    // is, and those of a node share a table in which each says it is running). `timeout`: the seconds a process
    // may make no progress; 0 for the default, 5 minutes or 10 times the longest of the step the model
    // predicts (`predicted_step`, 0 where there is no prediction) and the steps so far, whichever is longer.
    // The first step, and what the run does between steps (saves, evaluations, its collective checks), get 4
    // times as long. `layers` name the layers of the messages; `exit_code` is the process's when it fires.
    Watchdog(Comm& comm, double timeout, double predicted_step, std::vector<std::string> layers, int exit_code);
    ~Watchdog();
    Watchdog(const Watchdog&) = delete;
    Watchdog& operator=(const Watchdog&) = delete;

    // A step ended after `seconds`: the first step's longer allowance ends, and the default timeout follows the
    // longest step.
    void step_done(double seconds);
    // Between steps (a save, an evaluation, a collective check), while it lives: the longer allowance.
    class Between {
    public:
        Between();
        ~Between();
        Between(const Between&) = delete;
        Between& operator=(const Between&) = delete;
    };
};

// What the trainer reports to the process's watchdog (each a few stores; nothing where none watches). It moved
// on: a layer's work began or a wait ended.
void watchdog_progress();
// From construction to destruction this process waits for other processes: for `what` ("a halo exchange"),
// of `layer` (its index, or -1 for none). `what` must outlive the wait (a literal, or a string that does).
class Awaiting {
public:
    Awaiting(const char* what, int layer);
    ~Awaiting();
    Awaiting(const Awaiting&) = delete;
    Awaiting& operator=(const Awaiting&) = delete;

private:
    const char* outer_what_;
    int outer_layer_;
};
// The layer whose work runs now (its index), for the message where the process was not waiting.
void watchdog_layer(int layer);
// The processes (ranks) whose messages the current wait still misses, named where it never ends; empty once
// it has them all, and for waits on every process (a collective).
void watchdog_peers(const std::vector<int>& peers);

}  // namespace dsl::backend

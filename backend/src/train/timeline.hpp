// The profile of a step (StepProfile) as the trainer makes it while profiling is on: each layer's forward and
// backward time with the part spent waiting, and the step's timeline of compute segments, exchanges and their
// waits, sums and allreduces. The trainer changes it only through these functions; off, they cost a branch.
#pragma once

#include <dsl/backend/comm.hpp>
#include <dsl/backend/memory.hpp>
#include <dsl/backend/trainer.hpp>
#include <dsl/backend/watchdog.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace dsl::backend {

class Timeline {
public:
    using Kind = ProfileEvent::Kind;
    using Phase = ProfileEvent::Phase;
    using Clock = std::chrono::steady_clock;

    // `mem`: the kernels' memory, whose work the clock waits for (a GPU's kernels run after their calls
    // return: while profiling, the clock is read only once those started before it have ended, which
    // serializes what would overlap).
    explicit Timeline(Memory& mem) : mem_(mem) {}

    bool on() const { return on_; }
    void turn(bool on) { on_ = on; }
    const StepProfile& profile() const { return profile_; }

    // A step of a network of `layers` layers begins: its timeline starts afresh, with the first layer's forward.
    void begin_step(std::size_t layers);
    // A layer's forward or backward begins (and collects the waits from here), and ends: its time and its
    // waits into the profile.
    Clock::time_point begin_layer() {
        waited_ = 0.0;
        return Clock::now();
    }
    void end_layer(Phase phase, int layer, Clock::time_point began);
    // The update ends the step.
    void end_update(Clock::time_point began);

    // From here on, the compute is `kind` of `layer` (a no-op while it already is).
    void mark(Phase phase, Kind kind, int layer);
    // The layer whose compute runs now: the one an exchange or allreduce started now is counted to.
    int layer() const { return segment_.layer; }

    // An exchange of `bytes` is posted (a halo or shuffle, for `layer`); the wait for it ends it.
    void post(Kind kind, int layer, std::int64_t bytes);
    // A wait for other processes: `waiting` says for what (a sum's `bytes` are its message's).
    // The watchdog (watchdog.hpp) is told of every wait, so that a wait which never ends is named.
    template <typename Wait>
    void wait(Kind waiting, Wait&& w, std::int64_t bytes = 0) {
        const Awaiting watched(awaited(waiting), watched_layer_);
        if (!on_) return w();
        const double t0 = now();
        w();
        waited(waiting, t0, now(), bytes);
    }

    // A weight-gradient allreduce of `bytes` in `requests` requests on `over` starts now, for the current layer.
    void allreduce_started(Comm& over, std::size_t requests, std::int64_t bytes);
    // The allreduces seen complete now (`all`: every one, after finish_allreduces) end here; with `all`, the
    // count of requests on each communicator starts again.
    void observe_allreduces(bool all);

private:
    static const char* awaited(Kind waiting);  // in the watchdog's words: "a halo exchange"
    double now();
    double seconds_since(Clock::time_point began);  // once the kernels started before now have ended
    void close_segment(double t);
    void waited(Kind waiting, double t0, double t1, std::int64_t bytes);

    Memory& mem_;
    bool on_ = false;
    StepProfile profile_;
    double waited_ = 0.0;  // the seconds spent in waits since the current layer began
    // `segment` is the compute event open now (it ends where the next begins), `posted` the halo exchange or
    // shuffle posted and not yet waited for, `open_allreduces` the weight-gradient allreduces started and not
    // yet seen complete (each with its communicator and its requests among those started on it since the last
    // finish, which `allreduce_requests` counts per communicator).
    int watched_layer_ = -1;  // the layer of the last mark, for the watchdog, profiling or not
    ProfileEvent segment_, posted_;
    bool segment_open_ = false, posted_open_ = false;
    struct OpenAllreduce {
        std::size_t event;
        Comm* over;
        std::size_t first, count;
    };
    std::vector<OpenAllreduce> open_allreduces_;
    std::vector<std::pair<Comm*, std::size_t>> allreduce_requests_;
};

}  // namespace dsl::backend

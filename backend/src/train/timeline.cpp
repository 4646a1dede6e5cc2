// The profile's timeline (timeline.hpp): compute segments, exchanges and their waits, sums and allreduces,
// made as the step runs while profiling is on.
#include "timeline.hpp"

#include <algorithm>

namespace dsl::backend {

const char* Timeline::awaited(Kind waiting) {
    switch (waiting) {
        case Kind::wait_halo: return "a halo exchange";
        case Kind::wait_shuffle: return "a redistribution";
        case Kind::wait_halo_back: return "a halo exchange of gradients";
        case Kind::wait_shuffle_back: return "a redistribution of gradients";
        case Kind::wait_sum: return "a sum over processes (an allreduce of statistics)";
        case Kind::wait_allreduces: return "the allreduces of the weight gradients";
        case Kind::wait_read: return "a read of the data, made ahead of the step (--prefetch)";
        default: return "other processes";
    }
}

double Timeline::now() {
    mem_.synchronize();
    return profile_clock();
}

void Timeline::close_segment(double t) {
    if (segment_open_ && t > segment_.start) {
        ProfileEvent e = segment_;
        e.end = t;
        profile_.events.push_back(e);
    }
    segment_.start = t;
}

void Timeline::begin_step(std::size_t layers) {
    if (!on_) return;
    profile_.layers.assign(layers, LayerTime{});
    profile_.events.clear();
    profile_.read_wait = 0.0;
    open_allreduces_.clear();
    allreduce_requests_.clear();
    posted_open_ = segment_open_ = false;
    mark(Phase::forward, Kind::forward, 0);
    profile_.start = segment_.start;
}

double Timeline::seconds_since(Clock::time_point began) {
    mem_.synchronize();
    return std::chrono::duration<double>(Clock::now() - began).count();
}

void Timeline::end_layer(Phase phase, int layer, Clock::time_point began) {
    if (!on_) return;
    const double seconds = seconds_since(began);
    LayerTime& t = profile_.layers[static_cast<std::size_t>(layer)];
    if (phase == Phase::forward)
        t.forward = seconds, t.forward_wait = waited_;
    else
        t.backward = seconds, t.backward_wait = waited_;
}

void Timeline::end_update(Clock::time_point began) {
    if (!on_) return;
    profile_.update = seconds_since(began), profile_.update_wait = waited_;
    profile_.end = now();
    close_segment(profile_.end);
    segment_open_ = false;
}

void Timeline::mark(Phase phase, Kind kind, int layer) {
    watched_layer_ = layer;
    watchdog_layer(layer);
    if (!on_ || (segment_open_ && segment_.phase == phase && segment_.kind == kind && segment_.layer == layer))
        return;
    const double t = now();
    close_segment(t);
    segment_ = ProfileEvent{kind, phase, layer, t, 0.0, 0};
    segment_open_ = true;
}

void Timeline::post(Kind kind, int layer, std::int64_t bytes) {
    if (!on_) return;
    posted_ = ProfileEvent{kind, segment_.phase, layer, now(), 0.0, bytes};
    posted_open_ = true;
}

namespace {

bool exchange_wait(ProfileEvent::Kind k) {
    using Kind = ProfileEvent::Kind;
    return k == Kind::wait_halo || k == Kind::wait_shuffle || k == Kind::wait_halo_back ||
           k == Kind::wait_shuffle_back;
}

}  // namespace

void Timeline::waited(Kind waiting, double t0, double t1, std::int64_t bytes) {
    waited_ += t1 - t0;
    if (waiting == Kind::wait_read) profile_.read_wait += t1 - t0;
    if (exchange_wait(waiting) && !posted_open_) return;  // nothing was sent: copies within this process
    close_segment(t0);
    // A halo or shuffle is its reader's, and so is the wait for it (a gradient's halo goes back to the layer
    // that made the tensor, while that layer's backward waits for it), as the model counts it.
    const int layer = exchange_wait(waiting) ? posted_.layer : segment_.layer;
    profile_.events.push_back(ProfileEvent{waiting, segment_.phase, layer, t0, t1, 0});
    segment_.start = t1;
    if (waiting == Kind::wait_sum)
        profile_.events.push_back(ProfileEvent{Kind::sum, segment_.phase, segment_.layer, t0, t1, bytes});
    if (exchange_wait(waiting)) {
        posted_.end = t1;
        profile_.events.push_back(posted_);
        posted_open_ = false;
    }
}

void Timeline::allreduce_started(Comm& over, std::size_t requests, std::int64_t bytes) {
    if (!on_) return;
    auto it = std::find_if(allreduce_requests_.begin(), allreduce_requests_.end(),
                           [&](const auto& r) { return r.first == &over; });
    if (it == allreduce_requests_.end()) it = allreduce_requests_.emplace(allreduce_requests_.end(), &over, 0);
    open_allreduces_.push_back(OpenAllreduce{profile_.events.size(), &over, it->second, requests});
    it->second += requests;
    const double t = now();
    profile_.events.push_back(ProfileEvent{Kind::allreduce, Phase::backward, segment_.layer, t, t, bytes});
}

void Timeline::observe_allreduces(bool all) {
    if (all) allreduce_requests_.clear();
    if (!on_ || open_allreduces_.empty()) return;
    // What each communicator says of its requests, asked once (empty where it cannot tell).
    std::vector<std::pair<Comm*, std::vector<bool>>> tested;
    const auto done_on = [&](Comm* over) -> const std::vector<bool>& {
        auto it = std::find_if(tested.begin(), tested.end(), [&](const auto& d) { return d.first == over; });
        if (it == tested.end()) it = tested.emplace(tested.end(), over, over->test_allreduces());
        return it->second;
    };
    const double t = now();
    std::erase_if(open_allreduces_, [&](const OpenAllreduce& a) {
        bool complete = all;
        if (!all) {
            const std::vector<bool>& done = done_on(a.over);
            complete =
                done.size() >= a.first + a.count &&
                std::all_of(done.begin() + static_cast<std::ptrdiff_t>(a.first),
                            done.begin() + static_cast<std::ptrdiff_t>(a.first + a.count), [](bool b) { return b; });
        }
        if (complete) profile_.events[a.event].end = t;
        return complete;
    });
}

}  // namespace dsl::backend

// The profile's timeline: compute segments, exchanges and their waits, sums and allreduces, made as the step
// runs while profiling is on.
#include "trainer_impl.hpp"

#include <algorithm>

namespace dsl::backend {

double Trainer::Impl::now() {
    mem.synchronize();
    return profile_clock();
}

void Trainer::Impl::close_segment(double t) {
    if (segment_open && t > segment.start) {
        ProfileEvent e = segment;
        e.end = t;
        profile.events.push_back(e);
    }
    segment.start = t;
}

// From here on, the compute is `kind` of `layer` (a no-op while it already is).
void Trainer::Impl::mark(Phase phase, Kind kind, int layer) {
    if (!profiling || (segment_open && segment.phase == phase && segment.kind == kind && segment.layer == layer))
        return;
    const double t = now();
    close_segment(t);
    segment = ProfileEvent{kind, phase, layer, t, 0.0, 0};
    segment_open = true;
}

// The allreduces seen complete now (`all`: every one, after finish_allreduces) end here.
void Trainer::Impl::observe_allreduces(bool all) {
    if (!profiling || open_allreduces.empty()) return;
    // What each communicator says of its requests, asked once (empty where it cannot tell).
    std::vector<std::pair<Comm*, std::vector<bool>>> tested;
    const auto done_on = [&](Comm* over) -> const std::vector<bool>& {
        auto it = std::find_if(tested.begin(), tested.end(), [&](const auto& d) { return d.first == over; });
        if (it == tested.end()) it = tested.emplace(tested.end(), over, over->test_allreduces());
        return it->second;
    };
    const double t = now();
    std::erase_if(open_allreduces, [&](const OpenAllreduce& a) {
        bool complete = all;
        if (!all) {
            const std::vector<bool>& done = done_on(a.over);
            complete =
                done.size() >= a.first + a.count &&
                std::all_of(done.begin() + static_cast<std::ptrdiff_t>(a.first),
                            done.begin() + static_cast<std::ptrdiff_t>(a.first + a.count), [](bool b) { return b; });
        }
        if (complete) profile.events[a.event].end = t;
        return complete;
    });
}

double Trainer::Impl::layer_time(Clock::time_point t0) {
    mem.synchronize();
    return since(t0);
}

}  // namespace dsl::backend

// Timelines in the Chrome trace-event format: the measured one of `dsl run --trace`, the predicted one of
// `dsl explain --trace`.
#include "trace.hpp"

#include "planning.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>

namespace dsl::cli {

using backend::ProfileEvent;
using Kind = ProfileEvent::Kind;
using Phase = ProfileEvent::Phase;

namespace {

// The threads of a process's track, in the order they show.
enum class Track { steps, compute, exchange, sums, allreduces };
constexpr const char* track_names[] = {"steps", "compute", "halo exchanges and shuffles", "sums over processes",
                                       "allreduces"};

Track track_of(Kind k) {
    if (backend::is_compute(k)) return Track::compute;
    if (k == Kind::sum) return Track::sums;
    if (k == Kind::allreduce) return Track::allreduces;
    return Track::exchange;
}

const char* category(Kind k) {
    switch (k) {
        case Kind::forward:
        case Kind::backward:
        case Kind::backward_data:
        case Kind::backward_weights:
        case Kind::update: return "compute";
        case Kind::wait_halo:
        case Kind::wait_shuffle:
        case Kind::wait_halo_back:
        case Kind::wait_shuffle_back:
        case Kind::wait_sum:
        case Kind::wait_allreduces:
        case Kind::wait_others:
        case Kind::wait_read: return "wait";
        case Kind::halo:
        case Kind::halo_back: return "halo";
        case Kind::shuffle:
        case Kind::shuffle_back: return "shuffle";
        case Kind::sum: return "sum";
        case Kind::allreduce: return "allreduce";
    }
    return "compute";
}

const char* phase_name(Phase p) {
    switch (p) {
        case Phase::forward: return "forward";
        case Phase::backward: return "backward";
        case Phase::update: return "update";
    }
    return "forward";
}

// Microseconds, to the nanosecond.
double micros(double seconds) { return std::round(seconds * 1e9) / 1e3; }

constexpr const char* trace_marker = R"({"displayTimeUnit":"ms","otherData":{"generator":"dsl )";

}  // namespace

std::string event_name(const frontend::Network& net, const ProfileEvent& e) {
    const std::string layer = e.layer >= 0 && static_cast<std::size_t>(e.layer) < net.layers.size()
                                  ? net.layers[static_cast<std::size_t>(e.layer)].name
                                  : "";
    switch (e.kind) {
        case Kind::forward: return layer + " forward";
        case Kind::backward: return layer + " backward";
        case Kind::backward_data: return layer + " backward data";
        case Kind::backward_weights: return layer + " backward weights";
        case Kind::update: return "update";
        case Kind::wait_halo: return layer + " wait for halo";
        case Kind::wait_shuffle: return layer + " wait for shuffle";
        case Kind::wait_halo_back: return layer + " wait for halo back";
        case Kind::wait_shuffle_back: return layer + " wait for shuffle back";
        case Kind::wait_sum: return layer + " wait for sum";
        case Kind::wait_allreduces: return "wait for allreduces";
        case Kind::wait_others: return layer + " wait for other processes";
        case Kind::wait_read: return layer + " wait for a read ahead (--prefetch)";
        case Kind::halo: return layer + " halo";
        case Kind::halo_back: return layer + " halo back";
        case Kind::shuffle: return layer + " shuffle";
        case Kind::shuffle_back: return layer + " shuffle back";
        case Kind::sum: return layer + " sum";
        case Kind::allreduce: return layer + " allreduce";
    }
    return layer;
}

// Per step: step, start, end, the count of events, then 6 numbers per event.
std::vector<double> pack_steps(const std::vector<TracedStep>& steps, double origin) {
    std::vector<double> out;
    for (const TracedStep& s : steps) {
        out.insert(out.end(), {static_cast<double>(s.step), s.start - origin, s.end - origin,
                               static_cast<double>(s.events.size())});
        for (const ProfileEvent& e : s.events)
            out.insert(out.end(),
                       {static_cast<double>(e.kind), static_cast<double>(e.phase), static_cast<double>(e.layer),
                        e.start - origin, e.end - origin, static_cast<double>(e.bytes)});
    }
    return out;
}

std::vector<TracedStep> unpack_steps(const std::vector<double>& packed) {
    std::vector<TracedStep> out;
    for (std::size_t i = 0; i + 4 <= packed.size();) {
        TracedStep& s = out.emplace_back();
        s.step = static_cast<std::int64_t>(packed[i]);
        s.start = packed[i + 1];
        s.end = packed[i + 2];
        const auto count = static_cast<std::size_t>(packed[i + 3]);
        i += 4;
        for (std::size_t k = 0; k < count && i + 6 <= packed.size(); ++k, i += 6)
            s.events.push_back(ProfileEvent{static_cast<Kind>(static_cast<int>(packed[i])),
                                            static_cast<Phase>(static_cast<int>(packed[i + 1])),
                                            static_cast<int>(packed[i + 2]), packed[i + 3], packed[i + 4],
                                            static_cast<std::int64_t>(packed[i + 5])});
    }
    return out;
}

TracedStep predicted_step(const frontend::Network& net, const scheduler::Prediction& p, double drift) {
    TracedStep out;
    out.step = 1;
    out.end = p.step;
    auto& ev = out.events;
    auto add = [&](Kind k, Phase ph, int layer, double start, double end, std::int64_t bytes = 0) {
        ev.push_back(ProfileEvent{k, ph, layer, start, end, bytes});
    };
    // A wait for other processes (a sum, a shuffle) of `seconds` from t, with its communication beside it.
    auto blocking = [&](Kind wait, Kind comm, Phase ph, int layer, double& t, double seconds) {
        if (seconds <= 0.0) return;
        add(wait, ph, layer, t, t + seconds);
        add(comm, ph, layer, t, t + seconds);
        t += seconds;
    };
    // A layer's sync time: its sums' (where it has any), with the drift of `compute` seconds waited for in
    // them, else that drift alone.
    auto sync = [&](Phase ph, int layer, double& t, double seconds, double compute) {
        const double drifted = std::min(seconds, drift * compute);
        if (seconds - drifted > 1e-12 * seconds) return blocking(Kind::wait_sum, Kind::sum, ph, layer, t, seconds);
        if (drifted <= 0.0) return;
        add(Kind::wait_others, ph, layer, t, t + drifted);
        t += drifted;
    };
    double t = 0.0;
    bool read = p.read_exposed <= 0.0;  // the read not hidden by reading ahead: waited for by the first input
    for (std::size_t i = 0; i < net.layers.size(); ++i) {
        const auto& l = net.layers[i];
        if (l.op == frontend::OpKind::label) continue;
        const scheduler::LayerPrediction& lp = p.layers[i];
        const auto& c = lp.cost;
        const int layer = static_cast<int>(i);
        if (!read && l.op == frontend::OpKind::input) {
            add(Kind::wait_read, Phase::forward, layer, t, t + p.read_exposed);
            t += p.read_exposed;
            read = true;
        }
        blocking(Kind::wait_shuffle, Kind::shuffle, Phase::forward, layer, t, lp.shuffle.seconds / 2.0);
        const bool overlap = lp.dist.overlap.value_or(false);
        if (overlap && (c.forward_halo > 0.0 || (l.windowed() && c.halo_bytes > 0))) {
            // Posted first, hidden behind the interior's compute but for the exposed part.
            add(Kind::halo, Phase::forward, layer, t, t + c.forward + c.forward_halo);
            add(Kind::forward, Phase::forward, layer, t, t + c.forward);
            t += c.forward;
            if (c.forward_halo > 0.0) add(Kind::wait_halo, Phase::forward, layer, t, t + c.forward_halo);
            t += c.forward_halo;
        } else {
            blocking(Kind::wait_halo, Kind::halo, Phase::forward, layer, t, c.forward_halo);
            add(Kind::forward, Phase::forward, layer, t, t + c.forward);
            t += c.forward;
        }
        sync(Phase::forward, layer, t, c.forward_sync, c.forward);
    }
    const double backward_start = t;
    for (std::size_t k = net.layers.size(); k-- > 0;) {
        const auto& l = net.layers[k];
        if (l.is_data()) continue;
        const scheduler::LayerPrediction& lp = p.layers[k];
        const auto& c = lp.cost;
        const int layer = static_cast<int>(k);
        const bool weights =
            l.op == frontend::OpKind::conv || l.op == frontend::OpKind::deconv || l.op == frontend::OpKind::fc;
        const bool overlap = lp.dist.overlap.value_or(false);
        if (!weights) {
            add(Kind::backward, Phase::backward, layer, t, t + c.backward_data + c.backward_weights);
            t += c.backward_data + c.backward_weights;
            blocking(Kind::wait_halo_back, Kind::halo_back, Phase::backward, layer, t, c.backward_halo);
        } else {
            // The trainer's order: an fc layer's weight gradient first, a convolution's input gradient first.
            const bool weights_first = l.op == frontend::OpKind::fc;
            if (!weights_first) {
                add(Kind::backward_data, Phase::backward, layer, t, t + c.backward_data);
                t += c.backward_data;
            }
            if (overlap && c.backward_halo > 0.0) {
                add(Kind::halo_back, Phase::backward, layer, t, t + c.backward_weights + c.backward_halo);
                add(Kind::backward_weights, Phase::backward, layer, t, t + c.backward_weights);
                t += c.backward_weights;
                add(Kind::wait_halo_back, Phase::backward, layer, t, t + c.backward_halo);
                t += c.backward_halo;
            } else {
                add(Kind::backward_weights, Phase::backward, layer, t, t + c.backward_weights);
                t += c.backward_weights;
            }
            if (weights_first) {
                add(Kind::backward_data, Phase::backward, layer, t, t + c.backward_data);
                t += c.backward_data;
            }
            if (!overlap) blocking(Kind::wait_halo_back, Kind::halo_back, Phase::backward, layer, t, c.backward_halo);
        }
        sync(Phase::backward, layer, t, c.backward_sync, c.backward_data + c.backward_weights);
        blocking(Kind::wait_shuffle_back, Kind::shuffle_back, Phase::backward, layer, t, lp.shuffle.seconds / 2.0);
        if (c.allreduce > 0.0 && lp.allreduce_end > 0.0)
            add(Kind::allreduce, Phase::backward, layer, backward_start + lp.allreduce_end - c.allreduce,
                backward_start + lp.allreduce_end);
    }
    t = backward_start + p.backward;
    if (p.allreduce_exposed > 0.0) add(Kind::wait_allreduces, Phase::update, -1, t, t + p.allreduce_exposed);
    t += p.allreduce_exposed;
    add(Kind::update, Phase::update, -1, t, t + p.update);
    out.end = std::max(out.end, t + p.update);
    return out;
}

std::string trace_text(const frontend::Network& net, const std::vector<std::vector<TracedStep>>& processes,
                       const std::vector<std::string>& names, const std::string& generator,
                       const nlohmann::json& about) {
    nlohmann::ordered_json other;
    other["generator"] = generator;
    for (const auto& [key, value] : about.items()) other[key] = value;
    std::string text = R"({"displayTimeUnit":"ms","otherData":)" + other.dump() + R"(,"traceEvents":[)";
    bool first = true;
    auto emit = [&](const nlohmann::ordered_json& j) {
        text += first ? "\n" : ",\n";
        text += j.dump();
        first = false;
    };
    auto metadata = [&](const char* what, int pid, int tid, const char* key, const nlohmann::json& value) {
        nlohmann::ordered_json j{{"name", what}, {"ph", "M"}, {"pid", pid}, {"tid", tid}};
        j["args"][key] = value;
        emit(j);
    };
    for (std::size_t process = 0; process < processes.size(); ++process) {
        const int pid = static_cast<int>(process);
        metadata("process_name", pid, 0, "name", names[process]);
        metadata("process_sort_index", pid, 0, "sort_index", pid);
        // Each track's spans, then lanes within a track so that no two spans of a thread overlap.
        struct Placed {
            const ProfileEvent* event;
            std::int64_t step;
            std::size_t lane = 0;
        };
        std::map<Track, std::vector<Placed>> tracks;
        for (const TracedStep& s : processes[process])
            for (const ProfileEvent& e : s.events) tracks[track_of(e.kind)].push_back(Placed{&e, s.step});
        std::map<Track, std::size_t> lanes;
        for (auto& [track, placed] : tracks) {
            std::stable_sort(placed.begin(), placed.end(),
                             [](const Placed& a, const Placed& b) { return a.event->start < b.event->start; });
            std::vector<double> lane_end;
            for (Placed& p : placed) {
                std::size_t lane = 0;
                // The compute track is one thread: its events follow one another by construction.
                if (track != Track::compute) {
                    while (lane < lane_end.size() && lane_end[lane] > p.event->start) ++lane;
                    if (lane == lane_end.size()) lane_end.push_back(0.0);
                    lane_end[lane] = p.event->end;
                }
                p.lane = lane;
            }
            lanes[track] = std::max<std::size_t>(1, lane_end.size());
        }
        // Thread ids: 1 for steps, then each track's lanes in order.
        std::map<std::pair<Track, std::size_t>, int> tid;
        int next = 1;
        for (int t = 0; t < 5; ++t) {
            const auto track = static_cast<Track>(t);
            const std::size_t count = track == Track::steps ? 1 : lanes.count(track) ? lanes[track] : 0;
            for (std::size_t lane = 0; lane < count; ++lane) {
                tid[{track, lane}] = next;
                metadata("thread_name", pid, next, "name",
                         lane == 0 ? std::string(track_names[t]) : fmt::format("{} ({})", track_names[t], lane + 1));
                metadata("thread_sort_index", pid, next, "sort_index", next);
                ++next;
            }
        }
        for (const TracedStep& s : processes[process]) {
            nlohmann::ordered_json j{{"name", fmt::format("step {}", s.step)},
                                     {"cat", "step"},
                                     {"ph", "X"},
                                     {"ts", micros(s.start)},
                                     {"dur", micros(s.end) - micros(s.start)},
                                     {"pid", pid},
                                     {"tid", tid[{Track::steps, 0}]}};
            j["args"]["step"] = s.step;
            emit(j);
        }
        for (const auto& [track, placed] : tracks)
            for (const Placed& p : placed) {
                const ProfileEvent& e = *p.event;
                nlohmann::ordered_json j{{"name", event_name(net, e)},
                                         {"cat", category(e.kind)},
                                         {"ph", "X"},
                                         {"ts", micros(e.start)},
                                         {"dur", std::max(0.0, micros(e.end) - micros(e.start))},
                                         {"pid", pid},
                                         {"tid", tid[{track, p.lane}]}};
                nlohmann::ordered_json args;
                args["step"] = p.step;
                args["phase"] = phase_name(e.phase);
                if (e.layer >= 0) {
                    const auto& l = net.layers[static_cast<std::size_t>(e.layer)];
                    args["layer"] = l.name;
                    args["kind"] = frontend::op_name(l.op);
                }
                if (e.bytes > 0) args["bytes"] = e.bytes;
                j["args"] = args;
                emit(j);
            }
    }
    text += "\n]}\n";
    return text;
}

std::string trace_output_problem(const std::string& path) {
    if (std::string bad = unwritable(path); !bad.empty()) return bad;
    std::ifstream in(path, std::ios::binary);
    if (!in) return {};
    std::string head(std::char_traits<char>::length(trace_marker), '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    head.resize(static_cast<std::size_t>(in.gcount()));
    if (head.empty() || head == trace_marker) return {};
    return fmt::format("'{}' exists and is not a trace that dsl wrote; it is left as it is", path);
}

}  // namespace dsl::cli

// The auto-scheduler: candidates per layer, the exact search over the network's frontier, the paper's
// longest-path heuristic, and the memory limit (a Lagrangian weight on memory, searched by bisection).
// schedule_text.cpp writes the result back as `.sched` text.
#include <dsl/scheduler/autoschedule.hpp>
#include <dsl/scheduler/plan.hpp>

#include <dsl/frontend/print.hpp>
#include <dsl/scheduler/recompute.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <tuple>

namespace dsl::scheduler {

using frontend::Layer;
using frontend::Network;
using frontend::OpKind;

namespace {

constexpr double infinity = std::numeric_limits<double>::infinity();

std::vector<std::int64_t> divisors(std::int64_t n) {
    std::vector<std::int64_t> out;
    for (std::int64_t d = 1; d * d <= n; ++d)
        if (n % d == 0) {
            out.push_back(d);
            if (d != n / d) out.push_back(n / d);
        }
    std::sort(out.begin(), out.end());
    return out;
}

// The search's view of a network: the layers it decides (all but inputs and labels), each one's candidates
// (one per split: the overlap that costs less), their costs, and the shuffles between them.
struct Problem {
    const Network& net;
    const CostModel& model;
    std::vector<int> order;                        // decided layers, in network order
    std::vector<std::vector<Distribution>> cands;  // per layer (empty for inputs and labels)
    std::vector<std::vector<double>> time, mem;    // per layer and candidate
    std::vector<int> last_use;                     // per layer: its last decided reader, or itself
    struct Edge {
        int input = 0, producer = 0;    // the reader's input position, and the layer producing it
        std::vector<double> time, mem;  // [producer candidate * |reader candidates| + reader candidate]
    };
    std::vector<std::vector<Edge>> edges;  // per reader

    Problem(const Network& n, const CostModel& m) : net(n), model(m) {}

    const Edge* edge(int reader, int producer) const {
        for (const Edge& e : edges[static_cast<std::size_t>(reader)])
            if (e.producer == producer) return &e;
        return nullptr;
    }
};

// A layer's candidates among `splits` (candidates(), below).
std::vector<Distribution> candidates_among(const Network& net, int layer, const Distribution& partial,
                                           std::int64_t procs, std::int64_t batch, const std::vector<Split>& splits) {
    const Layer& l = net.layers[static_cast<std::size_t>(layer)];
    std::vector<Distribution> out;
    for (const Split& s : partial.split ? std::vector<Split>{*partial.split} : splits) {
        if (s.procs() != procs || !split_problem(net, l, s, batch).empty()) continue;
        // Channel parts where they cut no channels (data, losses) only replicate.
        if (!partial.split && s.channel_parts() && !splits_channels(l, s)) continue;
        std::vector<bool> overlaps;
        if (partial.overlap)
            overlaps.push_back(*partial.overlap);
        else if (overlap_matters(net, l, s))
            overlaps = {false, true};
        else
            overlaps.push_back(false);
        for (bool o : overlaps)
            out.push_back(
                Distribution{s, o, partial.bn.value_or(BatchNormStats::batch), partial.recompute, partial.precision});
    }
    return out;
}

// The search's problem over each layer's candidates among `splits_for(layer)`.
bool build(Problem& p, const Schedule& partial, std::int64_t procs, std::int64_t batch,
           const std::function<std::vector<Split>(std::size_t)>& splits_for, std::string& why) {
    const Network& net = p.net;
    const std::size_t n = net.layers.size();
    p.cands.assign(n, {});
    p.time.assign(n, {});
    p.mem.assign(n, {});
    p.edges.assign(n, {});
    p.last_use.assign(n, -1);
    for (std::size_t i = 0; i < n; ++i) {
        const Layer& l = net.layers[i];
        if (l.is_data()) continue;
        p.order.push_back(static_cast<int>(i));
        p.last_use[i] = static_cast<int>(i);
        const Distribution fixed = i < partial.layers.size() ? partial.layers[i] : Distribution{};
        std::map<std::string, std::size_t> by_split;
        for (const Distribution& d : candidates_among(net, static_cast<int>(i), fixed, procs, batch, splits_for(i))) {
            const LayerCost c = p.model.layer(static_cast<int>(i), d);
            const std::string key = d.split->str();
            auto it = by_split.find(key);
            if (it == by_split.end()) {
                by_split.emplace(key, p.cands[i].size());
                p.cands[i].push_back(d);
                p.time[i].push_back(c.time());
                p.mem[i].push_back(c.memory + c.buffers);
            } else if (c.time() < p.time[i][it->second]) {
                p.cands[i][it->second] = d;
                p.time[i][it->second] = c.time();
                p.mem[i][it->second] = c.memory + c.buffers;
            }
        }
        if (p.cands[i].empty()) {
            why = fmt::format("no split of {} processes fits layer '{}'{}", procs, l.name,
                              fixed.split ? fmt::format(" as the schedule fixes it ({})", fixed.split->str()) : "");
            return false;
        }
    }
    for (int r : p.order) {
        const Layer& l = net.layers[static_cast<std::size_t>(r)];
        for (std::size_t j = 0; j < l.inputs.size(); ++j) {
            const int producer = l.inputs[j];
            if ((net.layers[static_cast<std::size_t>(producer)]).is_data()) continue;
            p.last_use[static_cast<std::size_t>(producer)] =
                std::max(p.last_use[static_cast<std::size_t>(producer)], r);
            Problem::Edge e;
            e.input = static_cast<int>(j);
            e.producer = producer;
            std::vector<Split> from, to;
            for (const Distribution& a : p.cands[static_cast<std::size_t>(producer)]) from.push_back(*a.split);
            for (const Distribution& b : p.cands[static_cast<std::size_t>(r)]) to.push_back(*b.split);
            for (const ShuffleCost& s : p.model.shuffles(r, static_cast<int>(j), from, to)) {
                e.time.push_back(s.seconds);
                e.mem.push_back(s.memory);
            }
            // A layer reading one tensor twice (add x, x) has two edges from one producer: merged.
            bool merged = false;
            for (Problem::Edge& old : p.edges[static_cast<std::size_t>(r)])
                if (old.producer == producer) {
                    for (std::size_t k = 0; k < old.time.size(); ++k) old.time[k] += e.time[k], old.mem[k] += e.mem[k];
                    merged = true;
                }
            if (!merged) p.edges[static_cast<std::size_t>(r)].push_back(std::move(e));
        }
    }
    return true;
}

// The chosen candidate per layer (-1 for inputs and labels).
using Choice = std::vector<int>;

// Dynamic programming over the frontier: the state before layer l is the candidate of every decided layer
// whose output a layer from l on still reads. Exact; nullopt when a frontier exceeds `max_states`.
// Whether every frontier of the network has at most `max_states` states (it depends on the candidates only).
bool frontiers_fit(const Problem& p, std::int64_t max_states) {
    std::vector<int> live;
    for (int l : p.order) {
        std::vector<int> after;
        for (int q : live)
            if (p.last_use[static_cast<std::size_t>(q)] > l) after.push_back(q);
        if (p.last_use[static_cast<std::size_t>(l)] > l) after.push_back(l);
        std::int64_t size = 1;
        for (int q : after)
            if ((size *= static_cast<std::int64_t>(p.cands[static_cast<std::size_t>(q)].size())) > max_states)
                return false;
        live = std::move(after);
    }
    return true;
}

std::optional<Choice> frontier_search(const Problem& p, double lambda, std::int64_t max_states) {
    if (!frontiers_fit(p, max_states)) return std::nullopt;  // before any work
    struct Step {
        int layer;
        std::vector<std::int64_t> from;  // per new state: the previous state
        std::vector<int> cand;           // and this layer's candidate
    };
    std::vector<Step> steps;
    std::vector<int> live;  // layers, ascending
    std::vector<double> cost{0.0};
    for (int l : p.order) {
        const auto li = static_cast<std::size_t>(l);
        const std::size_t nc = p.cands[li].size();
        // The state layout before and after: mixed radix over the live layers' candidate counts.
        std::vector<std::int64_t> stride_before(live.size());
        {
            std::int64_t s = 1;
            for (std::size_t k = live.size(); k-- > 0;) {
                stride_before[k] = s;
                s *= static_cast<std::int64_t>(p.cands[static_cast<std::size_t>(live[k])].size());
            }
        }
        std::vector<int> after;
        for (int q : live)
            if (p.last_use[static_cast<std::size_t>(q)] > l) after.push_back(q);
        if (p.last_use[li] > l) after.push_back(l);
        std::int64_t size_after = 1;
        std::vector<std::int64_t> stride_after(after.size());
        for (std::size_t k = after.size(); k-- > 0;) {
            stride_after[k] = size_after;
            size_after *= static_cast<std::int64_t>(p.cands[static_cast<std::size_t>(after[k])].size());
            if (size_after > max_states) return std::nullopt;
        }
        // For each live layer before: its stride after (0 when it dies here), and the edge into l, if any.
        std::vector<std::int64_t> carry(live.size(), 0);
        std::vector<const Problem::Edge*> into(live.size(), nullptr);
        for (std::size_t k = 0; k < live.size(); ++k) {
            auto it = std::find(after.begin(), after.end(), live[k]);
            if (it != after.end()) carry[k] = stride_after[static_cast<std::size_t>(it - after.begin())];
            into[k] = p.edge(l, live[k]);
        }
        const std::int64_t own_stride = p.last_use[li] > l ? stride_after.back() : 0;

        Step step{l, std::vector<std::int64_t>(static_cast<std::size_t>(size_after), -1),
                  std::vector<int>(static_cast<std::size_t>(size_after), -1)};
        std::vector<double> next(static_cast<std::size_t>(size_after), infinity);
        std::vector<double> add(nc);
        for (std::size_t s = 0; s < cost.size(); ++s) {
            if (cost[s] == infinity) continue;
            std::int64_t base = 0;
            for (std::size_t c = 0; c < nc; ++c) add[c] = p.time[li][c] + lambda * p.mem[li][c];
            for (std::size_t k = 0; k < live.size(); ++k) {
                const std::size_t kc = p.cands[static_cast<std::size_t>(live[k])].size();
                const std::int64_t v =
                    (static_cast<std::int64_t>(s) / stride_before[k]) % static_cast<std::int64_t>(kc);
                base += v * carry[k];
                if (const Problem::Edge* e = into[k]) {
                    const std::size_t row = static_cast<std::size_t>(v) * nc;
                    for (std::size_t c = 0; c < nc; ++c) add[c] += e->time[row + c] + lambda * e->mem[row + c];
                }
            }
            for (std::size_t c = 0; c < nc; ++c) {
                const double v = cost[s] + add[c];
                const auto idx = static_cast<std::size_t>(base + static_cast<std::int64_t>(c) * own_stride);
                // Strictly better only: among equal costs the earlier candidate (the cheaper split) stays.
                if (v < next[idx]) {
                    next[idx] = v;
                    step.from[idx] = static_cast<std::int64_t>(s);
                    step.cand[idx] = static_cast<int>(c);
                }
            }
        }
        cost = std::move(next);
        live = std::move(after);
        steps.push_back(std::move(step));
    }
    Choice choice(p.net.layers.size(), -1);
    std::int64_t state = 0;
    if (!live.empty()) {  // outputs nothing reads: take the cheapest final state
        state = std::min_element(cost.begin(), cost.end()) - cost.begin();
    }
    for (std::size_t k = steps.size(); k-- > 0;) {
        const Step& s = steps[k];
        choice[static_cast<std::size_t>(s.layer)] = s.cand[static_cast<std::size_t>(state)];
        state = s.from[static_cast<std::size_t>(state)];
    }
    return choice;
}

// The paper's heuristic: the longest path (by the cheapest cost of its layers still open) as a chain, its
// layers then fixed; again until every layer has a distribution.
Choice paper_search(const Problem& p, double lambda) {
    const Network& net = p.net;
    Choice choice(net.layers.size(), -1);
    std::vector<double> weight(net.layers.size(), 0.0);
    for (int l : p.order)
        weight[static_cast<std::size_t>(l)] =
            *std::min_element(p.time[static_cast<std::size_t>(l)].begin(), p.time[static_cast<std::size_t>(l)].end()) +
            1e-12;  // every open layer counts, however cheap
    auto cell = [&](const Problem::Edge& e, std::size_t a, std::size_t b, std::size_t nb) {
        return e.time[a * nb + b] + lambda * e.mem[a * nb + b];
    };
    for (;;) {
        // The longest path through open layers, by dynamic programming in layer order.
        std::vector<double> best(net.layers.size(), 0.0);
        std::vector<int> prev(net.layers.size(), -1);
        int end = -1;
        for (int l : p.order) {
            const auto li = static_cast<std::size_t>(l);
            double in = 0.0;
            for (const Problem::Edge& e : p.edges[li])
                if (best[static_cast<std::size_t>(e.producer)] > in)
                    in = best[static_cast<std::size_t>(e.producer)], prev[li] = e.producer;
            best[li] = in + (choice[li] < 0 ? weight[li] : 0.0);
            if (end < 0 || best[li] > best[static_cast<std::size_t>(end)]) end = l;
        }
        if (end < 0 || best[static_cast<std::size_t>(end)] <= 0.0) break;
        std::vector<int> path;
        for (int v = end; v >= 0; v = prev[static_cast<std::size_t>(v)]) path.push_back(v);
        std::reverse(path.begin(), path.end());
        // The chain: open layers of the path in order; a fixed neighbour contributes its shuffles.
        std::vector<int> open;
        for (int v : path)
            if (choice[static_cast<std::size_t>(v)] < 0) open.push_back(v);
        std::vector<std::vector<double>> cost(open.size());
        std::vector<std::vector<int>> back(open.size());
        for (std::size_t k = 0; k < open.size(); ++k) {
            const auto v = static_cast<std::size_t>(open[k]);
            const std::size_t nc = p.cands[v].size();
            std::vector<double> own(nc);
            for (std::size_t c = 0; c < nc; ++c) {
                own[c] = p.time[v][c] + lambda * p.mem[v][c];
                for (const Problem::Edge& e : p.edges[v]) {
                    const int fixed = choice[static_cast<std::size_t>(e.producer)];
                    if (fixed >= 0) own[c] += cell(e, static_cast<std::size_t>(fixed), c, nc);
                }
                for (int r : p.order) {  // readers already fixed
                    const int fixed = choice[static_cast<std::size_t>(r)];
                    if (fixed < 0) continue;
                    if (const Problem::Edge* e = p.edge(r, open[k]))
                        own[c] +=
                            cell(*e, c, static_cast<std::size_t>(fixed), p.cands[static_cast<std::size_t>(r)].size());
                }
            }
            cost[k].assign(nc, infinity);
            back[k].assign(nc, -1);
            const Problem::Edge* link = k > 0 ? p.edge(open[k], open[k - 1]) : nullptr;
            // Without an edge to the previous layer of the path, every candidate follows its cheapest.
            const auto cheapest = k == 0 ? cost[0].end() : std::min_element(cost[k - 1].begin(), cost[k - 1].end());
            for (std::size_t c = 0; c < nc; ++c) {
                if (k == 0 || !link) {
                    cost[k][c] = (k == 0 ? 0.0 : *cheapest) + own[c];
                    if (k > 0) back[k][c] = static_cast<int>(cheapest - cost[k - 1].begin());
                    continue;
                }
                for (std::size_t a = 0; a < cost[k - 1].size(); ++a) {
                    const double via = cost[k - 1][a] + cell(*link, a, c, nc) + own[c];
                    if (via < cost[k][c]) cost[k][c] = via, back[k][c] = static_cast<int>(a);
                }
            }
        }
        int c = static_cast<int>(std::min_element(cost.back().begin(), cost.back().end()) - cost.back().begin());
        for (std::size_t k = open.size(); k-- > 0;) {
            choice[static_cast<std::size_t>(open[k])] = c;
            if (k > 0) c = back[k][static_cast<std::size_t>(c)];
        }
    }
    return choice;
}

Schedule make_schedule(const Problem& p, const Schedule& partial, const Choice& choice, std::int64_t procs,
                       std::int64_t batch) {
    Schedule s = partial;
    s.procs = procs;
    s.batch = batch;
    s.layers.resize(p.net.layers.size());
    s.source_entry.resize(p.net.layers.size(), -1);
    for (int l : p.order)
        s.layers[static_cast<std::size_t>(l)] =
            p.cands[static_cast<std::size_t>(l)][static_cast<std::size_t>(choice[static_cast<std::size_t>(l)])];
    place_data(p.net, s);
    return s;
}

double choice_cost(const Problem& p, const Choice& choice, double lambda) {
    double total = 0.0;
    for (int l : p.order) {
        const auto li = static_cast<std::size_t>(l);
        const auto c = static_cast<std::size_t>(choice[li]);
        total += p.time[li][c] + lambda * p.mem[li][c];
        for (const Problem::Edge& e : p.edges[li]) {
            const auto a = static_cast<std::size_t>(choice[static_cast<std::size_t>(e.producer)]);
            const std::size_t k = a * p.cands[li].size() + c;
            total += e.time[k] + lambda * e.mem[k];
        }
    }
    return total;
}

}  // namespace

std::vector<Split> splits_of(std::int64_t procs, std::int64_t batch, int rank, std::int64_t channel_parts) {
    std::vector<Split> splits;
    // The spatial parts of a sample group of `group` processes over the last `rank` axes, outermost first.
    auto spread = [&](auto& self, Split split, int axis, std::int64_t group) -> void {
        if (axis == max_space - 1) {
            split.space[static_cast<std::size_t>(axis)] = group;
            splits.push_back(split);
            return;
        }
        for (std::int64_t parts : axis < max_space - rank ? std::vector<std::int64_t>{1} : divisors(group)) {
            split.space[static_cast<std::size_t>(axis)] = parts;
            self(self, split, axis + 1, group / parts);
        }
    };
    for (std::int64_t n : divisors(procs))
        if (n <= batch) spread(spread, Split{n, 1, 1, {1, 1, 1}}, 0, procs / n);
    // Sample parallelism first: it needs no halo, so among equal costs it wins; then the outer dimensions
    // before the inner (a row of a tile is contiguous, a column strided).
    std::stable_sort(splits.begin(), splits.end(), [](const Split& a, const Split& b) {
        return std::make_tuple(a.spatial_procs(), a.space[2], a.space[1]) <
               std::make_tuple(b.spatial_procs(), b.space[2], b.space[1]);
    });
    for (std::int64_t k : divisors(procs)) {
        if (k < 2 || k > channel_parts || procs / k > batch) continue;
        Split s{procs / k, 1, k, {1, 1, 1}};
        splits.push_back(s);
        s.f = 1, s.c = k;
        splits.push_back(s);
    }
    return splits;
}

std::vector<Distribution> candidates(const Network& net, int layer, const Distribution& partial, std::int64_t procs,
                                     std::int64_t batch, std::int64_t channel_parts) {
    return candidates_among(
        net, layer, partial, procs, batch,
        partial.split ? std::vector<Split>{} : splits_of(procs, batch, net.spatial_rank(), channel_parts));
}

std::vector<Split> channel_refinements(const Split& s, std::int64_t channel_parts) {
    std::vector<Split> out;
    // A factor k of the samples' parts or of one spatial axis's, with k at most `channel_parts` over the C and
    // F parts `s` has already; each factoring of the C and F parts that gives.
    const std::int64_t had = s.c * s.f;
    for (int axis = -1; axis < max_space; ++axis) {
        const std::int64_t parts = axis < 0 ? s.n : s.space[static_cast<std::size_t>(axis)];
        for (std::int64_t k : divisors(parts)) {
            if (k < 2) continue;
            if (had * k > channel_parts) break;
            Split t = s;
            (axis < 0 ? t.n : t.space[static_cast<std::size_t>(axis)]) = parts / k;
            for (std::int64_t c : divisors(had * k)) {
                t.c = c, t.f = had * k / c;
                out.push_back(t);
            }
        }
    }
    return out;
}

double schedule_cost(const Network& net, const Schedule& schedule, const CostModel& model) {
    double total = 0.0;
    for (std::size_t i = 0; i < net.layers.size(); ++i) {
        const Layer& l = net.layers[i];
        if (l.is_data()) continue;
        total += model.layer(static_cast<int>(i), schedule.layers[i]).time();
        for (std::size_t j = 0; j < l.inputs.size(); ++j) {
            const int p = l.inputs[j];
            if ((net.layers[static_cast<std::size_t>(p)]).is_data()) continue;
            total += model
                         .shuffle(static_cast<int>(i), static_cast<int>(j),
                                  *schedule.layers[static_cast<std::size_t>(p)].split, *schedule.layers[i].split)
                         .seconds;
        }
    }
    return total;
}

namespace {

// The seconds a schedule's recomputation adds (a layer's forward run again in backward, or widened again).
double recompute_seconds(const Network& net, const Schedule& schedule, const CostModel& model) {
    double total = 0.0;
    for (std::size_t i = 0; i < net.layers.size(); ++i)
        if (schedule.layers[i].recompute.value_or(false) || schedule.layers[i].narrowed())
            total += model.layer(static_cast<int>(i), schedule.layers[i]).recompute;
    return total;
}

// `schedule` with recomputation turned on, where `partial` leaves it open, for the layers that free the most
// memory per second of forward run again, one at a time until the model says it fits `limit` (a greedy
// choice: its cost is within the cheapest set's plus that of the last layer added); then, where that is not
// enough, outputs kept in bfloat16 where `partial` leaves the precision open ('?': 16 bits change results),
// on the layers that still keep theirs, by memory freed per second of rounding and widening. `memory` is its
// memory.
Schedule recompute_to_fit(const Network& net, const Schedule& partial, Schedule schedule, const CostModel& model,
                          double limit, double& memory) {
    memory = model.memory(schedule);
    if (limit <= 0 || memory <= limit) return schedule;
    // One answer, greedily: `open` says where the schedule leaves it to choose, `apply` sets it on a layer.
    auto fit_by = [&](auto open, auto apply) {
        struct Option {
            int layer;
            double per_second;
        };
        std::vector<Option> options;
        for (std::size_t i = 0; i < net.layers.size(); ++i) {
            Distribution& d = schedule.layers[i];
            if (!open(i) || !recomputable(net.layers[i]) || d.recompute.value_or(false)) continue;
            Distribution changed = d;
            apply(changed);
            if (changed.precision == d.precision && changed.recompute == d.recompute) continue;
            const LayerCost c = model.layer(static_cast<int>(i), changed);
            options.push_back({static_cast<int>(i), c.output / std::max(c.recompute, 1e-12)});
        }
        std::stable_sort(options.begin(), options.end(),
                         [](const Option& a, const Option& b) { return a.per_second > b.per_second; });
        for (const Option& o : options) {
            apply(schedule.layers[static_cast<std::size_t>(o.layer)]);
            memory = model.memory(schedule);
            if (memory <= limit) return true;
        }
        return false;
    };
    if (fit_by([&](std::size_t i) { return i >= partial.layers.size() || !partial.layers[i].recompute; },
               [](Distribution& d) { d.recompute = true; }))
        return schedule;
    fit_by([&](std::size_t i) { return i < partial.layers.size() && !partial.layers[i].precision; },
           [](Distribution& d) { d.precision = Precision::bfloat16; });
    return schedule;
}

}  // namespace

namespace {

// The search over a built problem: the fastest choice, fitted to the memory limit. Where none fits, the one
// that needs the least memory goes to `smallest_out`.
std::optional<AutoResult> search(const Problem& p, const Schedule& partial, const AutoOptions& options,
                                 std::int64_t procs, std::string& why, Schedule& smallest_out) {
    const Network& net = p.net;
    const CostModel& model = p.model;
    AutoResult result;
    for (int l : p.order) result.candidates += static_cast<std::int64_t>(p.cands[static_cast<std::size_t>(l)].size());

    bool fell_back = false;
    auto solve = [&](double lambda) -> Choice {
        if (options.method == SearchMethod::frontier) {
            if (auto c = frontier_search(p, lambda, options.max_states)) return *c;
            fell_back = true;
        }
        return paper_search(p, lambda);
    };
    Choice best = solve(0.0);
    // Memory is met first by recomputing layers of the fastest schedule; where that is not enough, by other
    // distributions, each with the layers it must recompute.
    const double limit = options.memory_limit;
    auto fitted = [&](const Choice& c, double& m) {
        return recompute_to_fit(net, partial, make_schedule(p, partial, c, procs, options.batch), model, limit, m);
    };
    double memory = 0.0;
    Schedule schedule = fitted(best, memory);
    if (limit > 0 && memory > limit) {
        // The least memory any schedule needs (memory first, time to break ties): if even that does not fit,
        // say how much would.
        const double heavy = 1e3;  // seconds per byte: memory dominates any time
        const Choice least = solve(heavy);
        double least_memory = 0.0;
        const Schedule smallest = fitted(least, least_memory);
        if (least_memory > options.memory_limit) {
            why = fmt::format(
                "no schedule of {} processes fits in {:.1f} MiB per process: the smallest needs {:.1f} MiB "
                "(more processes, a smaller mini-batch, or a platform with more memory)",
                procs, options.memory_limit / (1 << 20), least_memory / (1 << 20));
            smallest_out = smallest;
            return std::nullopt;
        }
        // The fastest that fits: bisect the weight on memory (seconds per byte) between 0 and `heavy`.
        best = least;
        schedule = smallest;
        memory = least_memory;
        double lo = 1e-18, hi = heavy, best_cost = choice_cost(p, best, 0.0) + recompute_seconds(net, schedule, model);
        Choice last;
        bool last_fits = false;
        for (int it = 0; it < 48; ++it) {
            const double mid = std::sqrt(lo * hi);
            const Choice c = solve(mid);
            // Neighbouring weights often give the same choice: its memory is known.
            if (c != last) {
                double m = 0.0;
                const Schedule s = fitted(c, m);
                last_fits = m <= limit;
                if (const double cc = choice_cost(p, c, 0.0) + recompute_seconds(net, s, model);
                    last_fits && cc < best_cost)
                    best = c, best_cost = cc, schedule = s, memory = m;
                last = c;
            }
            (last_fits ? hi : lo) = mid;
        }
    }
    result.method = fell_back ? SearchMethod::paper : options.method;
    result.cost = choice_cost(p, best, 0.0) + recompute_seconds(net, schedule, model);
    result.schedule = std::move(schedule);
    result.memory = memory;
    return result;
}

}  // namespace

std::optional<AutoResult> autoschedule(const Network& net, const Schedule& partial, const CostModel& model,
                                       const AutoOptions& options, std::string& why) {
    const std::int64_t procs = partial.procs.value_or(1);
    Problem p(net, model);
    const std::vector<Split> every = splits_of(procs, options.batch, net.spatial_rank(), options.channel_parts);
    if (!build(
            p, partial, procs, options.batch, [&](std::size_t) { return every; }, why))
        return std::nullopt;
    Schedule smallest;
    std::optional<AutoResult> result = search(p, partial, options, procs, why, smallest);
    if (options.channel_parts < 2) return result;
    // Channel and filter parts with the others: around each layer's split (the first search's choice, or where
    // nothing fitted its smallest), every refinement of it that moves a factor of its samples' or spatial parts
    // into C and F parts (both, where the factor allows), searched again, jointly. (Every such product in the
    // first search would multiply its candidates, and its time by their square.)
    const Schedule first = result ? result->schedule : smallest;
    if (first.layers.empty()) return result;
    Problem refined(net, model);
    const auto around = [&](std::size_t i) {
        std::vector<Split> splits = channel_refinements(*first.layers[i].split, options.channel_parts);
        splits.insert(splits.begin(), *first.layers[i].split);
        return splits;
    };
    std::string why_refined;
    if (!build(refined, partial, procs, options.batch, around, why_refined)) return result;
    std::optional<AutoResult> second = search(refined, partial, options, procs, why_refined, smallest);
    if (!result) {
        // Its smallest needs no more than the first's: the nearer answer.
        why = why_refined;
        return second;
    }
    if (!second) return result;
    const std::int64_t candidates = result->candidates + second->candidates;
    AutoResult& best = second->cost < result->cost ? *second : *result;
    best.candidates = candidates;
    return best;
}

}  // namespace dsl::scheduler

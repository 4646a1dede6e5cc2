// Elaboration: expands blocks and repeats of a parsed `.net` file into a flat, topologically ordered graph.
//
// It works in two phases. Expansion walks the statements, evaluating arguments and instantiating blocks,
// and records every statement as an entry of its scope (the top level, a block instance, or the group of a
// named repeat) together with how its inputs are to be found. Resolution then turns those input specs into
// layer indices: `from` may name a sibling defined later, so it can only run once a scope is complete.
// Errors inside instances point at the statement in the block body, with notes at the instantiations.
#include "evaluate.hpp"
#include "layer_args.hpp"

#include <dsl/frontend/passes.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <queue>
#include <set>
#include <tuple>

namespace dsl::frontend {

namespace {

// Bounds that keep absurd inputs from exhausting memory or the stack.
constexpr std::int64_t max_repeat = 100000;
constexpr std::size_t max_graph = 300000;  // layers plus instances
constexpr std::size_t max_nesting = 100;   // block instances inside one another

// How a statement finds one of its inputs; resolved once every scope is complete.
struct Spec {
    enum class Kind { prev, in, net_input, ref } kind = Kind::prev;
    int scope = 0;             // where the statement is
    int entry = -1;            // prev: the entry of `scope` whose output is read
    const Ref* ref = nullptr;  // ref: a `from` name
    Location loc;
};

// A statement of a scope: a layer (node), an instance or repeat group (child), or neither when it failed.
struct Entry {
    std::string name;
    Location loc;
    int node = -1;
    int child = -1;
};

struct Scope {
    int parent = -1;
    std::string path;   // "layer1.0"; empty at the top level
    std::string block;  // the block type of an instance; empty at the top level and for repeat groups
    Location loc;       // the instantiating statement
    std::vector<Entry> entries;
    std::map<std::string, int> by_name;
    std::vector<Spec> in;  // what `in` reads, resolved in the parent scope
};

struct Node {
    Layer layer;
    std::vector<Spec> specs;
    int scope = 0;
};

bool is_loss(OpKind op) { return kind_of(op).loss; }

std::string join_path(const std::string& prefix, const std::string& name) {
    return prefix.empty() ? name : prefix + "." + name;
}

std::string ref_text(const Ref& r) {
    std::string s;
    for (const std::string& p : r.path) s += (s.empty() ? "" : ".") + p;
    return s;
}

class Elaborator {
public:
    explicit Elaborator(Diagnostics& diags)
        : diags_(diags),
          evaluator_(diags, [this](Location loc, std::string message, int scope, const std::string& suggestion) {
              report(loc, std::move(message), scope, suggestion);
          }) {}

    std::optional<Network> run(const NetFile& main, const std::vector<NetFile>& imports) {
        const std::size_t first = diags_.all().size(), errors_before = diags_.error_count();
        std::optional<Network> net = elaborate(main, imports);
        // References and cycles are found after expansion, but should read in the order of the text.
        diags_.sort_from(first);
        if (diags_.error_count() > errors_before) return std::nullopt;
        net->train = train_;
        return net;
    }

private:
    Diagnostics& diags_;
    Evaluator evaluator_;
    std::map<std::string, const BlockDef*> blocks_;
    std::vector<std::string> block_names_;
    std::vector<Scope> scopes_;
    std::vector<Node> nodes_;
    std::map<std::string, int> tensors_;  // input and label nodes by name
    std::vector<int> net_inputs_;         // nodes of kind input
    std::vector<std::string> stack_;      // blocks being expanded, outermost first
    std::set<std::tuple<const SourceFile*, unsigned, unsigned, std::string>> reported_;
    bool too_big_ = false;
    TrainOptions train_;

    std::optional<Network> elaborate(const NetFile& main, const std::vector<NetFile>& imports) {
        for (const NetFile& f : imports) register_blocks(f);
        register_blocks(main);

        scopes_.push_back(Scope{});
        declare_tensors(main);
        if (main.train) train(*main.train);

        if (main.body.empty()) {
            Location start;
            start.file = main.source;
            start.line = 1;
            start.col = 1;
            report(start, "the network has no layers", -1);
        }
        Env top;
        for (const Stmt& st : main.body) statement(st, 0, top);

        resolve_all();
        return order();
    }

    // Reports an error once (a block instantiated many times would otherwise repeat it), with a "did you
    // mean" note when `suggestion` is set, `note` when set, and notes at the instantiations that enclose `scope`.
    void report(Location loc, std::string message, int scope, const std::string& suggestion = "",
                const std::string& note = "") {
        if (!reported_.emplace(loc.file, loc.line, loc.col, message).second) return;
        Diagnostic& d = diags_.error(loc, std::move(message));
        if (!suggestion.empty()) Diagnostics::note(d, loc, "did you mean '" + suggestion + "'?");
        if (!note.empty()) Diagnostics::note(d, loc, note);
        for (int s = scope; s > 0; s = scopes_[static_cast<std::size_t>(s)].parent) {
            const Scope& sc = scopes_[static_cast<std::size_t>(s)];
            if (!sc.block.empty())
                Diagnostics::note(d, sc.loc, "in instance '" + sc.path + "' of block '" + sc.block + "'");
        }
    }

    // ---- declarations -------------------------------------------------------------------------------

    void register_blocks(const NetFile& f) {
        for (const BlockDef& b : f.blocks) {
            if (op_from_name(b.name) || b.name == "repeat") {
                report(b.loc, "block '" + b.name + "' has the name of a layer kind", -1);
                continue;
            }
            if (auto it = blocks_.find(b.name); it != blocks_.end()) {
                Diagnostic& d = diags_.error(b.loc, "duplicate block '" + b.name + "'");
                Diagnostics::note(d, it->second->loc, "'" + b.name + "' is first defined here");
                continue;
            }
            std::set<std::string> seen;
            for (const Param& p : b.params)
                if (!seen.insert(p.name).second) report(p.loc, "duplicate parameter '" + p.name + "'", -1);
            if (b.body.empty()) report(b.loc, "block '" + b.name + "' has no statements", -1);
            blocks_[b.name] = &b;
            block_names_.push_back(b.name);
        }
    }

    void declare_tensors(const NetFile& main) {
        for (const TensorDecl& t : main.tensors) {
            const bool input = t.kind == TensorDecl::Kind::input;
            const std::string what = std::string(input ? "input" : "label") + " '" + t.name + "'";
            if (auto it = tensors_.find(t.name); it != tensors_.end()) {
                Diagnostic& d = diags_.error(t.loc, "duplicate name '" + t.name + "'");
                Diagnostics::note(d, nodes_[static_cast<std::size_t>(it->second)].layer.loc, "first declared here");
                continue;
            }
            Node n;
            n.layer.name = t.name;
            n.layer.op = input ? OpKind::input : OpKind::label;
            n.layer.loc = t.loc;
            const std::size_t rank = t.shape.size();
            bool ok = true;
            if (rank == 0 || !t.shape[0].batch) {
                report(rank ? t.shape[0].loc : t.loc, "the first dimension of " + what + " must be N", -1);
                ok = false;
            }
            for (std::size_t i = 1; i < rank; ++i) {
                if (t.shape[i].batch) {
                    report(t.shape[i].loc, "only the first dimension of " + what + " can be N", -1);
                    ok = false;
                } else if (t.shape[i].size < 1) {
                    report(t.shape[i].loc, "dimensions must be positive, got " + std::to_string(t.shape[i].size), -1);
                    ok = false;
                }
            }
            n.layer.float_label = t.is_float;
            // Images [N, C, H, W] and volumes [N, C, D, H, W]; labels of either, or per sample.
            if (input && rank != 4 && rank != 5) {
                report(t.loc,
                       what + " must be [N, C, H, W] or [N, C, D, H, W], got " + std::to_string(rank) + " dimensions",
                       -1);
            } else if (!input && t.is_float && rank != 2 && rank != 4 && rank != 5) {
                report(t.loc,
                       "float " + what + " must be [N, K], [N, C, H, W] or [N, C, D, H, W], got " +
                           std::to_string(rank) + " dimensions",
                       -1);
            } else if (!input && !t.is_float && rank != 1 && rank != 3 && rank != 4) {
                report(t.loc,
                       what + " must be [N], [N, H, W] or [N, D, H, W], got " + std::to_string(rank) + " dimensions",
                       -1);
            } else if (ok) {
                for (std::size_t i = 1; i < rank; ++i) n.layer.shape.dims.push_back(t.shape[i].size);
            }
            const int index = static_cast<int>(nodes_.size());
            tensors_[t.name] = index;
            if (input) net_inputs_.push_back(index);
            nodes_.push_back(std::move(n));
        }
    }

    // The train line: the optimizer, its parameters (positional in the order of `names`), and the learning
    // rate's warmup and schedule.
    void train(const TrainDecl& t) {
        static const std::vector<std::string> optimizers = {"sgd", "adam", "adamw"};
        const std::string& opt = t.call.callee;
        if (std::find(optimizers.begin(), optimizers.end(), opt) == optimizers.end()) {
            report(t.call.loc, "unknown optimizer '" + opt + "'", -1, dsl::closest_match(opt, optimizers));
            return;
        }
        train_.optimizer = opt == "sgd" ? Optimizer::sgd : opt == "adam" ? Optimizer::adam : Optimizer::adamw;
        const std::vector<std::string> names =
            opt == "sgd"
                ? std::vector<std::string>{"lr", "momentum", "weight_decay", "warmup", "schedule"}
                : std::vector<std::string>{"lr", "beta1", "beta2", "eps", "weight_decay", "warmup", "schedule"};
        std::set<std::string> seen;
        std::size_t positional = 0;
        Env none;
        for (const Arg& a : t.call.args) {
            std::string name = a.name;
            if (name.empty()) {
                if (positional >= names.size()) {
                    report(a.loc,
                           "too many positional arguments: '" + opt + "' takes " + std::to_string(names.size()) +
                               ", got " + std::to_string(positional + 1),
                           -1);
                    continue;
                }
                name = names[positional++];
            } else if (std::find(names.begin(), names.end(), name) == names.end()) {
                report(a.loc, "'" + opt + "' has no parameter '" + name + "'", -1, dsl::closest_match(name, names));
                continue;
            }
            if (!seen.insert(name).second) {
                report(a.loc, "duplicate argument '" + name + "'", -1);
                continue;
            }
            if (name == "schedule") {
                schedule(a.value);
                continue;
            }
            auto v = evaluator_.eval(a.value, none, -1);
            if (!v) continue;
            const double x = v->number();
            if (name == "warmup") {
                if (v->kind != Value::Kind::integer || v->integer < 0)
                    report(a.value.loc, "'warmup' must be a non-negative integer (a number of steps)", -1);
                else
                    train_.schedule.warmup = v->integer;
                continue;
            }
            if (const char* rule = optimizer_value_rule(name, v->is_number() ? x : std::nan(""))) {
                report(a.value.loc, "'" + name + "' must be " + rule, -1);
                continue;
            }
            (name == "lr"         ? train_.lr
             : name == "momentum" ? train_.momentum
             : name == "beta1"    ? train_.beta1
             : name == "beta2"    ? train_.beta2
             : name == "eps"      ? train_.eps
                                  : train_.weight_decay) = x;
        }
    }

    // schedule = cosine(steps = T) | step(every = K, gamma = G)
    void schedule(const Expr& e) {
        static const std::vector<std::string> kinds = {"cosine", "step"};
        if (e.kind != Expr::Kind::call) {
            const bool named =
                e.kind == Expr::Kind::name && std::find(kinds.begin(), kinds.end(), e.name) != kinds.end();
            report(e.loc,
                   named ? "'" + e.name + "' needs its arguments: " +
                               (e.name == "cosine" ? "cosine(steps = T)" : "step(every = K, gamma = 0.1)")
                         : std::string("'schedule' must be cosine(steps = T) or step(every = K, gamma = G)"),
                   -1);
            return;
        }
        if (std::find(kinds.begin(), kinds.end(), e.name) == kinds.end()) {
            Location at = e.loc;
            at.length = static_cast<unsigned>(e.name.size());
            report(at, "unknown schedule '" + e.name + "'", -1, dsl::closest_match(e.name, kinds));
            return;
        }
        const bool cosine = e.name == "cosine";
        const std::vector<std::string> names =
            cosine ? std::vector<std::string>{"steps"} : std::vector<std::string>{"every", "gamma"};
        LrSchedule s = train_.schedule;
        s.kind = cosine ? LrSchedule::Kind::cosine : LrSchedule::Kind::step;
        std::set<std::string> seen;
        std::size_t positional = 0;
        bool ok = true;
        Env none;
        for (std::size_t i = 0; i < e.operands.size(); ++i) {
            const Expr& value = e.operands[i];
            std::string name = i < e.arg_names.size() ? e.arg_names[i] : "";
            if (name.empty()) {
                if (positional >= names.size()) {
                    report(value.loc,
                           "too many positional arguments: '" + e.name + "' takes " + std::to_string(names.size()) +
                               ", got " + std::to_string(positional + 1),
                           -1);
                    ok = false;
                    continue;
                }
                name = names[positional++];
            } else if (std::find(names.begin(), names.end(), name) == names.end()) {
                report(value.loc, "'" + e.name + "' has no parameter '" + name + "'", -1,
                       dsl::closest_match(name, names));
                ok = false;
                continue;
            }
            if (!seen.insert(name).second) {
                report(value.loc, "duplicate argument '" + name + "'", -1);
                ok = false;
                continue;
            }
            auto v = evaluator_.eval(value, none, -1);
            if (!v) {
                ok = false;
                continue;
            }
            if (name == "gamma") {
                if (!v->is_number() || v->number() <= 0) {
                    report(value.loc, "'gamma' must be a positive number", -1);
                    ok = false;
                } else {
                    s.gamma = v->number();
                }
                continue;
            }
            if (v->kind != Value::Kind::integer || v->integer <= 0) {
                report(value.loc, "'" + name + "' must be a positive integer (a number of steps)", -1);
                ok = false;
                continue;
            }
            (name == "steps" ? s.steps : s.every) = v->integer;
        }
        const std::string needed = cosine ? "steps" : "every";
        if (ok && !seen.count(needed)) {
            Location at = e.loc;
            at.length = static_cast<unsigned>(e.name.size());
            report(at, "'" + e.name + "' needs '" + needed + "'", -1);
            ok = false;
        }
        if (ok) train_.schedule = s;
    }

    // ---- expansion ----------------------------------------------------------------------------------

    bool graph_full(Location loc, int scope) {
        if (nodes_.size() + scopes_.size() <= max_graph) return false;
        if (!too_big_)
            report(loc, "the network has more than " + std::to_string(max_graph) + " layers and instances", scope);
        too_big_ = true;
        return true;
    }

    // The input of a statement that has no `from`: the previous statement, `in`, or the network's input.
    Spec default_input(int scope, Location loc) const {
        Spec s;
        s.scope = scope;
        s.loc = loc;
        const Scope& sc = scopes_[static_cast<std::size_t>(scope)];
        if (!sc.entries.empty()) {
            s.kind = Spec::Kind::prev;
            s.entry = static_cast<int>(sc.entries.size()) - 1;
        } else {
            s.kind = scope == 0 ? Spec::Kind::net_input : Spec::Kind::in;
        }
        return s;
    }

    std::vector<Spec> inputs_of(const Stmt& st, int scope) const {
        if (st.from.empty()) return {default_input(scope, st.loc)};
        std::vector<Spec> specs;
        for (const Ref& r : st.from) {
            Spec s;
            s.kind = Spec::Kind::ref;
            s.scope = scope;
            s.ref = &r;
            s.loc = r.loc;
            specs.push_back(s);
        }
        return specs;
    }

    // Adds a named entry to `scope`; -1 (reported) when the name is taken.
    int add_entry(int scope, const std::string& name, Location loc) {
        Scope& sc = scopes_[static_cast<std::size_t>(scope)];
        if (name == "in") {
            report(loc, "'in' is the input of a block and cannot name a statement", scope);
            return -1;
        }
        int earlier = -1;
        Location earlier_loc;
        if (auto it = sc.by_name.find(name); it != sc.by_name.end()) {
            earlier = it->second;
            earlier_loc = sc.entries[static_cast<std::size_t>(earlier)].loc;
        } else if (auto t = tensors_.find(name); scope == 0 && t != tensors_.end()) {
            earlier = t->second;
            earlier_loc = nodes_[static_cast<std::size_t>(earlier)].layer.loc;
        }
        if (earlier >= 0) {
            if (reported_.emplace(loc.file, loc.line, loc.col, "duplicate name").second) {
                Diagnostic& d = diags_.error(loc, "duplicate name '" + name + "'");
                Diagnostics::note(d, earlier_loc, "'" + name + "' is first defined here");
            }
            return -1;
        }
        sc.by_name[name] = static_cast<int>(sc.entries.size());
        sc.entries.push_back(Entry{name, loc, -1, -1});
        return static_cast<int>(sc.entries.size()) - 1;
    }

    Entry& entry(int scope, int index) {
        return scopes_[static_cast<std::size_t>(scope)].entries[static_cast<std::size_t>(index)];
    }

    int new_scope(int parent, const std::string& name, const std::string& block, Location loc, std::vector<Spec> in) {
        Scope sc;
        sc.parent = parent;
        sc.path = join_path(scopes_[static_cast<std::size_t>(parent)].path, name);
        sc.block = block;
        sc.loc = loc;
        sc.in = std::move(in);
        scopes_.push_back(std::move(sc));
        return static_cast<int>(scopes_.size()) - 1;
    }

    std::optional<std::int64_t> integer_in(const Expr& e, const Env& env, int scope, std::int64_t lo, std::int64_t hi,
                                           const std::string& what) {
        auto v = evaluator_.eval(e, env, scope);
        if (!v) return std::nullopt;
        if (v->kind != Value::Kind::integer || v->integer < lo || v->integer > hi) {
            std::string got = v->kind == Value::Kind::integer ? ", got " + std::to_string(v->integer) : "";
            report(e.loc,
                   what + " must be an integer between " + std::to_string(lo) + " and " + std::to_string(hi) + got,
                   scope);
            return std::nullopt;
        }
        return v->integer;
    }

    void statement(const Stmt& st, int scope, const Env& env) {
        if (graph_full(st.loc, scope)) return;
        std::vector<Spec> specs = inputs_of(st, scope);
        if (!st.is_repeat) {
            call(st.call, st.name, st.loc, scope, std::move(specs), env);
            return;
        }
        std::optional<std::int64_t> count, start = 0;
        if (st.count) count = integer_in(*st.count, env, scope, 1, max_repeat, "the repeat count");
        if (st.start) start = integer_in(*st.start, env, scope, 0, 1000000000, "'start'");
        if (!st.name.empty()) {
            // A named repeat is a group scope whose statements are the instances 0, 1, ...
            const int e = add_entry(scope, st.name, st.loc);
            if (e < 0 || !count || !start) return;
            const int group = new_scope(scope, st.name, "", st.loc, std::move(specs));
            entry(scope, e).child = group;
            for (std::int64_t i = 0; i < *count && !too_big_; ++i)
                call(st.call, std::to_string(*start + i), st.loc, group, {default_input(group, st.loc)}, env);
            return;
        }
        if (!count || !start) return;
        for (std::int64_t i = 0; i < *count && !too_big_; ++i) {
            call(st.call, std::to_string(*start + i), st.loc, scope,
                 i == 0 ? specs : std::vector{default_input(scope, st.loc)}, env);
        }
    }

    // One layer or block instance named `name` in `scope`.
    void call(const Call& c, const std::string& name, Location loc, int scope, std::vector<Spec> specs,
              const Env& env) {
        if (graph_full(loc, scope)) return;
        const int e = add_entry(scope, name, loc);
        if (e < 0) return;
        if (auto op = op_from_name(c.callee)) {
            Node n;
            n.layer.name = join_path(scopes_[static_cast<std::size_t>(scope)].path, name);
            n.layer.op = *op;
            n.layer.loc = loc;
            for (int s = scope; s > 0; s = scopes_[static_cast<std::size_t>(s)].parent) {
                const Scope& sc = scopes_[static_cast<std::size_t>(s)];
                if (sc.block.empty()) continue;
                n.layer.blocks.insert(n.layer.blocks.begin(), sc.block);
                n.layer.instances.insert(n.layer.instances.begin(), sc.path);
            }
            bind_layer_args(c, n.layer, scope, env, evaluator_,
                            [this](Location at, std::string message, int in, const std::string& suggestion) {
                                report(at, std::move(message), in, suggestion);
                            });
            n.specs = std::move(specs);
            n.scope = scope;
            entry(scope, e).node = static_cast<int>(nodes_.size());
            nodes_.push_back(std::move(n));
            return;
        }
        auto it = blocks_.find(c.callee);
        if (it == blocks_.end()) {
            std::vector<std::string> candidates;
            if (!diags_.full()) candidates = block_names_;
            const std::vector<std::string> kinds = layer_kind_names();
            candidates.insert(candidates.end(), kinds.begin(), kinds.end());
            const std::string suggestion = dsl::closest_match(c.callee, candidates);
            // Without a near name, the list of what there is.
            std::string list;
            for (const std::string& k : kinds) list += (list.empty() ? "" : ", ") + k;
            report(c.loc, "unknown layer kind or block '" + c.callee + "'", scope, suggestion,
                   suggestion.empty() ? "the layer kinds are " + list : "");
            return;
        }
        const BlockDef& block = *it->second;
        if (auto self = std::find(stack_.begin(), stack_.end(), block.name); self != stack_.end()) {
            std::string chain;
            for (auto s = self; s != stack_.end(); ++s) chain += "'" + *s + "' -> ";
            report(c.loc, "block '" + block.name + "' instantiates itself: " + chain + "'" + block.name + "'", scope);
            return;
        }
        if (stack_.size() >= max_nesting) {
            report(c.loc, "blocks are nested more than " + std::to_string(max_nesting) + " deep", scope);
            return;
        }
        if (specs.size() != 1) {
            report(specs.size() > 1 ? specs[1].loc : loc,
                   "an instance of block '" + block.name + "' takes 1 input, got " + std::to_string(specs.size()),
                   scope);
            return;
        }
        auto bound = bind(c, block, scope, env);
        if (!bound) return;
        const int child = new_scope(scope, name, block.name, loc, std::move(specs));
        entry(scope, e).child = child;
        stack_.push_back(block.name);
        for (const Stmt& st : block.body) statement(st, child, *bound);
        stack_.pop_back();
    }

    // Binds a block's parameters: positional arguments, then named ones, then defaults (which may use the
    // parameters before them).
    std::optional<Env> bind(const Call& c, const BlockDef& block, int scope, const Env& env) {
        Env bound;
        bool ok = true;
        std::size_t positional = 0;
        std::vector<std::string> names;
        for (const Param& p : block.params) names.push_back(p.name);
        for (const Arg& a : c.args) {
            std::string name = a.name;
            if (name.empty()) {
                if (positional >= names.size()) {
                    report(a.loc,
                           "too many positional arguments: block '" + block.name + "' takes " +
                               std::to_string(names.size()) + ", got " + std::to_string(positional + 1),
                           scope);
                    ok = false;
                    continue;
                }
                name = names[positional++];
            } else if (std::find(names.begin(), names.end(), name) == names.end()) {
                report(a.loc, "block '" + block.name + "' has no parameter '" + name + "'", scope,
                       dsl::closest_match(name, names));
                ok = false;
                continue;
            }
            if (bound.count(name)) {
                report(a.loc, "duplicate argument '" + name + "'", scope);
                ok = false;
                continue;
            }
            auto v = evaluator_.eval(a.value, env, scope);
            if (!v) {
                ok = false;
                continue;
            }
            bound[name] = std::move(*v);
        }
        if (!ok) return std::nullopt;
        for (const Param& p : block.params) {
            if (bound.count(p.name)) continue;
            if (!p.default_value) {
                report(c.loc, "missing argument '" + p.name + "' of block '" + block.name + "'", scope);
                ok = false;
                continue;
            }
            Env before = bound;
            auto v = evaluator_.eval(*p.default_value, before, -1);
            if (!v) {
                ok = false;
                continue;
            }
            bound[p.name] = std::move(*v);
        }
        if (!ok) return std::nullopt;
        return bound;
    }

    // ---- resolution ---------------------------------------------------------------------------------

    // The layer whose output an entry stands for: an instance's is that of its last statement. The depth
    // of this recursion is the nesting of instances, which expansion bounds.
    int output_of(const Entry& e) {
        if (e.node >= 0) return e.node;
        if (e.child < 0) return -1;  // failed, and reported
        const Scope& sc = scopes_[static_cast<std::size_t>(e.child)];
        return sc.entries.empty() ? -1 : output_of(sc.entries.back());
    }

    // `in` of an instance: what its statement reads in the parent scope; always moves up the scope tree.
    int resolve_in(int scope) {
        const Scope& sc = scopes_[static_cast<std::size_t>(scope)];
        return sc.in.size() == 1 ? resolve(sc.in[0]) : -1;
    }

    int resolve(const Spec& s) {
        switch (s.kind) {
            case Spec::Kind::prev: return output_of(entry(s.scope, s.entry));
            case Spec::Kind::in: return resolve_in(s.scope);
            case Spec::Kind::net_input:
                if (net_inputs_.size() == 1) return net_inputs_[0];
                report(s.loc,
                       net_inputs_.empty()
                           ? "the first layer has no input to read: declare an input or name one with 'from'"
                           : "the first layer cannot choose among " + std::to_string(net_inputs_.size()) +
                                 " declared inputs: name one with 'from'",
                       -1);
                return -1;
            case Spec::Kind::ref: return resolve_ref(*s.ref, s.scope);
        }
        return -1;
    }

    int resolve_ref(const Ref& r, int scope) {
        if (r.path.empty()) return -1;
        const Scope& sc = scopes_[static_cast<std::size_t>(scope)];
        const std::string& head = r.path[0];
        const std::string text = ref_text(r);
        const Entry* e = nullptr;
        if (auto it = sc.by_name.find(head); it != sc.by_name.end()) {
            e = &sc.entries[static_cast<std::size_t>(it->second)];
        } else if ((head == "in" && scope > 0) || tensors_.count(head)) {
            if (r.path.size() > 1) {
                report(r.loc, "'" + head + "' is not an instance and has no member '" + r.path[1] + "'", scope);
                return -1;
            }
            return head == "in" ? resolve_in(scope) : tensors_[head];
        } else {
            std::vector<std::string> names;
            if (!diags_.full()) {
                for (const auto& [n, _] : sc.by_name) names.push_back(n);
                for (const auto& [n, _] : tensors_) names.push_back(n);
            }
            if (scope > 0) names.emplace_back("in");
            report(r.loc, "unknown layer '" + text + "'", scope, dsl::closest_match(text, names));
            return -1;
        }
        std::string prefix = head;
        for (std::size_t i = 1; i < r.path.size(); ++i) {
            if (e->node < 0 && e->child < 0) return -1;  // failed, and reported
            if (e->child < 0) {
                report(r.loc, "'" + prefix + "' is a layer, not an instance, and has no member '" + r.path[i] + "'",
                       scope);
                return -1;
            }
            const Scope& child = scopes_[static_cast<std::size_t>(e->child)];
            auto it = child.by_name.find(r.path[i]);
            if (it == child.by_name.end()) {
                std::vector<std::string> names;
                if (!diags_.full())
                    for (const auto& [n, _] : child.by_name) names.push_back(prefix + "." + n);
                report(r.loc, "unknown layer '" + text + "'", scope, dsl::closest_match(text, names));
                return -1;
            }
            e = &child.entries[static_cast<std::size_t>(it->second)];
            prefix += "." + r.path[i];
        }
        return output_of(*e);
    }

    void resolve_all() {
        // Instances' inputs are resolved even when the block never reads `in`, so that a bad `from` is reported.
        for (std::size_t s = 1; s < scopes_.size(); ++s)
            for (const Spec& spec : scopes_[s].in) resolve(spec);
        for (Node& n : nodes_) {
            if (n.layer.is_data()) continue;
            bool ok = true;
            for (const Spec& spec : n.specs) {
                const int i = resolve(spec);
                ok = ok && i >= 0;
                n.layer.inputs.push_back(i);
            }
            if (ok) check_inputs(n);
        }
    }

    void check_inputs(const Node& n) {
        const Layer& l = n.layer;
        const std::string kind = std::string("'") + op_name(l.op) + "'";
        const std::size_t count = l.inputs.size();
        const std::string got = ", got " + std::to_string(count);
        const LayerKind& k = l.kind();
        const auto least = static_cast<std::size_t>(k.min_inputs), most = static_cast<std::size_t>(k.max_inputs);
        if (k.max_inputs < 0) {
            if (count < least)
                return report(l.loc, kind + " needs at least " + std::to_string(least) + " inputs" + got, n.scope);
        } else if (count < least || count > most) {
            if (k.loss) return report(l.loc, kind + " takes 2 inputs (logits and labels)" + got, n.scope);
            return report(count > most ? n.specs[most].loc : l.loc,
                          kind + " takes " + std::to_string(most) + (most == 1 ? " input" : " inputs") + got, n.scope);
        }
        for (std::size_t i = 0; i < count; ++i) {
            const Layer& in = nodes_[static_cast<std::size_t>(l.inputs[i])].layer;
            const Location at = n.specs[i].loc;
            if (is_loss(in.op)) {
                report(at, "loss '" + in.name + "' cannot be the input of another layer", n.scope);
            } else if (is_loss(l.op) && i == 1 && in.op != OpKind::label) {
                report(at, "the second input of " + kind + " must be a label, got '" + in.name + "'", n.scope);
            } else if (in.op == OpKind::label && !(is_loss(l.op) && i == 1)) {
                report(at, "label '" + in.name + "' can only be the second input of a loss layer", n.scope);
            }
        }
    }

    // Topological order, stable: among the layers that are ready, the earliest in the source comes first,
    // so declarations lead and a file written in order keeps its order.
    std::optional<Network> order() {
        const std::size_t count = nodes_.size();
        std::vector<int> pending(count, 0);
        std::vector<std::vector<int>> users(count);
        for (std::size_t i = 0; i < count; ++i)
            for (int in : nodes_[i].layer.inputs) {
                if (in < 0) continue;
                ++pending[i];
                users[static_cast<std::size_t>(in)].push_back(static_cast<int>(i));
            }
        std::priority_queue<int, std::vector<int>, std::greater<>> ready;
        for (std::size_t i = 0; i < count; ++i)
            if (pending[i] == 0) ready.push(static_cast<int>(i));
        std::vector<int> sorted;
        while (!ready.empty()) {
            const int i = ready.top();
            ready.pop();
            sorted.push_back(i);
            for (int u : users[static_cast<std::size_t>(i)])
                if (--pending[static_cast<std::size_t>(u)] == 0) ready.push(u);
        }
        if (sorted.size() != count) report_cycle(pending);

        Network net;
        std::vector<int> position(count, -1);
        for (std::size_t k = 0; k < sorted.size(); ++k)
            position[static_cast<std::size_t>(sorted[k])] = static_cast<int>(k);
        for (int i : sorted) {
            Layer l = nodes_[static_cast<std::size_t>(i)].layer;
            for (int& in : l.inputs) in = in < 0 ? -1 : position[static_cast<std::size_t>(in)];
            net.layers.push_back(std::move(l));
        }
        return net;
    }

    // Every layer left with pending inputs lies on or behind a cycle: walking inputs among them from the
    // first must return to a layer already seen, which closes a cycle.
    void report_cycle(const std::vector<int>& pending) {
        int start = -1;
        for (std::size_t i = 0; i < pending.size() && start < 0; ++i)
            if (pending[i] > 0) start = static_cast<int>(i);
        std::vector<int> path;
        std::vector<int> seen_at(pending.size(), -1);
        int i = start;
        while (seen_at[static_cast<std::size_t>(i)] < 0) {
            seen_at[static_cast<std::size_t>(i)] = static_cast<int>(path.size());
            path.push_back(i);
            int next = -1;
            for (int in : nodes_[static_cast<std::size_t>(i)].layer.inputs)
                if (in >= 0 && pending[static_cast<std::size_t>(in)] > 0) {
                    next = in;
                    break;
                }
            if (next < 0) return;  // cannot happen: a pending layer has a pending input
            i = next;
        }
        // path[seen_at[i]..] runs against the data flow; reverse it and start at the earliest layer.
        std::vector<int> cycle(path.begin() + seen_at[static_cast<std::size_t>(i)], path.end());
        std::reverse(cycle.begin(), cycle.end());
        std::rotate(cycle.begin(), std::min_element(cycle.begin(), cycle.end()), cycle.end());
        std::string text;
        for (int c : cycle) text += "'" + nodes_[static_cast<std::size_t>(c)].layer.name + "' -> ";
        text += "'" + nodes_[static_cast<std::size_t>(cycle[0])].layer.name + "'";
        const Node& first = nodes_[static_cast<std::size_t>(cycle[0])];
        report(first.layer.loc, "layers form a cycle: " + text, first.scope);
    }
};

}  // namespace

std::optional<Network> elaborate(const NetFile& main, const std::vector<NetFile>& imports, Diagnostics& diags) {
    return Elaborator(diags).run(main, imports);
}

}  // namespace dsl::frontend

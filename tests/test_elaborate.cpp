// Elaboration: names, inputs, blocks, repeats, `from` references, imports, and every semantic error.
#include <catch2/catch.hpp>

#include <dsl/frontend/parse.hpp>
#include <dsl/frontend/passes.hpp>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <set>

using namespace dsl;
using namespace dsl::frontend;

namespace {

// Parses and elaborates `text` as the file "t.net".
struct Elab {
    SourceManager sources;
    Diagnostics diags;
    std::optional<Network> net;

    explicit Elab(const std::string& text) {
        auto file = parse_net(*sources.add("t.net", text), diags);
        REQUIRE(file);
        auto imports = resolve_imports(*file, sources, diags);
        if (!diags.has_errors()) net = elaborate(*file, imports, diags);
    }

    std::string errors() const { return diags.text(); }

    // The messages of the errors, and of their notes indented by two spaces.
    std::vector<std::string> messages() const {
        std::vector<std::string> out;
        for (const Diagnostic& d : diags.all()) {
            out.push_back(d.message);
            for (const Diagnostic& n : d.notes) out.push_back("  " + n.message);
        }
        return out;
    }

    std::vector<std::string> names() const {
        std::vector<std::string> out;
        for (const Layer& l : net->layers) out.push_back(l.name);
        return out;
    }

    const Layer& layer(const std::string& name) const {
        const int i = net->find(name);
        INFO(name);
        REQUIRE(i >= 0);
        return net->layers[static_cast<std::size_t>(i)];
    }

    std::vector<std::string> inputs(const std::string& name) const {
        std::vector<std::string> out;
        for (int i : layer(name).inputs) out.push_back(net->layers[static_cast<std::size_t>(i)].name);
        return out;
    }
};

// Expects exactly one error with `message` at `line`:`col`.
void one_error(const std::string& text, const std::string& message, unsigned line, unsigned col) {
    Elab e(text);
    INFO(e.errors());
    CHECK_FALSE(e.net);
    REQUIRE(e.diags.all().size() == 1);
    CHECK(e.diags.all()[0].message == message);
    CHECK(e.diags.all()[0].loc.line == line);
    CHECK(e.diags.all()[0].loc.col == col);
}

const std::string head = "input x [N, 3, 32, 32]\nlabel y [N]\n";

}  // namespace

TEST_CASE("layers are named and chained in source order", "[elaborate]") {
    Elab e(head +
           "a = conv(8, kernel = 3, pad = 1)\nb = relu\nc = global_avgpool\nd = fc(10)\n"
           "loss = softmax_cross_entropy from d, y\n");
    INFO(e.errors());
    REQUIRE(e.net);
    CHECK(e.names() == std::vector<std::string>{"x", "y", "a", "b", "c", "d", "loss"});
    CHECK(e.inputs("a") == std::vector<std::string>{"x"});
    CHECK(e.inputs("b") == std::vector<std::string>{"a"});
    CHECK(e.inputs("loss") == std::vector<std::string>{"d", "y"});
    const Layer& a = e.layer("a");
    CHECK(a.op == OpKind::conv);
    CHECK(a.filters == 8);
    CHECK(a.kernel == Spatial{3});  // one value for every dimension: shape inference fits it to the input
    CHECK(a.pad == Spatial{1});
    CHECK(a.stride == Spatial{1});
    CHECK(a.bias);
    CHECK(a.loc.line == 3);
    CHECK(a.blocks.empty());
}

TEST_CASE("arguments: positional, named, lists, defaults", "[elaborate]") {
    Elab e(head +
           "a = conv(8, [3, 5], stride = [1, 2], pad = [1, 2], dilation = 2, bias = false)\n"
           "p = maxpool(3)\nq = maxpool(kernel = 2, stride = 1)\nb = batchnorm(eps = 0.001, momentum = 0.5)\n"
           "l = leaky_relu(0.2)\n");
    INFO(e.errors());
    REQUIRE(e.net);
    const Layer& a = e.layer("a");
    CHECK(a.kernel == Spatial{3, 5});
    CHECK(a.stride == Spatial{1, 2});
    CHECK(a.pad == Spatial{1, 2});
    CHECK(a.dilation == Spatial{2});
    CHECK_FALSE(a.bias);
    CHECK(e.layer("p").stride == Spatial{3});  // the stride defaults to the kernel
    CHECK(e.layer("q").stride == Spatial{1});
    CHECK(e.layer("b").eps == Approx(0.001));
    CHECK(e.layer("b").momentum == Approx(0.5));
    CHECK(e.layer("l").slope == Approx(0.2));
}

TEST_CASE("blocks expand with hierarchical names, parameters and arithmetic", "[elaborate]") {
    Elab e(head + R"(
block cbr(filters, stride = 1, k = filters / 4 - 1) {
  conv = conv(filters * 2, kernel = k, stride = stride, pad = (k - 1) / 2)
  bn = batchnorm
  relu = relu
}
block pair(f) {
  first = cbr(f, stride = 2)
  second = cbr(f)
}
stem = cbr(16)
body = pair(8)
)");
    INFO(e.errors());
    REQUIRE(e.net);
    CHECK(e.names() == std::vector<std::string>{"x", "y", "stem.conv", "stem.bn", "stem.relu", "body.first.conv",
                                                "body.first.bn", "body.first.relu", "body.second.conv",
                                                "body.second.bn", "body.second.relu"});
    CHECK(e.layer("stem.conv").filters == 32);
    CHECK(e.layer("stem.conv").kernel == Spatial{3});
    CHECK(e.layer("stem.conv").pad == Spatial{1});
    CHECK(e.layer("body.first.conv").stride == Spatial{2});
    CHECK(e.layer("body.first.conv").kernel == Spatial{1});
    CHECK(e.inputs("stem.conv") == std::vector<std::string>{"x"});
    CHECK(e.inputs("body.first.conv") == std::vector<std::string>{"stem.relu"});
    CHECK(e.inputs("body.second.conv") == std::vector<std::string>{"body.first.relu"});
    const Layer& l = e.layer("body.second.bn");
    CHECK(l.blocks == std::vector<std::string>{"pair", "cbr"});
    CHECK(l.instances == std::vector<std::string>{"body", "body.second"});
    CHECK(l.loc.line == 6);  // the statement in the block body
}

TEST_CASE("repeats: named groups and anonymous instances in a block", "[elaborate]") {
    Elab e(head + R"(
block unit(f) {
  conv = conv(f, kernel = 3, pad = 1)
  relu = relu
}
block stage(f, n) {
  0 = unit(f * 2)
  repeat(n - 1, start = 1) unit(f)
}
body = repeat(2) unit(4)
layer1 = stage(8, 3)
)");
    INFO(e.errors());
    REQUIRE(e.net);
    CHECK(e.names() == std::vector<std::string>{"x", "y", "body.0.conv", "body.0.relu", "body.1.conv", "body.1.relu",
                                                "layer1.0.conv", "layer1.0.relu", "layer1.1.conv", "layer1.1.relu",
                                                "layer1.2.conv", "layer1.2.relu"});
    CHECK(e.inputs("body.1.conv") == std::vector<std::string>{"body.0.relu"});
    CHECK(e.inputs("layer1.0.conv") == std::vector<std::string>{"body.1.relu"});
    CHECK(e.inputs("layer1.1.conv") == std::vector<std::string>{"layer1.0.relu"});
    CHECK(e.layer("layer1.0.conv").filters == 16);
    CHECK(e.layer("layer1.2.conv").filters == 8);
    CHECK(e.layer("layer1.2.conv").instances == std::vector<std::string>{"layer1", "layer1.2"});
    // A repeat group is not a block instance.
    CHECK(e.layer("body.1.conv").blocks == std::vector<std::string>{"unit"});
    CHECK(e.layer("body.1.conv").instances == std::vector<std::string>{"body.1"});
}

TEST_CASE("from: later siblings, in, inputs, dotted paths and instances", "[elaborate]") {
    Elab e(head + R"(
block res(f) {
  a = conv(f, kernel = 3, pad = 1)
  sum = add from a, skip
  skip = relu from in
}
b1 = res(3)
b2 = res(3)
cat = concat from b1, b2.a, x
)");
    INFO(e.errors());
    REQUIRE(e.net);
    CHECK(e.inputs("b1.sum") == std::vector<std::string>{"b1.a", "b1.skip"});
    CHECK(e.inputs("b1.skip") == std::vector<std::string>{"x"});
    // b2 reads b1's output: the last statement of its block, even though it is not last in the order.
    CHECK(e.inputs("b2.a") == std::vector<std::string>{"b1.skip"});
    CHECK(e.inputs("cat") == std::vector<std::string>{"b1.skip", "b2.a", "x"});
    // Topological order: skip comes before sum although written after it.
    CHECK(e.net->find("b1.skip") < e.net->find("b1.sum"));
    CHECK(e.net->find("b1.a") < e.net->find("b1.skip"));
    for (std::size_t i = 0; i < e.net->layers.size(); ++i)
        for (int in : e.net->layers[i].inputs) CHECK(static_cast<std::size_t>(in) < i);
}

TEST_CASE("train options", "[elaborate]") {
    Elab e(head + "train sgd(lr = 0.5, momentum = 0.8, weight_decay = 0)\na = relu\n");
    INFO(e.errors());
    REQUIRE(e.net);
    CHECK(*e.net->train.lr == Approx(0.5));
    CHECK(*e.net->train.momentum == Approx(0.8));
    CHECK(*e.net->train.weight_decay == 0.0);
}

TEST_CASE("cycles are reported with their path", "[elaborate]") {
    one_error(head + "a = relu from b\nb = relu from a\n", "layers form a cycle: 'a' -> 'b' -> 'a'", 3, 1);
    one_error(head + "a = relu from a\n", "layers form a cycle: 'a' -> 'a'", 3, 1);
    one_error(head + "a = relu\nb = add from a, d\nc = relu\nd = relu\n",
              "layers form a cycle: 'b' -> 'c' -> 'd' -> 'b'", 4, 1);
}

TEST_CASE("the layer kind table is indexed by OpKind and names every kind once", "[elaborate]") {
    std::set<std::string> names;
    for (std::size_t i = 0; i < layer_kinds().size(); ++i) {
        const LayerKind& k = layer_kinds()[i];
        CHECK(static_cast<std::size_t>(k.op) == i);
        CHECK(&kind_of(k.op) == &k);
        CHECK(names.insert(k.name).second);
        CHECK(op_from_name(k.name) == (k.data() ? std::nullopt : std::optional<OpKind>(k.op)));
        CHECK(k.elementwise() == (k.activation != Activation::none));
        for (const ParamSpec& p : k.params) CHECK(k.param(p.name) == &p);
    }
    CHECK(layer_kind_names().size() == layer_kinds().size() - 2);  // all but input and label
}

TEST_CASE("an unknown kind with no name near it lists the layer kinds", "[elaborate]") {
    Elab e(head + "a = qqqqqqqqqq\n");
    std::string list;
    for (const std::string& k : layer_kind_names()) list += (list.empty() ? "" : ", ") + k;
    CHECK(e.messages() ==
          std::vector<std::string>{"unknown layer kind or block 'qqqqqqqqqq'", "  the layer kinds are " + list});
}

TEST_CASE("unknown names get suggestions", "[elaborate]") {
    // Errors come in source order, although references are resolved after the layers are expanded.
    Elab e(head +
           "block cbr(f) {\n  c = conv(f)\n}\na = convv(8)\nb = cbrr(8)\nc = conv(8, kernal = 3)\n"
           "d = relu from aa\ne = cbr(8, g = 1)\n");
    INFO(e.errors());
    CHECK_FALSE(e.net);
    CHECK(e.messages() == std::vector<std::string>{"unknown layer kind or block 'convv'", "  did you mean 'conv'?",
                                                   "unknown layer kind or block 'cbrr'", "  did you mean 'cbr'?",
                                                   "'conv' has no parameter 'kernal'", "  did you mean 'kernel'?",
                                                   "unknown layer 'aa'", "  did you mean 'a'?",
                                                   "block 'cbr' has no parameter 'g'", "  did you mean 'f'?"});
    CHECK(e.diags.all()[0].loc.line == 6);
    CHECK(e.diags.all()[0].loc.col == 5);
}

TEST_CASE("argument errors", "[elaborate]") {
    one_error(head + "a = conv(kernel = 3)\n", "missing argument 'filters' of 'conv'", 3, 5);
    one_error(head + "block b(f) {\n  c = conv(f)\n}\na = b\n", "missing argument 'f' of block 'b'", 6, 5);
    one_error(head + "a = relu(1)\n", "'relu' takes no arguments", 3, 10);
    one_error(head + "a = fc(10, true, 3)\n", "too many positional arguments: 'fc' takes 2, got 3", 3, 18);
    one_error(head + "block b(f) {\n  c = conv(f)\n}\na = b(1, 2)\n",
              "too many positional arguments: block 'b' takes 1, got 2", 6, 10);
    one_error(head + "a = conv(8, filters = 3)\n", "duplicate argument 'filters'", 3, 13);
    const std::string positive =
        "'kernel' must be a positive integer, or a list of one per spatial dimension "
        "([height, width] or [depth, height, width])";
    one_error(head + "a = conv(8, kernel = 0)\n", positive, 3, 22);
    one_error(head + "a = conv(8, kernel = [3])\n", positive, 3, 22);
    one_error(head + "a = conv(8, kernel = [3, 3, 3, 3])\n", positive, 3, 22);
    one_error(head + "a = conv(8, kernel = [3, 0, 3])\n", positive, 3, 22);
    one_error(head + "a = conv(8, pad = -1)\n",
              "'pad' must be a non-negative integer, or a list of one per spatial dimension ([height, width] or "
              "[depth, height, width])",
              3, 19);
    one_error(head + "a = conv(8.5)\n", "'filters' must be a positive integer", 3, 10);
    one_error(head + "a = conv(8, bias = 1)\n", "'bias' must be true or false", 3, 20);
    one_error(head + "a = batchnorm(eps = 0)\n", "'eps' must be a positive number", 3, 21);
    one_error(head + "block b(f) {\n  c = conv(8 / f)\n}\na = b(0)\n", "division by zero", 4, 12);
    one_error(head + "block b(f) {\n  c = conv(g)\n}\na = b(0)\n", "unknown name 'g'", 4, 12);
}

TEST_CASE("errors in instances point into the block, with a note per enclosing instance", "[elaborate]") {
    Elab e(head +
           "block inner(f) {\n  c = conv(f)\n}\nblock outer(f) {\n  i = inner(f - 8)\n}\n"
           "a = outer(16)\nb = outer(8)\n");
    INFO(e.errors());
    CHECK_FALSE(e.net);
    REQUIRE(e.diags.all().size() == 1);
    const Diagnostic& d = e.diags.all()[0];
    CHECK(d.message == "'filters' must be a positive integer");
    CHECK(d.loc.line == 4);
    REQUIRE(d.notes.size() == 2);
    CHECK(d.notes[0].message == "in instance 'b.i' of block 'inner'");
    CHECK(d.notes[0].loc.line == 7);
    CHECK(d.notes[1].message == "in instance 'b' of block 'outer'");
    CHECK(d.notes[1].loc.line == 10);
}

TEST_CASE("arity and label checks", "[elaborate]") {
    one_error(head + "a = relu\nb = add\n", "'add' needs at least 2 inputs, got 1", 4, 1);
    one_error(head + "a = relu\nb = relu from a, x\n", "'relu' takes 1 input, got 2", 4, 18);
    one_error(head + "a = fc(2)\nl = softmax_cross_entropy\n",
              "'softmax_cross_entropy' takes 2 inputs (logits and labels), got 1", 4, 1);
    one_error(head + "a = relu from y\n", "label 'y' can only be the second input of a loss layer", 3, 15);
    one_error(head + "a = fc(2)\nl = softmax_cross_entropy from a, x\n",
              "the second input of 'softmax_cross_entropy' must be a label, got 'x'", 4, 35);
    one_error(head + "a = fc(2)\nl = softmax_cross_entropy from a, y\nb = relu from l\n",
              "loss 'l' cannot be the input of another layer", 5, 15);
    one_error(head + "block b(f) {\n  c = conv(f)\n}\na = relu\nc = b(1) from a, x\n",
              "an instance of block 'b' takes 1 input, got 2", 7, 18);
}

TEST_CASE("reference errors", "[elaborate]") {
    one_error(head + "block b(f) {\n  c = conv(f)\n}\na = b(1)\nd = relu from a.cc\n", "unknown layer 'a.cc'", 7, 15);
    one_error(head + "a = relu\nd = relu from a.c\n", "'a' is a layer, not an instance, and has no member 'c'", 4, 15);
    one_error(head + "a = relu from in\n", "unknown layer 'in'", 3, 15);
    one_error("input x [N, 3, 8, 8]\ninput z [N, 3, 8, 8]\na = relu\n",
              "the first layer cannot choose among 2 declared inputs: name one with 'from'", 3, 1);
    one_error("label y [N]\na = relu\n",
              "the first layer has no input to read: declare an input or name one with 'from'", 2, 1);
}

TEST_CASE("duplicates", "[elaborate]") {
    one_error(head + "a = relu\na = relu\n", "duplicate name 'a'", 4, 1);
    one_error(head + "x = relu\n", "duplicate name 'x'", 3, 1);
    one_error(head + "block b(f) {\n  c = relu\n}\nblock b(g) {\n  c = relu\n}\na = b(1)\n", "duplicate block 'b'", 6,
              7);
    one_error(head + "block b(f) {\n  0 = relu\n  repeat(2) b2\n}\nblock b2() {\n  c = relu\n}\na = b(1)\n",
              "duplicate name '0'", 5, 3);
}

TEST_CASE("recursive blocks are errors, not infinite loops", "[elaborate]") {
    one_error(head + "block a(f) {\n  x = a(f)\n}\nl = a(1)\n", "block 'a' instantiates itself: 'a' -> 'a'", 4, 7);
    one_error(head + "block a() {\n  x = b\n}\nblock b() {\n  x = a\n}\nl = a\n",
              "block 'a' instantiates itself: 'a' -> 'b' -> 'a'", 7, 7);
}

TEST_CASE("repeat counts and sizes are bounded", "[elaborate]") {
    one_error(head + "block u() {\n  c = relu\n}\nb = repeat(0) u\n",
              "the repeat count must be an integer between 1 and 100000, got 0", 6, 12);
    one_error(head + "block u() {\n  c = relu\n}\nb = repeat(100001) u\n",
              "the repeat count must be an integer between 1 and 100000, got 100001", 6, 12);
    // 10^5 x 10^5 instances would be 10^10 layers: refused once the graph passes 300000.
    Elab e(head + "block u() {\n  c = relu\n}\nblock v() {\n  repeat(100000) u\n}\nb = repeat(100000) v\n");
    CHECK_FALSE(e.net);
    REQUIRE(e.diags.all().size() == 1);
    CHECK_THAT(e.diags.all()[0].message, Catch::Contains("the network has more than 300000"));
}

TEST_CASE("tensor declarations and train are checked", "[elaborate]") {
    one_error("input x [N, 3, 8, 8, 8, 8]\na = relu\n",
              "input 'x' must be [N, C, H, W] or [N, C, D, H, W], got 6 dimensions", 1, 7);
    one_error("input x [3, 3, 8, 8]\na = relu\n", "the first dimension of input 'x' must be N", 1, 10);
    one_error("input x [N, 3, 8]\na = relu\n", "input 'x' must be [N, C, H, W] or [N, C, D, H, W], got 3 dimensions", 1,
              7);
    one_error(head + "train adagrad(lr = 0.1)\na = relu\n", "unknown optimizer 'adagrad'", 3, 7);
    one_error(head + "train sgd(rate = 0.1)\na = relu\n", "'sgd' has no parameter 'rate'", 3, 11);
    one_error(head, "the network has no layers", 1, 1);
}

TEST_CASE("independent errors are all reported: dependent ones are not", "[elaborate]") {
    Elab e(head + "a = convv(8)\nb = relu\nc = conv(8, kernel = 0)\nd = relu from zz\n");
    INFO(e.errors());
    // b reads the failed a: no second error for it.
    CHECK(e.messages() == std::vector<std::string>{"unknown layer kind or block 'convv'", "  did you mean 'conv'?",
                                                   "'kernel' must be a positive integer, or a list of one per "
                                                   "spatial dimension ([height, width] or [depth, height, width])",
                                                   "unknown layer 'zz'"});
}

TEST_CASE("imports: relative to the file, then the stdlib: cycles and missing files", "[elaborate]") {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("dsl_imports_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    auto write = [&](const std::string& name, const std::string& text) { std::ofstream(dir / name) << text; };
    write("blocks.net", "import \"more.net\"\nblock cbr(f) {\n  c = conv(f)\n  r = relu\n}\n");
    write("more.net", "import \"blocks.net\"\nblock two(f) {\n  a = cbr(f)\n  b = cbr(f)\n}\n");
    write("main.net",
          "import \"more.net\"\nimport \"resnet50.net\"\ninput x [N, 3, 8, 8]\nt = two(4)\n"
          "d = downsample(8, 2)\n");
    write("cyc.net", "import \"cyc.net\"\ninput x [N, 3, 8, 8]\na = relu\n");
    write("missing.net", "import \"nowhere.net\"\ninput x [N, 3, 8, 8]\na = relu\n");

    SECTION("blocks from a chain of imports and the stdlib") {
        SourceManager sources;
        Diagnostics diags;
        auto loaded = load_network((dir / "main.net").string(), sources, diags);
        INFO(diags.text());
        // more.net imports blocks.net, which imports more.net back: a cycle.
        REQUIRE(diags.all().size() == 1);
        CHECK_THAT(diags.all()[0].message, Catch::StartsWith("import cycle: "));
        CHECK(diags.all()[0].loc.line == 1);
    }
    SECTION("a file that imports itself") {
        SourceManager sources;
        Diagnostics diags;
        CHECK_FALSE(load_network((dir / "cyc.net").string(), sources, diags));
        REQUIRE(diags.all().size() == 1);
        CHECK_THAT(diags.all()[0].message, Catch::StartsWith("import cycle: "));
    }
    SECTION("a missing file, with where it looked") {
        SourceManager sources;
        Diagnostics diags;
        CHECK_FALSE(load_network((dir / "missing.net").string(), sources, diags));
        REQUIRE(diags.all().size() == 1);
        CHECK(diags.all()[0].message == "cannot find imported file 'nowhere.net'");
        CHECK(diags.all()[0].loc.line == 1);
        CHECK(diags.all()[0].loc.col == 8);
        REQUIRE(diags.all()[0].notes.size() == 1);
        CHECK_THAT(diags.all()[0].notes[0].message, Catch::Contains(dir.string()));
    }
    SECTION("without the cycle") {
        write("blocks.net", "block cbr(f) {\n  c = conv(f)\n  r = relu\n}\n");
        SourceManager sources;
        Diagnostics diags;
        auto loaded = load_network((dir / "main.net").string(), sources, diags);
        INFO(diags.text());
        REQUIRE(loaded);
        CHECK(loaded->imports.size() == 3);
        CHECK(loaded->net.find("t.b.r") >= 0);
        CHECK(loaded->net.find("d.0") >= 0);
        CHECK(loaded->net.layers[static_cast<std::size_t>(loaded->net.find("d.0"))].stride == Spatial{2, 2});
    }
    SECTION("a missing top-level file") {
        SourceManager sources;
        Diagnostics diags;
        CHECK_FALSE(load_network((dir / "absent.net").string(), sources, diags));
        REQUIRE(diags.all().size() == 1);
        CHECK_FALSE(diags.all()[0].loc.known());
        CHECK_THAT(diags.all()[0].message, Catch::StartsWith("cannot read '"));
    }
    fs::remove_all(dir);
}

TEST_CASE("train adam, adamw and learning-rate schedules", "[elaborate][optimizer]") {
    {
        Elab e(head +
               "train adam(0.002, 0.8, beta2 = 0.99, eps = 1e-6, weight_decay = 0.1, warmup = 5, "
               "schedule = cosine(steps = 100))\na = relu\n");
        INFO(e.errors());
        REQUIRE(e.net);
        const TrainOptions& t = e.net->train;
        CHECK(t.optimizer == Optimizer::adam);
        CHECK(*t.lr == 0.002);
        CHECK(*t.beta1 == 0.8);
        CHECK(*t.beta2 == 0.99);
        CHECK(*t.eps == 1e-6);
        CHECK(*t.weight_decay == 0.1);
        CHECK(t.schedule.warmup == 5);
        CHECK(t.schedule.kind == LrSchedule::Kind::cosine);
        CHECK(t.schedule.steps == 100);
    }
    {
        Elab e(head + "train adamw(lr = 0.01, schedule = step(every = 3, gamma = 0.5))\na = relu\n");
        INFO(e.errors());
        REQUIRE(e.net);
        CHECK(e.net->train.optimizer == Optimizer::adamw);
        CHECK_FALSE(e.net->train.weight_decay);  // the run's default, 0.01, applies
        CHECK(e.net->train.schedule.kind == LrSchedule::Kind::step);
        CHECK(e.net->train.schedule.every == 3);
        CHECK(e.net->train.schedule.gamma == 0.5);
        CHECK(e.net->train.schedule.warmup == 0);
    }
    {
        Elab e(head + "train sgd(lr = 0.1, warmup = 2, schedule = step(4))\na = relu\n");
        INFO(e.errors());
        REQUIRE(e.net);
        CHECK(e.net->train.optimizer == Optimizer::sgd);
        CHECK(e.net->train.schedule.every == 4);
        CHECK(e.net->train.schedule.gamma == 0.1);
        CHECK(e.net->train.schedule.warmup == 2);
    }
}

TEST_CASE("the optimizer's and schedule's parameters are checked", "[elaborate][optimizer]") {
    // A learning rate of 0 is one (PyTorch's too); below 0 it is not.
    {
        Elab e(head + "train sgd(lr = 0)\na = relu\n");
        INFO(e.errors());
        REQUIRE(e.net);
        CHECK(*e.net->train.lr == 0.0);
    }
    one_error(head + "train sgd(lr = -0.1)\na = relu\n", "'lr' must be a non-negative number", 3, 16);
    one_error(head + "train sgd(momentum = 1.5)\na = relu\n", "'momentum' must be a number between 0 and 1", 3, 22);
    one_error(head + "train adam(beta1 = 1)\na = relu\n", "'beta1' must be a number in [0, 1)", 3, 20);
    one_error(head + "train adamw(beta2 = -0.5)\na = relu\n", "'beta2' must be a number in [0, 1)", 3, 21);
    one_error(head + "train adam(eps = -1e-8)\na = relu\n", "'eps' must be a non-negative number", 3, 18);
    one_error(head + "train adam(momentum = 0.9)\na = relu\n", "'adam' has no parameter 'momentum'", 3, 12);
    one_error(head + "train sgd(warmup = 1.5)\na = relu\n",
              "'warmup' must be a non-negative integer (a number of steps)", 3, 20);
    one_error(head + "train sgd(schedule = cosine(steps = -3))\na = relu\n",
              "'steps' must be a positive integer (a number of steps)", 3, 37);
    one_error(head + "train sgd(schedule = step(every = 0))\na = relu\n",
              "'every' must be a positive integer (a number of steps)", 3, 35);
    one_error(head + "train sgd(schedule = step(every = 2, gamma = 0))\na = relu\n",
              "'gamma' must be a positive number", 3, 46);
    one_error(head + "train sgd(schedule = cosine())\na = relu\n", "'cosine' needs 'steps'", 3, 22);
    one_error(head + "train sgd(schedule = cosine)\na = relu\n", "'cosine' needs its arguments: cosine(steps = T)", 3,
              22);
    one_error(head + "train sgd(schedule = 3)\na = relu\n",
              "'schedule' must be cosine(steps = T) or step(every = K, gamma = G)", 3, 22);
    one_error(head + "train sgd(schedule = cosin(steps = 3))\na = relu\n", "unknown schedule 'cosin'", 3, 22);
    one_error(head + "train sgd(schedule = cosine(step = 3))\na = relu\n", "'cosine' has no parameter 'step'", 3, 36);
    // A call is a value of the train line only.
    one_error(head + "a = conv(8, kernel = cosine(steps = 3))\n",
              "'cosine(...)' is a learning-rate schedule, which only the train line takes", 3, 22);
}

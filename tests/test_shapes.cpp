// Shape inference: output shapes, parameter and MAC counts (ResNet-50 against torchvision's), shape errors.
#include <catch2/catch.hpp>

#include <dsl/frontend/parse.hpp>
#include <dsl/frontend/passes.hpp>

using namespace dsl;
using namespace dsl::frontend;

namespace {

// Parses, elaborates and infers the shapes of `text` as the file "t.net".
struct Shapes {
    SourceManager sources;
    Diagnostics diags;
    std::optional<Network> net;
    bool ok = false;

    explicit Shapes(const std::string& text) {
        auto file = parse_net(*sources.add("t.net", text), diags);
        REQUIRE(file);
        net = elaborate(*file, {}, diags);
        REQUIRE(net);
        ok = infer_shapes(*net, diags);
    }

    std::string errors() const { return diags.text(); }

    const Layer& layer(const std::string& name) const {
        const int i = net->find(name);
        INFO(name);
        REQUIRE(i >= 0);
        return net->layers[static_cast<std::size_t>(i)];
    }
};

void one_error(const std::string& text, const std::string& message, unsigned line) {
    Shapes s(text);
    INFO(s.errors());
    CHECK_FALSE(s.ok);
    REQUIRE(s.diags.all().size() == 1);
    CHECK(s.diags.all()[0].message == message);
    CHECK(s.diags.all()[0].loc.line == line);
}

std::optional<LoadedNetwork> stdlib(const std::string& name, SourceManager& sources, Diagnostics& diags) {
    auto loaded = load_network(std::string(DSL_SOURCE_DIR) + "/stdlib/" + name, sources, diags);
    const std::string errors = diags.text();
    INFO(errors);
    REQUIRE(loaded);
    return loaded;
}

}  // namespace

TEST_CASE("shapes and costs of each kind", "[shapes]") {
    Shapes s(R"(
input x [N, 3, 32, 32]
label y [N]
c = conv(16, kernel = 3, stride = 2, pad = 1)
b = batchnorm
r = leaky_relu
m = maxpool(3, stride = 2, pad = 1)
a = avgpool(2)
d = conv(4, kernel = [3, 1], dilation = 2, bias = false) from c
cat = concat from c, c
sum = add from c, c, c
g = global_avgpool from a
f = fc(10)
loss = softmax_cross_entropy from f, y
)");
    INFO(s.errors());
    REQUIRE(s.ok);
    const Layer& c = s.layer("c");
    CHECK(c.shape.str() == "[N, 16, 16, 16]");
    CHECK(c.params == 16 * 3 * 9 + 16);
    CHECK(c.macs == 16 * 16 * 16 * 3 * 9);
    CHECK(c.flops == 2 * c.macs);
    CHECK(c.activation_bytes == 4 * 16 * 16 * 16);
    CHECK(c.halo() == Spatial{1, 1});
    CHECK(s.layer("b").params == 32);
    CHECK(s.layer("b").shape == c.shape);
    CHECK(s.layer("r").flops == 16 * 16 * 16);
    CHECK(s.layer("m").shape.str() == "[N, 16, 8, 8]");
    CHECK(s.layer("a").shape.str() == "[N, 16, 4, 4]");
    const Layer& d = s.layer("d");
    CHECK(d.shape.str() == "[N, 4, 12, 16]");  // 16 + 0 - 2*2 - 1 + 1 rows
    CHECK(d.params == 4 * 16 * 3);
    CHECK(d.halo() == Spatial{4, 0});
    CHECK(s.layer("cat").shape.str() == "[N, 32, 16, 16]");
    CHECK(s.layer("sum").shape == c.shape);
    CHECK(s.layer("g").shape.str() == "[N, 16, 1, 1]");
    const Layer& f = s.layer("f");
    CHECK(f.shape.str() == "[N, 10]");
    CHECK(f.params == 16 * 10 + 10);
    CHECK(f.macs == 160);
    CHECK(s.layer("loss").shape.str() == "[N]");
    CHECK(s.layer("loss").shape.elements() == 1);
    CHECK(s.layer("x").shape.str() == "[N, 3, 32, 32]");
    CHECK(s.layer("y").shape.str() == "[N]");
    std::int64_t params = 0;
    for (const Layer& l : s.net->layers) params += l.params;
    CHECK(s.net->total_params() == params);
}

TEST_CASE("shape errors", "[shapes]") {
    const std::string head = "input x [N, 3, 32, 32]\nlabel y [N, 64, 64]\nlabel z [N]\n";
    one_error(head + "a = conv(64)\nb = conv(128, stride = 2)\nc = add from a, b\n",
              "cannot add tensors of shapes [N, 64, 32, 32] ('a') and [N, 128, 16, 16] ('b')", 6);
    one_error(head + "a = conv(64)\nb = conv(8, kernel = 2, stride = 2) from x\nc = concat from a, b\n",
              "cannot concatenate tensors of shapes [N, 64, 32, 32] ('a') and [N, 8, 16, 16] ('b'): only the channels "
              "may differ",
              6);
    one_error(head + "a = conv(8, kernel = 7, stride = 8)\nb = conv(8, kernel = 7)\n",
              "kernel 7 does not fit the padded input of 4 rows", 5);
    one_error(head + "a = conv(8, kernel = [1, 3], dilation = 20)\n",
              "kernel 3 (dilated to 41) does not fit the padded input of 32 columns", 4);
    one_error(head + "a = fc(10)\nb = conv(8)\n",
              "'conv' needs an image [N, C, H, W] or a volume [N, C, D, H, W], got [N, 10] from 'a'", 5);
    one_error(head + "a = conv(2, stride = 2)\nl = pixel_cross_entropy from a, y\n",
              "labels [N, 64, 64] do not match logits [N, 2, 16, 16] of 'pixel_cross_entropy'", 5);
    one_error(head + "a = conv(2)\nl = softmax_cross_entropy from a, z\n",
              "'softmax_cross_entropy' needs logits [N, K] or [N, K, 1, 1], got [N, 2, 32, 32] from 'a'", 5);
    one_error(head + "a = maxpool(2, pad = 2)\n", "the padding of 'maxpool' must be at most half its kernel", 4);
    // A later layer that reads a failed one is not reported again.
    one_error(head + "a = conv(8, kernel = 99)\nb = relu\nc = add from b, x\n",
              "kernel 99 does not fit the padded input of 32 rows", 4);
}

TEST_CASE("absurd sizes are rejected, never overflowed", "[shapes]") {
    Shapes s("input x [N, 1000000000, 1000000000, 1000000000]\na = relu\n");
    CHECK_FALSE(s.ok);
    REQUIRE(s.diags.all().size() == 1);
    CHECK_THAT(s.diags.all()[0].message, Catch::Contains("too large"));

    Shapes t("input x [N, 1000, 1000, 1000]\na = conv(1000000, kernel = 9, pad = 4)\nb = fc(1000000000)\n");
    CHECK_FALSE(t.ok);
    REQUIRE(t.diags.all().size() == 1);
    CHECK(t.diags.all()[0].loc.line == 3);  // fc: 10^12 inputs times 10^9 outputs
}

TEST_CASE("ResNet-50 matches torchvision", "[shapes][stdlib]") {
    SourceManager sources;
    Diagnostics diags;
    auto loaded = stdlib("resnet50.net", sources, diags);
    const Network& net = loaded->net;
    CHECK(net.total_params() == 25557032);
    CHECK(net.total_macs() == 4089184256);
    CHECK(static_cast<double>(net.total_macs()) == Approx(4.09e9).epsilon(0.01));
    auto shape = [&](const std::string& name) {
        const int i = net.find(name);
        INFO(name);
        REQUIRE(i >= 0);
        return net.layers[static_cast<std::size_t>(i)].shape.str();
    };
    CHECK(shape("conv1") == "[N, 64, 112, 112]");
    CHECK(shape("maxpool") == "[N, 64, 56, 56]");
    CHECK(shape("layer1.2.relu3") == "[N, 256, 56, 56]");
    CHECK(shape("layer2.0.downsample.0") == "[N, 512, 28, 28]");
    CHECK(shape("layer3.5.conv3") == "[N, 1024, 14, 14]");
    CHECK(shape("layer4.2.relu3") == "[N, 2048, 7, 7]");
    CHECK(shape("avgpool") == "[N, 2048, 1, 1]");
    CHECK(shape("fc") == "[N, 1000]");
    CHECK(shape("loss") == "[N]");
    const Layer& conv2 = net.layers[static_cast<std::size_t>(net.find("layer2.0.conv2"))];
    CHECK(conv2.stride == Spatial{2, 2});  // v1.5: the stride is on the 3x3
    CHECK(conv2.blocks == std::vector<std::string>{"stage", "bottleneck_down"});
    CHECK(conv2.instances == std::vector<std::string>{"layer2", "layer2.0"});
    int convs = 0;
    for (const Layer& l : net.layers) convs += l.op == OpKind::conv;
    CHECK(convs == 53);  // 1 + 16 * 3 + 4 projections
}

TEST_CASE("mesh1k and mesh2k", "[shapes][stdlib]") {
    SourceManager sources;
    Diagnostics diags;
    auto mesh1k = stdlib("mesh1k.net", sources, diags);
    auto mesh2k = stdlib("mesh2k.net", sources, diags);
    auto shape = [](const Network& net, const std::string& name) {
        const int i = net.find(name);
        INFO(name);
        REQUIRE(i >= 0);
        return net.layers[static_cast<std::size_t>(i)].shape.str();
    };
    int convs1 = 0, convs2 = 0;
    for (const Layer& l : mesh1k->net.layers) convs1 += l.op == OpKind::conv;
    for (const Layer& l : mesh2k->net.layers) convs2 += l.op == OpKind::conv;
    CHECK(convs1 == 6 * 3 + 1);
    CHECK(convs2 == 6 * 5 + 1);
    CHECK(shape(mesh1k->net, "x") == "[N, 18, 1024, 1024]");
    CHECK(shape(mesh1k->net, "block1.0.conv") == "[N, 128, 512, 512]");  // widths: see the files' comments
    CHECK(shape(mesh1k->net, "block1.2.relu") == "[N, 128, 512, 512]");
    CHECK(shape(mesh1k->net, "block6.2.relu") == "[N, 512, 16, 16]");
    CHECK(shape(mesh1k->net, "pred") == "[N, 2, 16, 16]");
    CHECK(shape(mesh2k->net, "block1.4.relu") == "[N, 128, 1024, 1024]");
    CHECK(shape(mesh2k->net, "pred") == "[N, 2, 32, 32]");
    CHECK(mesh1k->net.layers[static_cast<std::size_t>(mesh1k->net.find("block3.1.conv"))].halo() == Spatial{1, 1});
}

TEST_CASE("volumes: windows take one value or one per dimension", "[shapes]") {
    Shapes s(
        "input v [N, 2, 9, 16, 20]\nlabel t [N, 4] float\n"
        "a = conv(8, kernel = 3, pad = 1)\nb = conv(8, kernel = [3, 1, 5], stride = [1, 2, 1], pad = [1, 0, 2])\n"
        "c = maxpool([1, 2, 2])\nd = avgpool(3, stride = 2, pad = 1, padding = periodic)\n"
        "e = deconv(4, kernel = 2, stride = 2)\nf = upsample(2, mode = trilinear)\ng = global_avgpool\n"
        "h = fc(4)\nl = mse from h, t\n");
    INFO(s.errors());
    REQUIRE(s.ok);
    CHECK(s.layer("a").kernel == Spatial{3, 3, 3});  // one value, fitted to the input's three dimensions
    CHECK(s.layer("a").shape.str() == "[N, 8, 9, 16, 20]");
    CHECK(s.layer("a").params == 8 * 2 * 27 + 8);
    CHECK(s.layer("a").macs == 9 * 16 * 20 * 8 * 2 * 27);
    CHECK(s.layer("b").shape.str() == "[N, 8, 9, 8, 20]");
    CHECK(s.layer("b").params == 8 * 8 * 15 + 8);
    CHECK(s.layer("c").shape.str() == "[N, 8, 9, 4, 10]");
    CHECK(s.layer("d").periodic());
    CHECK(s.layer("d").shape.str() == "[N, 8, 5, 2, 5]");
    CHECK(s.layer("e").shape.str() == "[N, 4, 10, 4, 10]");
    CHECK(s.layer("f").shape.str() == "[N, 4, 20, 8, 20]");
    CHECK(s.layer("g").shape.str() == "[N, 4, 1, 1, 1]");
    CHECK(s.net->spatial_rank() == 3);

    one_error("input v [N, 1, 16, 64, 64]\na = conv(8, kernel = [3, 3], pad = 1)\n",
              "'kernel' of 'conv' has 2 values, but its input has 3 spatial dimensions: give one number, or one per "
              "dimension",
              2);
    one_error("input x [N, 1, 64, 64]\na = conv(8, kernel = 3, stride = [1, 1, 1])\n",
              "'stride' of 'conv' has 3 values, but its input has 2 spatial dimensions: give one number, or one per "
              "dimension",
              2);
    one_error("input v [N, 1, 4, 64, 64]\na = conv(8, kernel = 5)\n",
              "kernel 5 does not fit the padded input of 4 planes of depth", 2);
    one_error("input v [N, 1, 4, 8, 8]\na = upsample(2, mode = bilinear)\n",
              "'bilinear' interpolates images [N, C, H, W], but 'v' is [N, 1, 4, 8, 8]: use mode = trilinear", 2);
    one_error("input x [N, 1, 8, 8]\na = upsample(2, mode = trilinear)\n",
              "'trilinear' interpolates volumes [N, C, D, H, W], but 'x' is [N, 1, 8, 8]: use mode = bilinear", 2);
}

TEST_CASE("CosmoFlow and the 3-D U-Net", "[shapes][stdlib]") {
    SourceManager sources;
    Diagnostics diags;
    auto cosmo = stdlib("cosmoflow.net", sources, diags);
    auto unet = stdlib("unet3d.net", sources, diags);
    INFO(diags.text());
    REQUIRE(cosmo);
    REQUIRE(unet);
    auto shape = [](const Network& net, const std::string& name) {
        const int i = net.find(name);
        INFO(name);
        REQUIRE(i >= 0);
        return net.layers[static_cast<std::size_t>(i)].shape.str();
    };
    // The count of torch.nn's Conv3d(4, 16, 3) ... Linear(256, 4), which bench/pytorch_mesh.py builds too.
    CHECK(cosmo->net.total_params() == 38798772);
    CHECK(shape(cosmo->net, "x") == "[N, 4, 512, 512, 512]");
    CHECK(shape(cosmo->net, "c1.pool") == "[N, 16, 256, 256, 256]");
    CHECK(shape(cosmo->net, "c7.pool") == "[N, 256, 4, 4, 4]");
    CHECK(shape(cosmo->net, "fc1") == "[N, 2048]");
    CHECK(shape(cosmo->net, "out") == "[N, 4]");
    CHECK(cosmo->net.spatial_rank() == 3);
    CHECK(unet->net.total_params() == 19071459);
    CHECK(shape(unet->net, "pred") == "[N, 3, 256, 256, 256]");
    CHECK(unet->net.spatial_rank() == 3);
}

// What a measuring process hands back to the command that started it: its times, a line each, in a file; and
// the rate a measured convolution reached, for the platform's analytic fallback.
#include <dsl/backend/calibrate.hpp>

#include <dsl/scheduler/kernel_names.hpp>

#include <fstream>
#include <sstream>

namespace dsl::backend {

std::string results_text(const std::vector<std::pair<std::string, double>>& times) {
    std::ostringstream out;
    for (const auto& [key, seconds] : times) out << key << "\t" << seconds << "\n";
    return out.str();
}

std::map<std::string, double> read_results(const std::string& path) {
    std::map<std::string, double> out;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
        const std::size_t tab = line.find('\t');
        if (tab == std::string::npos) continue;
        out[line.substr(0, tab)] = std::stod(line.substr(tab + 1));
    }
    return out;
}

// 2 * outputs * channels * kernel area per call.
std::optional<double> conv_rate(const std::string& key, double seconds) {
    const auto k = scheduler::parse_time_key(key);
    if (!k || k->kernel != "conv.forward" || k->field("threads") != std::vector<std::int64_t>{1}) return std::nullopt;
    const auto &x = k->field("x"), &y = k->field("y"), &w = k->field("k");
    if (x.size() != 4 || y.size() != 4 || w.size() != 2) return std::nullopt;
    const double outputs = static_cast<double>(y[0] * y[1] * y[2] * y[3]);
    return 2.0 * outputs * static_cast<double>(x[1] * w[0] * w[1]) / seconds;
}

}  // namespace dsl::backend

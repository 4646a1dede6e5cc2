// The losses a run's --log holds, a line each: the lines with a loss, in order (a line a stopped run left cut
// short is left out).
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

inline std::vector<double> logged_losses(const std::filesystem::path& log) {
    std::vector<double> out;
    std::ifstream in(log);
    for (std::string line; std::getline(in, line);) {
        const auto j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_object() && j.contains("loss")) out.push_back(j["loss"].get<double>());
    }
    return out;
}

}  // namespace

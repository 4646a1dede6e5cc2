// Quantities as a person reads them (units.hpp).
#include <dsl/base/units.hpp>

#include <fmt/format.h>

namespace dsl {

std::string human_bytes(double v) {
    const char* suffix[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (v >= 1024.0 && i < 4) {
        v /= 1024.0;
        ++i;
    }
    return i == 0 ? fmt::format("{:.0f} B", v) : fmt::format("{:.1f} {}", v, suffix[i]);
}

}  // namespace dsl

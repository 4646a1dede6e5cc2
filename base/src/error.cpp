// User and internal errors.
#include <dsl/base/error.hpp>

#include <dsl/base/diagnostics.hpp>

#include <fmt/format.h>

#include <sstream>

namespace dsl {

std::string UserError::render(bool color) const {
    Diagnostics d;
    d.error(loc_, what());
    std::ostringstream out;
    d.render(out, color);
    return out.str();
}

void internal_failure(const char* file, int line, const char* condition, const std::string& what) {
    throw InternalError(fmt::format("internal error at {}:{}: {} ({})", file, line, what, condition));
}

}  // namespace dsl

// Quantities as a person reads them in messages and reports.
#pragma once

#include <string>

namespace dsl {

// A size in bytes in the largest binary unit that leaves at least 1: "512 B", "12.5 MiB", "1.5 GiB".
std::string human_bytes(double bytes);

}  // namespace dsl

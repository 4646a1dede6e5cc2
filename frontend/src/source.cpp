// Reading and owning source files.
#include <dsl/frontend/source.hpp>

#include <sys/stat.h>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace dsl {

std::string_view SourceFile::line_text(unsigned line) const {
    if (line == 0) return {};
    std::size_t begin = 0;
    for (unsigned l = 1; l < line; ++l) {
        begin = text.find('\n', begin);
        if (begin == std::string::npos) return {};
        ++begin;
    }
    std::size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    std::string_view view(text.data() + begin, end - begin);
    if (!view.empty() && view.back() == '\r') view.remove_suffix(1);
    return view;
}

const SourceFile* SourceManager::load(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        last_error_ = std::strerror(errno);
        return nullptr;
    }
    if (S_ISDIR(st.st_mode)) {
        last_error_ = "it is a directory";
        return nullptr;
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        last_error_ = std::strerror(errno);
        return nullptr;
    }
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad()) {
        last_error_ = "read error";
        return nullptr;
    }
    return add(path, text.str());
}

const SourceFile* SourceManager::add(std::string path, std::string text) {
    files_.push_back(SourceFile{std::move(path), std::move(text)});
    return &files_.back();
}

}  // namespace dsl

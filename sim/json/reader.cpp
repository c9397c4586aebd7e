#include "json/reader.hpp"

#include "dtsim/detail/errno_text.hpp"
#include "dtsim/interrupt.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ios>
#include <istream>
#include <iterator>
#include <set>
#include <stdexcept>
#include <streambuf>
#include <system_error>

namespace dtsim::json_reader {

namespace fs = std::filesystem;

// ------------------------------------------------------------------ words

std::string shorten(std::string_view text, std::size_t max) {
    if (text.size() <= max) return std::string(text);
    std::size_t cut = max;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 character
    return fmt::format("{}... ({} bytes)", text.substr(0, cut), text.size());
}

std::string describe(const Json& j) {
    switch (j.type()) {
        case Json::value_t::null: return "null";
        case Json::value_t::boolean: return j.get<bool>() ? "true" : "false";
        case Json::value_t::string: return fmt::format("\"{}\" (a string)", shorten(j.get_ref<const std::string&>()));
        case Json::value_t::object: return "an object";
        case Json::value_t::array: return "an array";
        default: return j.dump();
    }
}

int edit_distance(std::string_view a, std::string_view b) {
    std::vector<int> prev(b.size() + 1), cur(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = static_cast<int>(j);
    for (std::size_t i = 1; i <= a.size(); ++i) {
        cur[0] = static_cast<int>(i);
        for (std::size_t j = 1; j <= b.size(); ++j)
            cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
        std::swap(prev, cur);
    }
    return prev[b.size()];
}

std::string_view nearest(std::string_view word, std::span<const std::string_view> candidates, std::size_t* compared) {
    const std::size_t most = std::max<std::size_t>(2, word.size() / 3);
    std::string_view best;
    int best_d = INT_MAX;
    for (auto c : candidates) {
        // The distance is at least the difference of the lengths: a word that much longer or shorter (a
        // key of megabytes) is no typo of the candidate, and is not compared letter by letter.
        if (std::max(word.size(), c.size()) - std::min(word.size(), c.size()) > most) continue;
        const int d = edit_distance(word, c);
        if (compared) ++*compared;
        if (d < best_d) best_d = d, best = c;
    }
    return best_d != INT_MAX && static_cast<std::size_t>(best_d) <= most ? best : std::string_view{};
}

namespace {

// The dialect's error; a dialect whose raise returns still ends the read.
[[noreturn]] void raise_error(const Dialect& dialect, const std::string& file, const std::string& path,
                              const std::string& message) {
    dialect.raise(file, path, message);
    throw std::logic_error(fmt::format("{}: {}: {}", file, path, message));
}

bool documentation(std::string_view key) { return key == "source" || key == "note"; }

std::string escape_key(std::string_view k) {
    std::string out;
    for (char c : k) {
        if (c == '~')
            out += "~0";
        else if (c == '/')
            out += "~1";
        else
            out += c;
    }
    return out;
}

std::string display(const fs::path& p) { return p.lexically_normal().generic_string(); }

// "line 3, column 15" after `offset` characters read, as nlohmann's messages count
// (the column is the characters read on that line; the end of the text counts as one).
std::string line_and_column(const std::string& text, std::size_t offset) {
    const std::size_t upto = std::min(offset, text.size());
    const auto line = 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(upto), '\n');
    const auto nl = upto == 0 ? std::string::npos : text.rfind('\n', upto - 1);
    const auto col = nl == std::string::npos ? offset : offset - nl - 1;
    return fmt::format("line {}, column {}", line, col);
}

// The number nlohmann's out_of_range error quotes ("number overflow parsing '1e400'").
std::string quoted_number(const std::string& what) {
    const auto q = what.find('\'');
    return q == std::string::npos ? "" : what.substr(q + 1, what.rfind('\'') - q - 1);
}

// The object a document must be.
void check_root(const Json& j, const std::string& file, const Dialect& dialect) {
    if (!j.is_object()) raise_error(dialect, file, "$", fmt::format("expected an object, found {}", describe(j)));
}

std::vector<std::string> split_path(const std::string& dotted) {
    std::string p = dotted;
    if (p.rfind("$.", 0) == 0) p.erase(0, 2);
    std::vector<std::string> out;
    std::size_t start = 0;
    for (;;) {
        const auto dot = p.find('.', start);
        out.push_back(p.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
        if (dot == std::string::npos) break;
        start = dot + 1;
    }
    return out;
}

// "one of \"a\", \"b\", \"c\"", "\"a\" or \"b\"", "\"a\"".
std::string alternatives(std::span<const std::string_view> choices) {
    std::string list;
    for (std::size_t i = 0; i < choices.size(); ++i) {
        const char* sep = i == 0 ? "" : choices.size() == 2 ? " or " : ", ";
        list += fmt::format("{}\"{}\"", sep, choices[i]);
    }
    return choices.size() > 2 ? "one of " + list : list;
}

// A JSON path step as messages show it: a key of at most 32 characters ("$.a" or "$.a...").
std::string path_key(std::string_view key) {
    constexpr std::size_t kShown = 32;
    return key.size() <= kShown ? "." + std::string(key) : "." + std::string(key.substr(0, kShown)) + "...";
}

// "1.5 MiB", "8 GiB": a size limit as messages show it.
std::string size_text(std::uint64_t bytes) {
    if (bytes >= (std::uint64_t{1} << 30)) return fmt::format("{:g} GiB", static_cast<double>(bytes) / (1 << 30));
    if (bytes >= (std::uint64_t{1} << 20)) return fmt::format("{:g} MiB", static_cast<double>(bytes) / (1 << 20));
    return fmt::format("{} bytes", bytes);
}

[[noreturn]] void too_large(const Dialect& dialect, const std::string& name, std::uint64_t max_bytes,
                            const std::string& found) {
    raise_error(dialect, name, "$",
                fmt::format("the file is larger than dtsim reads ({}; found {})", size_text(max_bytes), found));
}

// The system's reason a file could not be read, from an exception of the stream that read it.
std::string read_failure(const std::exception& e) {
    if (const auto* f = dynamic_cast<const std::ios_base::failure*>(&e); f && f->code().value() != 0 &&
                                                                          f->code().category() == std::system_category())
        return f->code().message();
    if (const auto* f = dynamic_cast<const std::system_error*>(&e)) return f->code().message();
    return "read error";
}

// Builds the document from nlohmann's SAX events, as nlohmann's own DOM parser does, with the
// nesting counted: a container deeper than the limit stops the parse (nlohmann's copy, comparison
// and the merge of includes recurse once per level).
class DomBuilder {
public:
    DomBuilder(Json& root, int max_depth) : root_(root), max_depth_(max_depth) {}

    bool null() { return put(nullptr) != nullptr; }
    bool boolean(bool v) { return put(v) != nullptr; }
    bool number_integer(Json::number_integer_t v) { return put(v) != nullptr; }
    bool number_unsigned(Json::number_unsigned_t v) { return put(v) != nullptr; }
    bool number_float(Json::number_float_t v, const Json::string_t&) { return put(v) != nullptr; }
    // Strings and keys are copied, as nlohmann's parser does: the lexer's buffer, if moved, would
    // bring its capacity along, a heap block for every short key of a trace.
    bool string(Json::string_t& v) { return put(v) != nullptr; }
    bool binary(Json::binary_t& v) { return put(v) != nullptr; }
    bool start_object(std::size_t) { return open(Json::value_t::object); }
    bool key(Json::string_t& k) {
        slot_ = &stack_.back()->get_ref<Json::object_t&>()[k];
        return true;
    }
    bool end_object() {
        stack_.pop_back();
        return true;
    }
    bool start_array(std::size_t) { return open(Json::value_t::array); }
    bool end_array() {
        stack_.pop_back();
        return true;
    }
    bool parse_error(std::size_t position, const std::string&, const Json::exception& e) {
        error_position = position;
        error_id = e.id;
        error_what = e.what();
        return false;
    }

    // After a parse that stopped: too deep (and where), or a syntax error (what nlohmann said).
    bool too_deep = false;
    std::string too_deep_path;
    std::size_t error_position = 0;
    int error_id = 0;
    std::string error_what;

private:
    template <class V>
    Json* put(V&& v) {
        if (stack_.empty()) {
            root_ = Json(std::forward<V>(v));
            return &root_;
        }
        Json& top = *stack_.back();
        if (top.is_array()) {
            auto& a = top.get_ref<Json::array_t&>();
            a.emplace_back(std::forward<V>(v));
            return &a.back();
        }
        *slot_ = Json(std::forward<V>(v));
        return slot_;
    }

    bool open(Json::value_t type) {
        if (static_cast<int>(stack_.size()) >= max_depth_) {
            too_deep = true;
            too_deep_path = place();
            return false;
        }
        stack_.push_back(put(type));
        return true;
    }

    // The JSON path of the value being opened: its first steps, then "..." where it is long.
    [[nodiscard]] std::string place() const {
        constexpr std::size_t kSteps = 8;
        std::string out = "$";
        for (std::size_t i = 0; i < stack_.size() && i < kSteps; ++i) {
            const Json& parent = *stack_[i];
            const Json* child = i + 1 < stack_.size() ? stack_[i + 1] : nullptr;
            if (parent.is_array()) {
                fmt::format_to(std::back_inserter(out), "[{}]", child ? parent.size() - 1 : parent.size());
                continue;
            }
            const Json* target = child ? child : slot_;
            for (auto it = parent.begin(); it != parent.end(); ++it)
                if (&*it == target) {
                    out += path_key(it.key());
                    break;
                }
        }
        if (stack_.size() > kSteps) out += "...";
        return out;
    }

    Json& root_;
    int max_depth_;
    std::vector<Json*> stack_;  // the containers being filled, outermost first
    Json* slot_ = nullptr;      // the member of the innermost object its last key made
};

[[noreturn]] void nested_too_deep(const Dialect& dialect, const std::string& name, const std::string& path,
                                  int max_depth) {
    raise_error(dialect, name, path,
                fmt::format("arrays and objects nested more than {} deep (dtsim reads at most {} levels)", max_depth,
                            max_depth));
}

// A stream of at most `max` bytes: reads from `source` in blocks, and ends (as if the input had)
// at the limit or where `source` fails, saying which. The parser reads it a character at a time
// from the block, as it would the source's own buffer.
class LimitedInput : public std::streambuf {
public:
    LimitedInput(std::streambuf* source, std::uint64_t max) : source_(source), max_(max), block_(1 << 16) {}

    bool over_limit = false;
    std::string failure;  // the system's reason the source could not be read, if it could not
    int interrupted = 0;  // an interrupt request (dtsim/interrupt.hpp) ended the input, block by block

protected:
    int_type underflow() override {
        if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
        if (over_limit || !failure.empty() || interrupted != 0) return traits_type::eof();
        if ((interrupted = interrupt_requested()) != 0) return traits_type::eof();
        std::streamsize n = 0;
        try {
            n = source_->sgetn(block_.data(), static_cast<std::streamsize>(block_.size()));
        } catch (const std::exception& e) {
            failure = read_failure(e);
            return traits_type::eof();
        }
        if (n <= 0) return traits_type::eof();
        read_ += static_cast<std::uint64_t>(n);
        if (read_ > max_) {
            over_limit = true;
            return traits_type::eof();
        }
        setg(block_.data(), block_.data(), block_.data() + n);
        return traits_type::to_int_type(*gptr());
    }

private:
    std::streambuf* source_;
    std::uint64_t max_;
    std::uint64_t read_ = 0;
    std::vector<char> block_;
};

// Whether `s` is valid UTF-8 (what nlohmann writes and reads; a string that is not cannot be
// written out as JSON).
bool valid_utf8(std::string_view s) {
    for (std::size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        std::size_t n = 0;
        std::uint32_t cp = 0;
        if (c < 0x80) {
            ++i;
            continue;
        }
        if ((c & 0xE0) == 0xC0) n = 1, cp = c & 0x1F;
        else if ((c & 0xF0) == 0xE0) n = 2, cp = c & 0x0F;
        else if ((c & 0xF8) == 0xF0) n = 3, cp = c & 0x07;
        else return false;
        if (s.size() - i <= n) return false;  // cut short
        for (std::size_t k = 1; k <= n; ++k) {
            const auto d = static_cast<unsigned char>(s[i + k]);
            if ((d & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (d & 0x3F);
        }
        // Overlong forms, surrogates and code points beyond U+10FFFF are not UTF-8.
        if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += n + 1;
    }
    return true;
}

// The file a path names, to know it again (a file included twice, a cycle): its canonical path, or
// the path as given where that cannot be had (a name too long: reading it then says why).
fs::path identity(const fs::path& path) {
    std::error_code ec;
    fs::path canonical = fs::weakly_canonical(path, ec);
    return ec ? path.lexically_normal() : canonical;
}

}  // namespace

std::ifstream open_input(const std::string& path, const std::string& name, const Dialect& dialect,
                         std::uint64_t max_bytes) {
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    if (!ec && fs::is_directory(st)) raise_error(dialect, name, "$", "cannot open the file: it is a directory");
    errno = 0;
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        const int err = errno;
        raise_error(dialect, name, "$",
                    err != 0 ? fmt::format("cannot open the file: {}", detail::errno_text(err)) : "cannot open the file");
    }
    if (!ec && fs::is_regular_file(st)) {
        const std::uintmax_t size = fs::file_size(path, ec);
        if (!ec && size > max_bytes) too_large(dialect, name, max_bytes, fmt::format("{} bytes", size));
    }
    return in;
}

// --------------------------------------------------------------- documents

void check_depth(const Json& root, const std::string& name, const Dialect& dialect, int max_depth) {
    // The containers being walked, outermost first, each at its member being looked at.
    struct Frame {
        const Json* node;
        Json::const_iterator it;
        std::size_t index = 0;   // of `it`, in an array
        bool descended = false;  // the walk is below `it`
    };
    if (!root.is_structured()) return;
    std::vector<Frame> stack{{&root, root.cbegin()}};
    while (!stack.empty()) {
        Frame& f = stack.back();
        if (f.descended) {
            f.descended = false;
            ++f.it;
            ++f.index;
        }
        if (f.it == f.node->cend()) {
            stack.pop_back();
            continue;
        }
        const Json& child = *f.it;
        if (!child.is_structured()) {
            ++f.it;
            ++f.index;
            continue;
        }
        if (static_cast<int>(stack.size()) >= max_depth) {
            // The place as the parser names it: its first eight steps, then "...".
            constexpr std::size_t kSteps = 8;
            std::string path = "$";
            for (std::size_t i = 0; i < stack.size() && i < kSteps; ++i) {
                if (stack[i].node->is_array())
                    fmt::format_to(std::back_inserter(path), "[{}]", stack[i].index);
                else
                    path += path_key(stack[i].it.key());
            }
            if (stack.size() > kSteps) path += "...";
            nested_too_deep(dialect, name, path, max_depth);
        }
        f.descended = true;
        stack.push_back({&child, child.cbegin()});
    }
}

Document::Document(const Json& root, std::string file, const Dialect& dialect) : dialect_(&dialect) {
    check_root(root, file, dialect);
    check_depth(root, file, dialect);  // before the copy, which recurses once per level
    root_ = root;
    origin_[""] = std::move(file);
}

void Document::fail(const std::string& file, const std::string& path, const std::string& message) const {
    raise_error(*dialect_, file, path, message);
}

std::string Document::origin(std::string pointer) const {
    for (;;) {
        if (auto it = origin_.find(pointer); it != origin_.end()) return it->second;
        if (pointer.empty()) return "<document>";
        pointer.erase(pointer.rfind('/'));
    }
}

void Document::forget_below(const std::string& pointer) {
    const std::string prefix = pointer + "/";
    for (auto it = origin_.lower_bound(prefix); it != origin_.end() && it->first.rfind(prefix, 0) == 0;)
        it = origin_.erase(it);
}

// Merges `value` of `from` (with its origins) into `into`, at `pointer`: objects key by key,
// anything else replaces.
void Document::merge(Json& into, const Document& from, const Json& value, const std::string& pointer) {
    for (const auto& [k, v] : value.items()) {
        const std::string child = pointer + "/" + escape_key(k);
        auto it = into.find(k);
        if (it != into.end() && it->is_object() && v.is_object()) {
            merge(*it, from, v, child);
            continue;
        }
        into[k] = v;
        forget_below(child);
        origin_[child] = from.origin(child);
        const std::string prefix = child + "/";
        for (auto o = from.origin_.lower_bound(prefix); o != from.origin_.end() && o->first.rfind(prefix, 0) == 0; ++o)
            origin_[o->first] = o->second;
    }
}

// Parses `text` (the whole of file `name`) into a document, or fails with the place of the problem.
Json parse_text(const std::string& text, const std::string& name, const Dialect& dialect) {
    Json j;
    DomBuilder builder(j, kMaxDepth);
    if (Json::sax_parse(text, &builder)) return j;
    if (builder.too_deep) nested_too_deep(dialect, name, builder.too_deep_path, kMaxDepth);
    if (builder.error_id == 406) {
        // A number too large for a double (1e400): nlohmann names the number, not its place; find it.
        const std::string number = quoted_number(builder.error_what);
        const auto at = number.empty() ? std::string::npos : text.find(number);
        if (at == std::string::npos) raise_error(dialect, name, "$", "invalid JSON: a number is out of range");
        raise_error(dialect, name, "$",
                    fmt::format("invalid JSON at {}: the number {} is out of range", line_and_column(text, at + 1),
                                number));
    }
    raise_error(dialect, name, "$", fmt::format("invalid JSON at {}", line_and_column(text, builder.error_position)));
}

struct Loader {
    const Dialect& dialect;
    bool includes;
    std::vector<fs::path> stack;        // the files being read, outermost first
    std::map<fs::path, Document> done;  // the files read, by canonical path: each is read once
    std::size_t reads = 0, merges = 0;  // files read, documents merged (Document::LoadCounts)

    std::string read(const fs::path& path, const std::string& name) {
        ++reads;
        std::ifstream in = open_input(path.string(), name, dialect, kMaxFileBytes);
        LimitedInput limited(in.rdbuf(), kMaxFileBytes);
        std::string text;
        std::array<char, 1 << 16> block;
        for (;;) {
            const std::streamsize n = limited.sgetn(block.data(), block.size());
            if (n <= 0) break;
            text.append(block.data(), static_cast<std::size_t>(n));
        }
        if (limited.interrupted != 0) throw Interrupted(limited.interrupted);
        if (limited.over_limit) too_large(dialect, name, kMaxFileBytes, "more");
        if (!limited.failure.empty()) raise_error(dialect, name, "$", "cannot read the file: " + limited.failure);
        return text;
    }

    // The document of `path`, read once and kept.
    const Document& load(const fs::path& path) {
        const fs::path canonical = identity(path);
        if (const auto it = done.find(canonical); it != done.end()) return it->second;
        const std::string name = display(path);
        Json j = parse_text(read(path, name), name, dialect);
        check_root(j, name, dialect);
        Document doc;
        doc.dialect_ = &dialect;
        doc.origin_[""] = name;
        if (auto inc = j.find("include"); includes && inc != j.end()) {
            stack.push_back(canonical);
            std::vector<std::string> files;
            if (inc->is_string()) {
                files.push_back(inc->get<std::string>());
            } else if (inc->is_array()) {
                for (std::size_t i = 0; i < inc->size(); ++i) {
                    if (!(*inc)[i].is_string())
                        raise_error(dialect, name, fmt::format("$.include[{}]", i),
                                    fmt::format("expected a file name, found {}", describe((*inc)[i])));
                    files.push_back((*inc)[i].get<std::string>());
                }
            } else {
                raise_error(dialect, name, "$.include",
                            fmt::format("expected a file name or an array of them, found {}", describe(*inc)));
            }
            // Each file is looked at and read where it is first named, and merged where it is last named
            // only: merging a document again after others gives what merging it there alone gives (objects
            // merge key by key, anything else replaces, and so do the values' origins), and each merge
            // costs the document's size (an include listing a file a million times took minutes).
            std::vector<const Document*> subs(files.size());
            std::map<std::string, std::size_t> first;  // a name -> where it is first given
            for (std::size_t i = 0; i < files.size(); ++i) {
                if (const auto [it, fresh] = first.try_emplace(files[i], i); !fresh) {
                    subs[i] = subs[it->second];
                    continue;
                }
                const fs::path target = path.parent_path() / files[i];
                const std::string where = inc->is_array() ? fmt::format("$.include[{}]", i) : "$.include";
                std::error_code ec;  // where the file cannot be looked at, reading it says why
                if (!fs::exists(target, ec) && !ec)
                    raise_error(dialect, name, where,
                                fmt::format("included file \"{}\" not found (looked for {})", files[i], display(target)));
                if (std::find(stack.begin(), stack.end(), identity(target)) != stack.end())
                    raise_error(dialect, name, where,
                                fmt::format("\"{}\" includes itself (through {})", files[i], display(target)));
                if (static_cast<int>(stack.size()) >= kMaxIncludeDepth)
                    raise_error(dialect, name, where,
                                fmt::format("includes nested more than {} deep (\"{}\" includes files that include "
                                            "files, {} levels down from {})",
                                            kMaxIncludeDepth, files[i], stack.size(), display(stack.front())));
                subs[i] = &load(target);
            }
            std::vector<bool> last(subs.size());
            std::set<const Document*> named_later;
            for (std::size_t i = subs.size(); i-- > 0;) last[i] = named_later.insert(subs[i]).second;
            for (std::size_t i = 0; i < subs.size(); ++i)
                if (last[i]) {
                    doc.merge(doc.root_, *subs[i], subs[i]->root_, "");
                    ++merges;
                }
            j.erase(inc);
            stack.pop_back();
        }
        Document own;
        own.root_ = std::move(j);
        own.origin_[""] = name;
        doc.merge(doc.root_, own, own.root_, "");
        ++merges;
        return done.emplace(canonical, std::move(doc)).first->second;
    }
};

Document Document::load(const std::string& path, const Dialect& dialect, bool includes) {
    Loader loader{dialect, includes, {}, {}, 0, 0};
    (void)loader.load(path);
    Document doc = std::move(loader.done.at(identity(path)));
    doc.counts_ = {loader.reads, loader.merges};
    return doc;
}

Document Document::read(std::istream& in, const std::string& name, const Dialect& dialect, std::uint64_t max_bytes) {
    Document doc;
    doc.dialect_ = &dialect;
    doc.origin_[""] = name;
    LimitedInput limited(in.rdbuf(), max_bytes);
    std::istream limited_in(&limited);
    DomBuilder builder(doc.root_, kMaxDepth);
    const bool parsed = Json::sax_parse(limited_in, &builder);
    if (limited.interrupted != 0) throw Interrupted(limited.interrupted);
    if (!parsed) {
        if (limited.over_limit) too_large(dialect, name, max_bytes, "more");
        if (!limited.failure.empty()) doc.fail(name, "$", "cannot read the file: " + limited.failure);
        if (builder.too_deep) nested_too_deep(dialect, name, builder.too_deep_path, kMaxDepth);
        if (builder.error_id == 406)
            doc.fail(name, "$",
                     fmt::format("invalid JSON: the number {} is out of range", quoted_number(builder.error_what)));
        // The text is gone by now: the place is the one nlohmann's message gives.
        std::size_t line = 0, column = 0;
        const std::string& what = builder.error_what;
        const auto at = what.find("at line ");
        const std::string place = at != std::string::npos &&
                                          std::sscanf(what.c_str() + at, "at line %zu, column %zu", &line, &column) == 2
                                      ? fmt::format("line {}, column {}", line, column)
                                      : fmt::format("byte {}", builder.error_position);
        doc.fail(name, "$", fmt::format("invalid JSON at {}", place));
    }
    check_root(doc.root_, name, dialect);
    return doc;
}

namespace {

// Where a parse of a stream stopped, as nlohmann's SAX parser reports it.
struct StreamParseError {
    std::size_t position = 0;
    int id = 0;
    std::string what;
};

// After a parse of a limited stream that stopped: an interrupt request, the size limit, a read
// failure or a syntax error, said as Document::read says them.
[[noreturn]] void stream_parse_failed(const LimitedInput& limited, const StreamParseError& error,
                                      const Dialect& dialect, const std::string& name, std::uint64_t max_bytes) {
    if (limited.interrupted != 0) throw Interrupted(limited.interrupted);
    if (limited.over_limit) too_large(dialect, name, max_bytes, "more");
    if (!limited.failure.empty()) raise_error(dialect, name, "$", "cannot read the file: " + limited.failure);
    if (error.id == 406)
        raise_error(dialect, name, "$",
                    fmt::format("invalid JSON: the number {} is out of range", quoted_number(error.what)));
    // The text is gone by now: the place is the one nlohmann's message gives.
    std::size_t line = 0, column = 0;
    const std::string& what = error.what;
    const auto at = what.find("at line ");
    const std::string place = at != std::string::npos &&
                                      std::sscanf(what.c_str() + at, "at line %zu, column %zu", &line, &column) == 2
                                  ? fmt::format("line {}, column {}", line, column)
                                  : fmt::format("byte {}", error.position);
    raise_error(dialect, name, "$", fmt::format("invalid JSON at {}", place));
}

// Hands a handler's SAX events on and keeps the syntax error, if any.
class SaxRelay final : public Json::json_sax_t {
public:
    explicit SaxRelay(Json::json_sax_t& to) : to_(to) {}
    StreamParseError error;
    bool failed = false;

    bool null() override { return to_.null(); }
    bool boolean(bool v) override { return to_.boolean(v); }
    bool number_integer(number_integer_t v) override { return to_.number_integer(v); }
    bool number_unsigned(number_unsigned_t v) override { return to_.number_unsigned(v); }
    bool number_float(number_float_t v, const string_t& s) override { return to_.number_float(v, s); }
    bool string(string_t& v) override { return to_.string(v); }
    bool binary(binary_t& v) override { return to_.binary(v); }
    bool start_object(std::size_t n) override { return to_.start_object(n); }
    bool key(string_t& k) override { return to_.key(k); }
    bool end_object() override { return to_.end_object(); }
    bool start_array(std::size_t n) override { return to_.start_array(n); }
    bool end_array() override { return to_.end_array(); }
    bool parse_error(std::size_t position, const std::string&, const Json::exception& e) override {
        error = {position, e.id, e.what()};
        failed = true;
        return false;
    }

private:
    Json::json_sax_t& to_;
};

}  // namespace

void sax_read(std::istream& in, const std::string& name, const Dialect& dialect, Json::json_sax_t& handler,
              std::uint64_t max_bytes) {
    LimitedInput limited(in.rdbuf(), max_bytes);
    std::istream limited_in(&limited);
    SaxRelay relay(handler);
    const bool parsed = Json::sax_parse(limited_in, &relay);
    if (limited.interrupted != 0) throw Interrupted(limited.interrupted);
    // A handler that stops the parse without a syntax error has said why itself (it throws).
    if (!parsed && (relay.failed || limited.over_limit || !limited.failure.empty()))
        stream_parse_failed(limited, relay.error, dialect, name, max_bytes);
}

void Document::set(const std::string& dotted, const std::string& text) {
    const std::string who = fmt::format("--set {}={}", shorten(dotted), shorten(text));
    if (!valid_utf8(dotted) || !valid_utf8(text)) fail(who, "$", "the text is not UTF-8");
    const auto parts = split_path(dotted);
    // The value sits below the root and one object per part of the path.
    if (static_cast<int>(parts.size()) >= kMaxDepth)
        fail(who, "$", fmt::format("a path of {} parts is deeper than dtsim reads (at most {} levels)", parts.size(),
                                   kMaxDepth - 1));
    Json* node = &root_;
    std::string pointer, path = "$";
    for (const auto& part : parts) {
        if (part.empty()) fail(who, path, fmt::format("empty key in \"{}\"", shorten(dotted)));
        if (node->is_null()) *node = Json::object();  // a section no file has yet
        if (!node->is_object())
            fail(who, path, fmt::format("cannot set \"{}\" inside {}", shorten(part), describe(*node)));
        pointer += "/" + escape_key(part);
        path += path_key(part);
        node = &(*node)[part];
    }
    Json value;
    DomBuilder builder(value, kMaxDepth - static_cast<int>(parts.size()));
    if (!Json::sax_parse(text, &builder)) {
        if (builder.too_deep)
            fail(who, path + builder.too_deep_path.substr(1),
                 fmt::format("arrays and objects nested more than {} deep (dtsim reads at most {} levels)", kMaxDepth,
                             kMaxDepth));
        value = text;
    }
    *node = std::move(value);
    forget_below(pointer);
    origin_[pointer] = who;
}

Value Document::root() const { return Value(*this, root_); }

// ------------------------------------------------------------------ values

// A place in the document: a key of an object or an index of an array, below `up`.
struct Value::Step {
    std::shared_ptr<const Step> up;
    std::string_view key;
    std::size_t index;
    bool is_index;
};

Value::Value(const Value& parent, const Json& j, std::string_view key)
    : doc_(parent.doc_), j_(&j), up_(parent.step()), key_(key), kind_(Kind::key) {}

Value::Value(const Value& parent, const Json& j, std::size_t index)
    : doc_(parent.doc_), j_(&j), up_(parent.step()), index_(index), kind_(Kind::index) {}

std::shared_ptr<const Value::Step> Value::step() const {
    if (kind_ == Kind::root) return nullptr;
    if (!self_) self_ = std::make_shared<const Step>(Step{up_, key_, index_, kind_ == Kind::index});
    return self_;
}

std::string Value::path() const {
    std::vector<const Step*> steps;
    const std::shared_ptr<const Step> own = step();
    for (const Step* s = own.get(); s; s = s->up.get()) steps.push_back(s);
    std::string out = "$";
    for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
        if ((*it)->is_index)
            fmt::format_to(std::back_inserter(out), "[{}]", (*it)->index);
        else
            out += path_key((*it)->key);
    }
    return out;
}

std::string Value::pointer() const {
    std::vector<const Step*> steps;
    const std::shared_ptr<const Step> own = step();
    for (const Step* s = own.get(); s; s = s->up.get()) steps.push_back(s);
    std::string out;
    for (auto it = steps.rbegin(); it != steps.rend(); ++it)
        out += "/" + ((*it)->is_index ? std::to_string((*it)->index) : escape_key((*it)->key));
    return out;
}

std::string Value::file() const { return doc_->origin(pointer()); }

void Value::fail(const std::string& message) const { doc_->fail(file(), path(), message); }

void Value::expected(std::string_view what) const { fail(fmt::format("expected {}, found {}", what, describe(*j_))); }

bool Value::has(std::string_view key) const { return j_->is_object() && j_->find(key) != j_->end(); }

Value Value::operator[](std::string_view key) const {
    if (!j_->is_object()) expected("an object");
    const auto it = j_->find(key);
    if (it == j_->end()) fail(fmt::format("missing {} \"{}\"", doc_->dialect().member, key));
    return Value(*this, *it, it.key());
}

std::optional<Value> Value::find(std::string_view key) const {
    if (!j_->is_object()) return std::nullopt;
    const auto it = j_->find(key);
    if (it == j_->end()) return std::nullopt;
    return Value(*this, *it, it.key());
}

void Value::keys(std::initializer_list<std::string_view> allowed) const {
    keys(std::span<const std::string_view>(allowed.begin(), allowed.size()));
}

void Value::keys(std::span<const std::string_view> allowed) const {
    if (!j_->is_object()) expected("an object");
    for (auto it = j_->begin(); it != j_->end(); ++it) {
        const std::string& k = it.key();
        if (documentation(k) || std::find(allowed.begin(), allowed.end(), k) != allowed.end()) continue;
        unknown_key(k, allowed);
    }
}

void Value::unknown_key(std::string_view key, std::span<const std::string_view> allowed) const {
    const auto it = j_->is_object() ? j_->find(key) : j_->end();
    const Value bad = it != j_->end() ? Value(*this, *it, it.key()) : *this;
    const std::string_view member = doc_->dialect().member;
    if (const auto hint = nearest(key, allowed); !hint.empty())
        bad.fail(fmt::format("unknown {} \"{}\"; did you mean \"{}\"?", member, shorten(key), hint));
    std::string list;
    for (auto a : allowed) list += fmt::format("{}{}", list.empty() ? "" : ", ", a);
    bad.fail(fmt::format("unknown {} \"{}\"; the {}s here are: {}", member, shorten(key), member, list));
}

std::vector<std::pair<std::string_view, Value>> Value::members() const {
    if (!j_->is_object()) expected("an object");
    std::vector<std::pair<std::string_view, Value>> out;
    for (auto it = j_->begin(); it != j_->end(); ++it)
        if (!documentation(it.key())) out.emplace_back(it.key(), Value(*this, *it, it.key()));
    return out;
}

std::size_t Value::size() const {
    if (!j_->is_array()) expected("an array");
    return j_->size();
}

Value Value::at(std::size_t i) const {
    if (!j_->is_array()) expected("an array");
    if (i >= j_->size()) fail(fmt::format("missing element [{}]", i));
    return Value(*this, (*j_)[i], i);
}

int Value::integer(int min) const {
    const Json& j = *j_;
    const bool ok = j.is_number_integer() || (j.is_number_float() && std::floor(j.get<double>()) == j.get<double>());
    if (!ok || j.get<double>() < min || j.get<double>() > INT_MAX)
        expected(min == 1 ? "a positive integer" : min == 0 ? "an integer >= 0" : fmt::format("an integer >= {}", min));
    return static_cast<int>(j.get<double>());
}

std::int64_t Value::int64() const {
    const Json& j = *j_;
    if (!j.is_number_integer() || (j.is_number_unsigned() && j.get<std::uint64_t>() > INT64_MAX))
        expected("an integer");
    return j.get<std::int64_t>();
}

double Value::real(const Range& range) const {
    // The words for a value of the wrong type or sign: the range's sign, as the checks before
    // ranges said it.
    const bool fraction = range.lo == 0 && range.lo_open && range.hi == 1 && !range.hi_open;
    const auto sign = [&]() -> std::string {
        if (fraction) return "a number in (0, 1]";
        if (range.lo > 0 || (range.lo == 0 && range.lo_open)) return "a positive number";
        if (range.lo == 0) return "a number >= 0";
        return "a number";
    };
    if (!j_->is_number()) expected(sign());
    const double v = j_->get<double>();
    if (!range.right_sign(v) || (fraction && !range.contains(v))) expected(sign());
    if (!range.contains(v)) expected(range.describe());
    return v;
}

double Value::fraction() const { return real({"a fraction", "", 0, 1, true, false}); }

bool Value::boolean() const {
    if (!j_->is_boolean()) expected("true or false");
    return j_->get<bool>();
}

const std::string& Value::string() const {
    if (!j_->is_string()) expected("a string");
    return j_->get_ref<const std::string&>();
}

std::string Value::choice(std::initializer_list<std::string_view> choices) const {
    return choice(std::span<const std::string_view>(choices.begin(), choices.size()));
}

std::string Value::choice(std::span<const std::string_view> choices) const {
    if (!j_->is_string()) expected(alternatives(choices));
    const std::string& s = j_->get_ref<const std::string&>();
    if (std::find(choices.begin(), choices.end(), s) != choices.end()) return s;
    const auto hint = nearest(s, choices);
    fail(fmt::format("expected {}, found \"{}\"{}", alternatives(choices), shorten(s),
                     hint.empty() ? "" : fmt::format(" (did you mean \"{}\"?)", hint)));
}

}  // namespace dtsim::json_reader

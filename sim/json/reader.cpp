#include "json/reader.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <istream>
#include <iterator>
#include <sstream>
#include <stdexcept>

namespace dtsim::json_reader {

namespace fs = std::filesystem;

// ------------------------------------------------------------------ words

std::string describe(const Json& j) {
    switch (j.type()) {
        case Json::value_t::null: return "null";
        case Json::value_t::boolean: return j.get<bool>() ? "true" : "false";
        case Json::value_t::string: return fmt::format("\"{}\" (a string)", j.get_ref<const std::string&>());
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

std::string_view nearest(std::string_view word, std::span<const std::string_view> candidates) {
    std::string_view best;
    int best_d = INT_MAX;
    for (auto c : candidates) {
        const int d = edit_distance(word, c);
        if (d < best_d) best_d = d, best = c;
    }
    return best_d <= std::max<int>(2, static_cast<int>(word.size()) / 3) ? best : std::string_view{};
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

}  // namespace

// --------------------------------------------------------------- documents

Document::Document(Json root, std::string file, const Dialect& dialect) : dialect_(&dialect) {
    check_root(root, file, dialect);
    root_ = std::move(root);
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

struct Loader {
    const Dialect& dialect;
    bool includes;
    std::vector<fs::path> stack;  // the files being read, outermost first

    Json parse(const fs::path& path, const std::string& name) {
        std::ifstream in(path, std::ios::binary);
        if (!in) raise_error(dialect, name, "$", "cannot open the file");
        std::stringstream text;
        text << in.rdbuf();
        const std::string s = text.str();
        try {
            return Json::parse(s);
        } catch (const Json::parse_error& e) {
            raise_error(dialect, name, "$", fmt::format("invalid JSON at {}", line_and_column(s, e.byte)));
        } catch (const Json::out_of_range& e) {
            // A number too large for a double (1e400): nlohmann names the number, not its place; find it.
            const std::string number = quoted_number(e.what());
            const auto at = number.empty() ? std::string::npos : s.find(number);
            if (at == std::string::npos) raise_error(dialect, name, "$", "invalid JSON: a number is out of range");
            raise_error(dialect, name, "$", fmt::format("invalid JSON at {}: the number {} is out of range",
                                                 line_and_column(s, at + 1), number));
        }
    }

    Document load(const fs::path& path) {
        const std::string name = display(path);
        Json j = parse(path, name);
        check_root(j, name, dialect);
        Document doc;
        doc.dialect_ = &dialect;
        doc.origin_[""] = name;
        if (auto inc = j.find("include"); includes && inc != j.end()) {
            stack.push_back(fs::weakly_canonical(path));
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
            for (std::size_t i = 0; i < files.size(); ++i) {
                const fs::path target = path.parent_path() / files[i];
                const std::string where = inc->is_array() ? fmt::format("$.include[{}]", i) : "$.include";
                if (!fs::exists(target))
                    raise_error(dialect, name, where, fmt::format("included file \"{}\" not found (looked for {})", files[i],
                                                           display(target)));
                if (std::find(stack.begin(), stack.end(), fs::weakly_canonical(target)) != stack.end())
                    raise_error(dialect, name, where, fmt::format("\"{}\" includes itself (through {})", files[i],
                                                           display(target)));
                const Document sub = load(target);
                doc.merge(doc.root_, sub, sub.root_, "");
            }
            j.erase(inc);
            stack.pop_back();
        }
        Document own;
        own.root_ = std::move(j);
        own.origin_[""] = name;
        doc.merge(doc.root_, own, own.root_, "");
        return doc;
    }
};

Document Document::load(const std::string& path, const Dialect& dialect, bool includes) {
    Loader loader{dialect, includes, {}};
    return loader.load(path);
}

Document Document::read(std::istream& in, const std::string& name, const Dialect& dialect) {
    Document doc;
    doc.dialect_ = &dialect;
    doc.origin_[""] = name;
    try {
        doc.root_ = Json::parse(in);
    } catch (const Json::parse_error& e) {
        // The text is gone by now: the place is the one nlohmann's message gives.
        std::size_t line = 0, column = 0;
        const std::string what = e.what();
        const auto at = what.find("at line ");
        const std::string place = at != std::string::npos &&
                                          std::sscanf(what.c_str() + at, "at line %zu, column %zu", &line, &column) == 2
                                      ? fmt::format("line {}, column {}", line, column)
                                      : fmt::format("byte {}", e.byte);
        doc.fail(name, "$", fmt::format("invalid JSON at {}", place));
    } catch (const Json::out_of_range& e) {
        doc.fail(name, "$", fmt::format("invalid JSON: the number {} is out of range", quoted_number(e.what())));
    } catch (const Json::exception& e) {
        doc.fail(name, "$", fmt::format("invalid JSON: {}", e.what()));
    }
    check_root(doc.root_, name, dialect);
    return doc;
}

void Document::set(const std::string& dotted, const std::string& text) {
    const std::string who = fmt::format("--set {}={}", dotted, text);
    const auto parts = split_path(dotted);
    Json* node = &root_;
    std::string pointer, path = "$";
    for (const auto& part : parts) {
        if (part.empty()) fail(who, path, fmt::format("empty key in \"{}\"", dotted));
        if (node->is_null()) *node = Json::object();  // a section no file has yet
        if (!node->is_object()) fail(who, path, fmt::format("cannot set \"{}\" inside {}", part, describe(*node)));
        pointer += "/" + escape_key(part);
        path += "." + part;
        node = &(*node)[part];
    }
    Json value = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (value.is_discarded()) value = text;
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
            out.append(".").append((*it)->key);
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
        bad.fail(fmt::format("unknown {} \"{}\"; did you mean \"{}\"?", member, key, hint));
    std::string list;
    for (auto a : allowed) list += fmt::format("{}{}", list.empty() ? "" : ", ", a);
    bad.fail(fmt::format("unknown {} \"{}\"; the {}s here are: {}", member, key, member, list));
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

double Value::number() const {
    if (!j_->is_number()) expected("a number");
    return j_->get<double>();
}

double Value::positive() const {
    if (!j_->is_number() || !(j_->get<double>() > 0)) expected("a positive number");
    return j_->get<double>();
}

double Value::non_negative() const {
    if (!j_->is_number() || !(j_->get<double>() >= 0)) expected("a number >= 0");
    return j_->get<double>();
}

double Value::fraction() const {
    if (!j_->is_number() || !(j_->get<double>() > 0) || j_->get<double>() > 1) expected("a number in (0, 1]");
    return j_->get<double>();
}

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
    fail(fmt::format("expected {}, found \"{}\"{}", alternatives(choices), s,
                     hint.empty() ? "" : fmt::format(" (did you mean \"{}\"?)", hint)));
}

}  // namespace dtsim::json_reader

// The JSON reader of configs, ground-truth files and traces (private to dtsim's
// libraries; not installed).
//
// A Document is a JSON object read from a file (with its includes merged, for
// configs), from a stream (a trace, parsed as it is read) or from memory, and
// changed by `--set` overrides; it remembers the file (or the --set) each value
// came from. A Value is a place in it: reading a Value checks its type and range,
// and a bad value fails with the file it came from, its JSON path ($.a.b[2]) and
// what was expected against what was found. Each kind of file has a Dialect: the
// exception its errors are (ConfigError, TraceFormatError) and their wording.
//
// What it takes in is bounded (the limits below): JSON is parsed by a builder that counts
// the nesting as it goes, so a document too deep is an error at its JSON path before any
// recursive code (nlohmann's copy and comparison, the merge of includes) sees it; a file
// too large is refused before it is read, a stream when it reaches the limit.
#pragma once

#include "json/range.hpp"

#include <nlohmann/json.hpp>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <initializer_list>
#include <iosfwd>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dtsim::json_reader {

using Json = nlohmann::json;

// Arrays and objects nested in one another: dtsim's own configs, data and traces nest at most
// 8 deep (the deepest, configs/clusters/p5-h100-efa.json, 8).
inline constexpr int kMaxDepth = 256;
// A config, cluster or ground-truth file, each included file on its own: dtsim's own are under
// 100 KB.
inline constexpr std::uint64_t kMaxFileBytes = std::uint64_t{64} << 20;
// A trace: dtsim's own reach about a gigabyte (`dtsim puzzle ddp --layers 256 --ranks 4096
// --batches 4096` writes 430 MB). A trace is read with sax_read, into its events as they are
// parsed: memory holds the events (64 bytes each), not the text nor a document of it.
inline constexpr std::uint64_t kMaxTraceBytes = std::uint64_t{8} << 30;
// Files including files, the outermost counted: dtsim's own configs nest 3 deep.
inline constexpr int kMaxIncludeDepth = 64;

// How one kind of file reports a bad value.
struct Dialect {
    // Throws this kind of file's error for a bad value: the file (or "--set a.b=v") the
    // value came from, its JSON path ("$.strategy.tp") and what is wrong. Must not return.
    void (*raise)(const std::string& file, const std::string& path, const std::string& message);
    // What a member of an object is called in messages: "missing key \"x\"" (configs),
    // "missing field \"x\"" (traces).
    std::string_view member = "key";
};

class Value;

// Opens a file for reading, or fails with the dialect's error naming it and the system's reason
// ("FILE: $: cannot open the file: No such file or directory", "...: it is a directory"); a
// regular file larger than `max_bytes` is refused before it is read. `name` is the file as
// messages show it.
std::ifstream open_input(const std::string& path, const std::string& name, const Dialect& dialect,
                         std::uint64_t max_bytes);

class Document {
public:
    // A document already in memory (an object), named `file` in errors; it is checked against
    // kMaxDepth (check_depth) before it is copied.
    Document(const Json& root, std::string file, const Dialect& dialect);

    // Reads a file of at most kMaxFileBytes. With `includes`, its "include" (a file name or an
    // array of them, relative to the including file) is merged first, in order, and the file's
    // own keys override those (objects merge key by key); included files may include others,
    // not themselves, at most kMaxIncludeDepth deep. Each file is read once, however many
    // files include it.
    static Document load(const std::string& path, const Dialect& dialect, bool includes = false);
    // Reads a stream of at most `max_bytes`, parsing as it reads (a trace may be larger than
    // what memory holds twice).
    static Document read(std::istream& in, const std::string& name, const Dialect& dialect,
                         std::uint64_t max_bytes = kMaxTraceBytes);

    // `--set`: puts `value` at the dotted `path` ("strategy.tp" or "$.strategy.tp"), creating
    // the objects on the way; the value is JSON where it parses as JSON ("4", "true", "[1, 2]")
    // and a string otherwise ("full"). Errors, and later errors about the value, name
    // "--set PATH=VALUE". The text must be UTF-8, and the path and value together no deeper
    // than kMaxDepth.
    void set(const std::string& path, const std::string& value);

    [[nodiscard]] Value root() const;
    [[nodiscard]] const Json& json() const { return root_; }
    [[nodiscard]] const Dialect& dialect() const { return *dialect_; }
    // The file (or --set) the value at a JSON pointer ("/strategy/tp") came from.
    [[nodiscard]] std::string origin(std::string pointer) const;
    // What load() did with includes: the files it read (each once) and the documents it merged (each
    // file's own keys, and each include where it is last listed), for the tests of that rule.
    struct LoadCounts {
        std::size_t files_read = 0;
        std::size_t merges = 0;
    };
    [[nodiscard]] const LoadCounts& load_counts() const { return counts_; }

    // Throws the dialect's error.
    [[noreturn]] void fail(const std::string& file, const std::string& path, const std::string& message) const;

private:
    Document() = default;
    friend struct Loader;
    void forget_below(const std::string& pointer);
    void merge(Json& into, const Document& from, const Json& value, const std::string& pointer);

    Json root_ = Json::object();
    std::map<std::string, std::string> origin_;  // JSON pointer -> file; a value without one is its parent's
    const Dialect* dialect_ = nullptr;
    LoadCounts counts_;
};

// A value of a Document at a JSON path. Values are cheap to copy and must not outlive
// their Document; the path is put together only when an error needs it.
class Value {
public:
    [[nodiscard]] const Json& json() const { return *j_; }
    [[nodiscard]] std::string path() const;     // "$.ranks[0].events[1]"
    [[nodiscard]] std::string pointer() const;  // "/ranks/0/events/1"
    [[nodiscard]] std::string file() const;     // the file (or --set) the value came from

    // "FILE: PATH: message", as the dialect says it.
    [[noreturn]] void fail(const std::string& message) const;
    // "expected WHAT, found <the value>".
    [[noreturn]] void expected(std::string_view what) const;

    // ---- objects
    [[nodiscard]] bool is_object() const { return j_->is_object(); }
    [[nodiscard]] bool has(std::string_view key) const;  // false where this is not an object
    // The member `key`; fails when this is not an object or has no such member.
    [[nodiscard]] Value operator[](std::string_view key) const;
    // The member `key`, if this is an object that has it.
    [[nodiscard]] std::optional<Value> find(std::string_view key) const;
    // Fails unless this is an object whose keys are all `allowed`, or "source" and "note"
    // (citations and remarks, allowed everywhere); an unknown key gets a did-you-mean.
    void keys(std::initializer_list<std::string_view> allowed) const;
    void keys(std::span<const std::string_view> allowed) const;
    // Fails at the member `key`: "unknown key \"k\"; did you mean \"x\"?" (the nearest of
    // `allowed`) or "...; the keys here are: a, b".
    [[noreturn]] void unknown_key(std::string_view key, std::span<const std::string_view> allowed) const;
    // The members of this object, in key order, but for "source" and "note".
    [[nodiscard]] std::vector<std::pair<std::string_view, Value>> members() const;

    // ---- arrays
    [[nodiscard]] bool is_array() const { return j_->is_array(); }
    [[nodiscard]] std::size_t size() const;       // fails where this is not an array
    [[nodiscard]] Value at(std::size_t i) const;  // fails where there is no element i

    // ---- typed reads: each fails with what it expected and what it found
    [[nodiscard]] int integer(int min = INT_MIN) const;  // an int >= min (2.0 counts as 2)
    [[nodiscard]] std::int64_t int64() const;            // an integer (not 2.0) that fits in 64 bits
    // Every real number a file gives is read here: a number within `range` (range.hpp). A value
    // that is not a number, or not of the range's sign, is "expected a positive number" ("a
    // number >= 0", "a number in (0, 1]", "a number"); one of the right sign outside the range
    // is "expected a bandwidth in [0.001, 1e6) GB/s".
    [[nodiscard]] double real(const Range& range) const;
    [[nodiscard]] double fraction() const;  // in (0, 1]
    [[nodiscard]] bool boolean() const;
    [[nodiscard]] const std::string& string() const;
    // One of `choices` (a string); a near miss gets a did-you-mean.
    [[nodiscard]] std::string choice(std::initializer_list<std::string_view> choices) const;
    [[nodiscard]] std::string choice(std::span<const std::string_view> choices) const;

private:
    friend class Document;
    struct Step;
    enum class Kind : unsigned char { root, key, index };
    Value(const Document& doc, const Json& j) : doc_(&doc), j_(&j) {}
    Value(const Value& parent, const Json& j, std::string_view key);
    Value(const Value& parent, const Json& j, std::size_t index);
    [[nodiscard]] std::shared_ptr<const Step> step() const;  // this value's place, shared by its children

    const Document* doc_;
    const Json* j_;
    std::shared_ptr<const Step> up_;  // the parent's place; null for the root and its members
    std::string_view key_;            // the last step: a key of the document (kind key)...
    std::size_t index_ = 0;           // ...or an index (kind index)
    Kind kind_ = Kind::root;
    mutable std::shared_ptr<const Step> self_;
};

// Reads a stream of at most `max_bytes` as Document::read does (the same limits, interrupt
// requests and syntax errors, said the same way), handing each value to `handler` as it is
// parsed instead of building a document: what the handler keeps is all that is kept. The handler
// counts the nesting itself; to stop on a bad value it throws the dialect's error.
void sax_read(std::istream& in, const std::string& name, const Dialect& dialect, Json::json_sax_t& handler,
              std::uint64_t max_bytes = kMaxTraceBytes);

// Parses `text`, the whole of file `name`, as Document::load does (without includes): arrays and
// objects nested at most kMaxDepth deep; a syntax error, or a number too large for a double, named
// at its line and column. Fails with the dialect's error.
Json parse_text(const std::string& text, const std::string& name, const Dialect& dialect);

// Fails with the dialect's error where `j`, a value built in memory, nests arrays and objects more
// than `max_depth` deep (the document itself the first level), naming the place as the parser does:
// "FILE: $.a[0][1]...: arrays and objects nested more than 256 deep (...)". It does not recurse:
// it is what makes a value built elsewhere safe to copy, compare and merge.
void check_depth(const Json& j, const std::string& name, const Dialect& dialect, int max_depth = kMaxDepth);

// A JSON value as a message shows what was found: "4", "\"x\" (a string)", "an object"; a
// long string shortened.
std::string describe(const Json& j);
// Text a message quotes, at most `max` bytes of it: "abc... (50000 bytes)" where it is longer.
std::string shorten(std::string_view text, std::size_t max = 64);
// Levenshtein distance.
int edit_distance(std::string_view a, std::string_view b);
// The candidate nearest to `word` if it is near enough to be a typo of it (at most
// max(2, length / 3) edits), else "". A candidate whose length differs by more than that is not
// compared letter by letter; `compared`, if given, counts the candidates that were.
std::string_view nearest(std::string_view word, std::span<const std::string_view> candidates,
                         std::size_t* compared = nullptr);

}  // namespace dtsim::json_reader

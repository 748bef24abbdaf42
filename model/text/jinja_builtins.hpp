#pragma once
// Internal: the filter and test tables and helpers shared by jinja_filters*.cpp and
// jinja_tests.cpp.

#include <string_view>
#include <vector>

#include "model/text/jinja_renderer.hpp"

namespace brigade::model::text::jinja {

using FilterFn = Value (*)(Renderer&, const Value&, CallArgs&);
using TestFn = bool (*)(Renderer&, const Value&, CallArgs&);

struct FilterEntry {
    std::string_view name;
    FilterFn fn;
};
struct TestEntry {
    std::string_view name;
    TestFn fn;
};

// Sequence filters (jinja_filters_seq.cpp), looked up by the main table in jinja_filters.cpp.
const FilterFn* find_sequence_filter(std::string_view name);
std::vector<std::string_view> sequence_filter_names();
// Tests (jinja_tests.cpp).
const TestFn* find_test(std::string_view name);

// jinja2's `make_attrgetter`: "a.b.0" looks up `a`, then `b`, then index 0, each with
// getitem semantics.
std::vector<Value> attribute_path(const Value& attribute);
Value get_path(Renderer& r, Value item, const std::vector<Value>& path);

// `ignore_case` postprocessing used by sort/unique/min/max/dictsort.
Value fold_case(const Value& v);

// Python `sorted(...)` ordering with TypeError on unorderable mixes.
bool sort_less(const Value& a, const Value& b);

// Raises a TypeError naming the filter if the argument is missing.
const Value& required_arg(const CallArgs& args, std::size_t index, std::string_view name,
                          std::string_view filter);
bool bool_arg(const CallArgs& args, std::size_t index, std::string_view name, bool fallback);

}  // namespace brigade::model::text::jinja

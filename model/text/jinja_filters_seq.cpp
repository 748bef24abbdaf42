// Filters on sequences and mappings. As in jinja2, `select`, `reject`, `selectattr`,
// `rejectattr`, `map`, `unique`, `items` and `batch` return generators: always truthy, no
// length, not JSON-serialisable, consumed by one iteration (`| list` materialises them).

#include <algorithm>
#include <array>

#include "model/text/jinja_builtins.hpp"
#include "model/text/jinja_strings.hpp"

namespace brigade::model::text::jinja {

std::vector<Value> attribute_path(const Value& attribute) {
    std::vector<Value> parts;
    if (attribute.is_none() || attribute.is_undefined()) return parts;
    if (!attribute.is_string()) {
        parts.push_back(attribute);
        return parts;
    }
    for (auto& piece : py_split(attribute.str(), std::string_view("."), -1)) {
        bool digits = !piece.empty() && std::all_of(piece.begin(), piece.end(), ::isdigit);
        if (digits && piece.size() < 18) {
            parts.emplace_back(static_cast<std::int64_t>(std::stoll(piece)));
        } else {
            parts.emplace_back(std::move(piece));
        }
    }
    return parts;
}

Value get_path(Renderer& r, Value item, const std::vector<Value>& path) {
    for (const auto& part : path) item = r.get_item(item, part);
    return item;
}

Value fold_case(const Value& v) { return v.is_string() ? Value(py_lower(v.str())) : v; }

bool sort_less(const Value& a, const Value& b) { return less_than(a, b); }

namespace {

Value generator(std::vector<Value> items) {
    return Value::list(std::move(items), SeqFlavor::generator);
}

Value f_items(Renderer&, const Value& v, CallArgs&) {
    if (v.is_undefined()) return generator({});
    if (!v.is_mapping()) type_error("Can only get item pairs from a mapping.");
    std::vector<Value> out;
    for (const auto& [k, val] : v.map().items) out.push_back(Value::tuple({k, val}));
    return generator(std::move(out));
}

Value f_list(Renderer&, const Value& v, CallArgs&) { return Value::list(iterate(v)); }

Value f_join(Renderer& r, const Value& v, CallArgs& args) {
    const Value* sep = args.get(0, "d");
    std::string d = sep ? to_str(*sep) : "";
    const Value* attribute = args.get(1, "attribute");
    std::vector<Value> path = attribute ? attribute_path(*attribute) : std::vector<Value>{};
    std::string out;
    bool first = true;
    for (const auto& item : iterate(v)) {
        if (!first) out += d;
        first = false;
        append_str(out, path.empty() ? item : get_path(r, item, path));
        r.check_output_size(out.size());
    }
    return Value(std::move(out));
}

Value f_first(Renderer&, const Value& v, CallArgs&) {
    auto items = iterate(v);
    if (items.empty()) return Value::undefined("No first item, sequence was empty.");
    return items.front();
}

Value f_last(Renderer&, const Value& v, CallArgs&) {
    if (v.is_generator()) type_error("'generator' object is not reversible");
    auto items = iterate(v);
    if (items.empty()) return Value::undefined("No last item, sequence was empty.");
    return items.back();
}

Value f_reverse(Renderer&, const Value& v, CallArgs&) {
    if (v.is_string()) {
        auto cps = split_code_points(v.str());
        std::string out;
        for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
        return Value(std::move(out));
    }
    if (v.is_generator()) {
        auto items = iterate(v);
        std::reverse(items.begin(), items.end());
        return Value::list(std::move(items));
    }
    auto items = iterate(v);
    std::reverse(items.begin(), items.end());
    return generator(std::move(items));
}

// select/reject (on the item) and selectattr/rejectattr (on an attribute of the item).
Value select_impl(Renderer& r, const Value& v, CallArgs& args, bool on_attr, bool keep_matching) {
    std::size_t next = 0;
    std::vector<Value> path;
    if (on_attr) {
        if (args.positional.empty()) type_error("Missing parameter for attribute name");
        path = attribute_path(args.positional[0]);
        next = 1;
    }
    std::string test;
    CallArgs test_args;
    if (next < args.positional.size()) {
        test = to_str(args.positional[next]);
        test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next) + 1,
                                    args.positional.end());
        test_args.keyword = args.keyword;
    }
    std::vector<Value> out;
    if (!v.truthy()) return generator({});  // jinja2 skips falsy input (None) silently
    for (const auto& item : iterate(v)) {
        Value subject = on_attr ? get_path(r, item, path) : item;
        bool hit = test.empty() ? subject.truthy() : r.apply_test(test, subject, test_args);
        if (hit == keep_matching) out.push_back(item);
    }
    return generator(std::move(out));
}

Value f_select(Renderer& r, const Value& v, CallArgs& a) {
    return select_impl(r, v, a, false, true);
}
Value f_reject(Renderer& r, const Value& v, CallArgs& a) {
    return select_impl(r, v, a, false, false);
}
Value f_selectattr(Renderer& r, const Value& v, CallArgs& a) {
    return select_impl(r, v, a, true, true);
}
Value f_rejectattr(Renderer& r, const Value& v, CallArgs& a) {
    return select_impl(r, v, a, true, false);
}

Value f_map(Renderer& r, const Value& v, CallArgs& args) {
    std::vector<Value> out;
    if (!v.truthy()) return generator({});  // jinja2 skips falsy input (None) silently
    if (args.positional.empty()) {
        const Value* attribute = args.keyword_arg("attribute");
        if (!attribute) {
            for (auto& item : iterate(v)) out.push_back(std::move(item));
            return generator(std::move(out));
        }
        auto path = attribute_path(*attribute);
        const Value* fallback = args.keyword_arg("default");
        for (const auto& item : iterate(v)) {
            Value got = get_path(r, item, path);
            if (fallback && got.is_undefined()) got = *fallback;
            out.push_back(std::move(got));
        }
        return generator(std::move(out));
    }
    std::string filter = to_str(args.positional[0]);
    CallArgs filter_args;
    filter_args.positional.assign(args.positional.begin() + 1, args.positional.end());
    filter_args.keyword = args.keyword;
    for (const auto& item : iterate(v)) {
        CallArgs copy = filter_args;
        out.push_back(r.apply_filter(filter, item, copy));
    }
    return generator(std::move(out));
}

Value f_unique(Renderer& r, const Value& v, CallArgs& args) {
    bool case_sensitive = bool_arg(args, 0, "case_sensitive", false);
    const Value* attribute = args.get(1, "attribute");
    auto path = attribute ? attribute_path(*attribute) : std::vector<Value>{};
    std::vector<Value> seen;
    std::vector<Value> out;
    for (const auto& item : iterate(v)) {
        Value key = get_path(r, item, path);
        if (!case_sensitive) key = fold_case(key);
        if (key.is_list_like() && key.seq().flavor == SeqFlavor::list)
            type_error("unhashable type: 'list'");
        if (key.is_mapping()) type_error("unhashable type: 'dict'");
        if (std::none_of(seen.begin(), seen.end(),
                         [&](const Value& s) { return equals(s, key); })) {
            seen.push_back(key);
            out.push_back(item);
        }
    }
    return generator(std::move(out));
}

Value f_dictsort(Renderer&, const Value& v, CallArgs& args) {
    if (!v.is_mapping()) {
        if (v.is_undefined()) fail_undefined(v);
        raise("AttributeError",
              std::string("'").append(v.type_name()).append("' object has no attribute 'items'"));
    }
    bool case_sensitive = bool_arg(args, 0, "case_sensitive", false);
    const Value* by = args.get(1, "by");
    std::string by_s = by ? to_str(*by) : "key";
    if (by_s != "key" && by_s != "value") {
        raise("FilterArgumentError", "You can only sort by either \"key\" or \"value\"");
    }
    bool reverse = bool_arg(args, 2, "reverse", false);
    std::size_t pos = by_s == "key" ? 0 : 1;
    std::vector<Value> items;
    for (const auto& [k, val] : v.map().items) items.push_back(Value::tuple({k, val}));
    auto key = [&](const Value& t) {
        const Value& x = t.items()[pos];
        return case_sensitive ? x : fold_case(x);
    };
    std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
        return reverse ? sort_less(key(b), key(a)) : sort_less(key(a), key(b));
    });
    return Value::list(std::move(items));
}

Value f_sort(Renderer& r, const Value& v, CallArgs& args) {
    bool reverse = bool_arg(args, 0, "reverse", false);
    bool case_sensitive = bool_arg(args, 1, "case_sensitive", false);
    const Value* attribute = args.get(2, "attribute");
    std::vector<std::vector<Value>> paths;
    if (attribute && attribute->is_string()) {
        for (auto& a : py_split(attribute->str(), std::string_view(","), -1)) {
            paths.push_back(attribute_path(Value(a)));
        }
    } else if (attribute && !attribute->is_none()) {
        paths.push_back(attribute_path(*attribute));
    }
    auto key = [&](const Value& item) {
        std::vector<Value> k;
        if (paths.empty()) {
            k.push_back(case_sensitive ? item : fold_case(item));
        } else {
            for (const auto& p : paths) {
                Value x = get_path(r, item, p);
                k.push_back(case_sensitive ? x : fold_case(x));
            }
        }
        return Value::list(std::move(k));
    };
    std::vector<std::pair<Value, Value>> keyed;
    for (auto& item : iterate(v)) keyed.emplace_back(key(item), std::move(item));
    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
        return reverse ? sort_less(b.first, a.first) : sort_less(a.first, b.first);
    });
    std::vector<Value> out;
    for (auto& [k, item] : keyed) out.push_back(std::move(item));
    return Value::list(std::move(out));
}

Value f_sum(Renderer& r, const Value& v, CallArgs& args) {
    const Value* attribute = args.get(0, "attribute");
    const Value* start = args.get(1, "start");
    auto path = attribute ? attribute_path(*attribute) : std::vector<Value>{};
    Value total = start ? *start : Value(std::int64_t{0});
    for (const auto& item : iterate(v)) {
        total = binary_op("+", total, get_path(r, item, path), r.config().limits.max_output_bytes);
    }
    return total;
}

Value min_max(Renderer& r, const Value& v, CallArgs& args, bool want_max) {
    bool case_sensitive = bool_arg(args, 0, "case_sensitive", false);
    const Value* attribute = args.get(1, "attribute");
    auto path = attribute ? attribute_path(*attribute) : std::vector<Value>{};
    auto items = iterate(v);
    if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
    auto key = [&](const Value& item) {
        Value k = get_path(r, item, path);
        return case_sensitive ? k : fold_case(k);
    };
    std::size_t best = 0;
    Value best_key = key(items[0]);
    for (std::size_t i = 1; i < items.size(); ++i) {
        Value k = key(items[i]);
        if (want_max ? sort_less(best_key, k) : sort_less(k, best_key)) {
            best = i;
            best_key = k;
        }
    }
    return items[best];
}

Value f_min(Renderer& r, const Value& v, CallArgs& a) { return min_max(r, v, a, false); }
Value f_max(Renderer& r, const Value& v, CallArgs& a) { return min_max(r, v, a, true); }

Value f_batch(Renderer&, const Value& v, CallArgs& args) {
    const Value& count = required_arg(args, 0, "linecount", "batch");
    if (!count.is_int() || count.as_int() <= 0) type_error("batch size must be a positive integer");
    const Value* fill = args.get(1, "fill_with");
    auto n = static_cast<std::size_t>(count.as_int());
    std::vector<Value> out;
    std::vector<Value> tmp;
    for (auto& item : iterate(v)) {
        tmp.push_back(std::move(item));
        if (tmp.size() == n) {
            out.push_back(Value::list(std::move(tmp)));
            tmp.clear();
        }
    }
    if (!tmp.empty()) {
        if (fill && !fill->is_none()) {
            while (tmp.size() < n) tmp.push_back(*fill);
        }
        out.push_back(Value::list(std::move(tmp)));
    }
    return generator(std::move(out));
}

Value f_slice(Renderer&, const Value& v, CallArgs& args) {
    const Value& count = required_arg(args, 0, "slices", "slice");
    if (!count.is_int() || count.as_int() <= 0) type_error("slices must be a positive integer");
    const Value* fill = args.get(1, "fill_with");
    auto seq = iterate(v);
    auto slices = static_cast<std::size_t>(count.as_int());
    std::size_t per = seq.size() / slices;
    std::size_t extra = seq.size() % slices;
    std::size_t offset = 0;
    std::vector<Value> out;
    for (std::size_t i = 0; i < slices; ++i) {
        std::size_t start = offset + i * per;
        if (i < extra) ++offset;
        std::size_t end = offset + (i + 1) * per;
        std::vector<Value> part(seq.begin() + static_cast<std::ptrdiff_t>(start),
                                seq.begin() + static_cast<std::ptrdiff_t>(end));
        if (fill && !fill->is_none() && i >= extra) part.push_back(*fill);
        out.push_back(Value::list(std::move(part)));
    }
    return generator(std::move(out));
}

Value f_groupby(Renderer& r, const Value& v, CallArgs& args) {
    const Value& attribute = required_arg(args, 0, "attribute", "groupby");
    auto path = attribute_path(attribute);
    const Value* fallback = args.get(1, "default");
    bool case_sensitive = bool_arg(args, 2, "case_sensitive", false);
    std::vector<std::pair<Value, Value>> keyed;
    for (auto& item : iterate(v)) {
        Value k = get_path(r, item, path);
        if (fallback && k.is_undefined()) k = *fallback;
        keyed.emplace_back(case_sensitive ? k : fold_case(k), std::move(item));
    }
    std::stable_sort(keyed.begin(), keyed.end(),
                     [](const auto& a, const auto& b) { return sort_less(a.first, b.first); });
    std::vector<Value> groups;
    for (std::size_t i = 0; i < keyed.size();) {
        std::size_t j = i;
        std::vector<Value> members;
        while (j < keyed.size() && equals(keyed[j].first, keyed[i].first))
            members.push_back(keyed[j++].second);
        groups.push_back(Value::tuple({keyed[i].first, Value::list(std::move(members))}));
        i = j;
    }
    return Value::list(std::move(groups));
}

constexpr auto kSequenceFilters = std::to_array<FilterEntry>({
    {"batch", f_batch},
    {"dictsort", f_dictsort},
    {"first", f_first},
    {"groupby", f_groupby},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"list", f_list},
    {"map", f_map},
    {"max", f_max},
    {"min", f_min},
    {"reject", f_reject},
    {"rejectattr", f_rejectattr},
    {"reverse", f_reverse},
    {"select", f_select},
    {"selectattr", f_selectattr},
    {"slice", f_slice},
    {"sort", f_sort},
    {"sum", f_sum},
    {"unique", f_unique},
});

}  // namespace

const FilterFn* find_sequence_filter(std::string_view name) {
    for (const auto& f : kSequenceFilters) {
        if (f.name == name) return &f.fn;
    }
    return nullptr;
}

std::vector<std::string_view> sequence_filter_names() {
    std::vector<std::string_view> names;
    for (const auto& f : kSequenceFilters) names.push_back(f.name);
    return names;
}

}  // namespace brigade::model::text::jinja

#include "model/text/pre_tokenizers.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

#include "model/text/byte_level.hpp"
#include "model/text/tokenizer_json_util.hpp"
#include "model/text/unicode.hpp"

namespace brigade::model::text {
namespace {

struct Segment {
    ByteSpan span;
    bool flag;  // is a match (before behaviors) / must be removed (after)
};

// Matches → segments that cover the whole text, as `Pattern::find_matches` returns them.
std::vector<Segment> cover(std::size_t size, const std::vector<ByteSpan>& matches, bool invert) {
    std::vector<Segment> out;
    if (size == 0) {
        out.push_back({{0, 0}, invert});
        return out;
    }
    std::size_t prev = 0;
    for (auto [b, e] : matches) {
        if (prev != b) out.push_back({{prev, b}, invert});
        out.push_back({{b, e}, !invert});
        prev = e;
    }
    if (prev != size) out.push_back({{prev, size}, invert});
    return out;
}

// `NormalizedString::split`: applies `behavior` to the covering segments and appends the
// non-empty pieces that survive.
void split_piece(const Piece& piece, std::vector<Segment> segments, SplitBehavior behavior,
                 std::vector<Piece>& out) {
    std::vector<Segment> kept;
    kept.reserve(segments.size());
    switch (behavior) {
        case SplitBehavior::removed:
            kept = std::move(segments);
            break;
        case SplitBehavior::isolated:
            for (auto& s : segments) kept.push_back({s.span, false});
            break;
        case SplitBehavior::contiguous: {
            bool previous_match = false;
            for (auto& s : segments) {
                if (s.flag == previous_match && !kept.empty()) {
                    kept.back().span.second = s.span.second;
                } else {
                    kept.push_back({s.span, false});
                }
                previous_match = s.flag;
            }
            break;
        }
        case SplitBehavior::merged_with_previous: {
            bool previous_match = false;
            for (auto& s : segments) {
                if (s.flag && !previous_match && !kept.empty()) {
                    kept.back().span.second = s.span.second;
                } else {
                    kept.push_back({s.span, false});
                }
                previous_match = s.flag;
            }
            break;
        }
        case SplitBehavior::merged_with_next: {
            bool previous_match = false;
            for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
                if (it->flag && !previous_match && !kept.empty()) {
                    kept.back().span.first = it->span.first;
                } else {
                    kept.push_back({it->span, false});
                }
                previous_match = it->flag;
            }
            std::reverse(kept.begin(), kept.end());
            break;
        }
    }
    for (const auto& s : kept) {
        if (s.flag || s.span.second == s.span.first) continue;
        out.push_back({piece.text.substr(s.span.first, s.span.second - s.span.first),
                       piece.original_start + s.span.first});
    }
}

// Every code point for which `pred` holds is a match of its own.
template <class Pred>
std::vector<ByteSpan> char_matches(std::string_view text, Pred pred) {
    std::vector<ByteSpan> out;
    std::size_t i = 0;
    while (i < text.size()) {
        std::size_t b = i;
        char32_t cp = next_code_point(text, i);
        if (pred(cp)) out.emplace_back(b, i);
    }
    return out;
}

// Applies `split` to every piece.
template <class Fn>
void for_each_split(std::vector<Piece>& pieces, Fn split) {
    std::vector<Piece> out;
    out.reserve(pieces.size());
    for (const auto& p : pieces) split(p, out);
    pieces = std::move(out);
}

std::string replace_spaces(std::string_view text, std::string_view replacement) {
    std::string out;
    out.reserve(text.size() + 8);
    for (char c : text) {
        if (c == ' ') {
            out += replacement;
        } else {
            out.push_back(c);
        }
    }
    return out;
}

void apply_metaspace(const PreTokenizer& pt, std::vector<Piece>& pieces) {
    for_each_split(pieces, [&](const Piece& p, std::vector<Piece>& out) {
        Piece q{replace_spaces(p.text, pt.replacement), p.original_start};
        bool starts = q.text.compare(0, pt.replacement.size(), pt.replacement) == 0;
        bool prepend = pt.prepend_scheme == PrependScheme::always ||
                       (pt.prepend_scheme == PrependScheme::first && p.original_start == 0);
        if (prepend && !starts) q.text.insert(0, pt.replacement);
        if (!pt.split) {
            if (!q.text.empty()) out.push_back(std::move(q));
            return;
        }
        std::vector<ByteSpan> matches;
        std::size_t pos = 0;
        while ((pos = q.text.find(pt.replacement, pos)) != std::string::npos) {
            matches.emplace_back(pos, pos + pt.replacement.size());
            pos += pt.replacement.size();
        }
        split_piece(q, cover(q.text.size(), matches, false), SplitBehavior::merged_with_next, out);
    });
}

void apply_byte_level(const PreTokenizer& pt, std::vector<Piece>& pieces) {
    std::vector<Piece> out;
    out.reserve(pieces.size());
    for (auto& p : pieces) {
        if (pt.add_prefix_space && (p.text.empty() || p.text[0] != ' ')) p.text = " " + p.text;
        std::size_t first = out.size();
        if (pt.use_regex) {
            split_piece(p, cover(p.text.size(), pt.regex.find_all(p.text), false),
                        SplitBehavior::isolated, out);
        } else if (!p.text.empty()) {
            out.push_back(std::move(p));
        }
        for (std::size_t k = first; k < out.size(); ++k) {
            std::string mapped;
            mapped.reserve(out[k].text.size() * 2);
            append_byte_level(mapped, out[k].text);
            out[k].text = std::move(mapped);
        }
    }
    pieces = std::move(out);
}

void apply_fixed_length(std::size_t length, std::vector<Piece>& pieces) {
    for_each_split(pieces, [&](const Piece& p, std::vector<Piece>& out) {
        std::size_t i = 0;
        while (i < p.text.size()) {
            std::size_t b = i;
            for (std::size_t n = 0; n < length && i < p.text.size(); ++n) {
                next_code_point(p.text, i);
            }
            out.push_back({p.text.substr(b, i - b), p.original_start + b});
        }
    });
}

Result<SplitBehavior> parse_behavior(const nlohmann::json& j, SplitBehavior fallback) {
    auto it = j.find("behavior");
    if (it == j.end() || it->is_null()) return fallback;
    if (!it->is_string()) return make_error(errc::bad_tokenizer, "split behavior must be a string");
    const auto& s = it->get_ref<const std::string&>();
    if (s == "Removed") return SplitBehavior::removed;
    if (s == "Isolated") return SplitBehavior::isolated;
    if (s == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
    if (s == "MergedWithNext") return SplitBehavior::merged_with_next;
    if (s == "Contiguous") return SplitBehavior::contiguous;
    return make_error(errc::bad_tokenizer, "unknown split behavior '" + s + "'");
}

}  // namespace

Result<MetaspaceFields> parse_metaspace_fields(const nlohmann::json& j, std::string_view what) {
    MetaspaceFields f;
    auto r = json_string(j, "replacement", what);
    if (!r) return r.error();
    auto cp = single_code_point(*r, std::string(what) + " replacement");
    if (!cp) return cp.error();
    f.replacement = std::move(*r);
    auto scheme = json_optional_string(j, "prepend_scheme");
    if (scheme) {
        if (*scheme == "always") {
            f.prepend_scheme = PrependScheme::always;
        } else if (*scheme == "first") {
            f.prepend_scheme = PrependScheme::first;
        } else if (*scheme == "never") {
            f.prepend_scheme = PrependScheme::never;
        } else {
            return make_error(errc::bad_tokenizer,
                              std::string(what) + ": unknown prepend_scheme '" + *scheme + "'");
        }
    } else {
        f.prepend_scheme =
            json_bool(j, "add_prefix_space", true) ? PrependScheme::always : PrependScheme::never;
    }
    f.split = json_bool(j, "split", true);
    return f;
}

void PreTokenizer::apply(std::vector<Piece>& pieces) const {
    switch (kind) {
        case Kind::sequence:
            for (const auto& c : children) c.apply(pieces);
            return;
        case Kind::byte_level:
            apply_byte_level(*this, pieces);
            return;
        case Kind::metaspace:
            apply_metaspace(*this, pieces);
            return;
        case Kind::split:
            for_each_split(pieces, [&](const Piece& p, std::vector<Piece>& out) {
                split_piece(p, cover(p.text.size(), pattern.find_all(p.text), invert), behavior,
                            out);
            });
            return;
        case Kind::digits:
            for_each_split(pieces, [&](const Piece& p, std::vector<Piece>& out) {
                split_piece(p, cover(p.text.size(), char_matches(p.text, is_numeric), false),
                            individual_digits ? SplitBehavior::isolated : SplitBehavior::contiguous,
                            out);
            });
            return;
        case Kind::whitespace:
            // `\w+|[^\w\s]+` inverted and removed: what is left between words goes away.
            for_each_split(pieces, [&](const Piece& p, std::vector<Piece>& out) {
                split_piece(p, cover(p.text.size(), regex.find_all(p.text), true),
                            SplitBehavior::removed, out);
            });
            return;
        case Kind::whitespace_split:
            for_each_split(pieces, [&](const Piece& p, std::vector<Piece>& out) {
                split_piece(p, cover(p.text.size(), char_matches(p.text, is_whitespace), false),
                            SplitBehavior::removed, out);
            });
            return;
        case Kind::bert:
            for_each_split(pieces, [&](const Piece& p, std::vector<Piece>& out) {
                split_piece(p, cover(p.text.size(), char_matches(p.text, is_whitespace), false),
                            SplitBehavior::removed, out);
            });
            for_each_split(pieces, [&](const Piece& p, std::vector<Piece>& out) {
                split_piece(p, cover(p.text.size(), char_matches(p.text, is_punctuation), false),
                            SplitBehavior::isolated, out);
            });
            return;
        case Kind::punctuation:
            for_each_split(pieces, [&](const Piece& p, std::vector<Piece>& out) {
                split_piece(p, cover(p.text.size(), char_matches(p.text, is_punctuation), false),
                            behavior, out);
            });
            return;
        case Kind::char_delimiter:
            for_each_split(pieces, [&](const Piece& p, std::vector<Piece>& out) {
                auto is_delimiter = [&](char32_t cp) { return cp == delimiter; };
                split_piece(p, cover(p.text.size(), char_matches(p.text, is_delimiter), false),
                            SplitBehavior::removed, out);
            });
            return;
        case Kind::fixed_length:
            apply_fixed_length(length, pieces);
            return;
    }
}

Result<PreTokenizer> parse_pre_tokenizer(const nlohmann::json& j) {
    auto type = json_type_of(j, "pre_tokenizer");
    if (!type) return type.error();
    const std::string& t = *type;
    PreTokenizer pt;
    if (t == "Sequence") {
        pt.kind = PreTokenizer::Kind::sequence;
        auto it = j.find("pretokenizers");
        if (it == j.end() || !it->is_array()) {
            return make_error(errc::bad_tokenizer,
                              "pre_tokenizer Sequence needs a 'pretokenizers' array");
        }
        for (const auto& c : *it) {
            auto child = parse_pre_tokenizer(c);
            if (!child) return child.error();
            pt.children.push_back(std::move(*child));
        }
    } else if (t == "ByteLevel") {
        pt.kind = PreTokenizer::Kind::byte_level;
        pt.add_prefix_space = json_bool(j, "add_prefix_space", true);
        pt.use_regex = json_bool(j, "use_regex", true);
        if (pt.use_regex) {
            auto r = Regex::compile(kGpt2Pattern);
            if (!r) return r.error();
            pt.regex = std::move(*r);
        }
    } else if (t == "Split") {
        pt.kind = PreTokenizer::Kind::split;
        auto p = parse_pattern(j, "pre_tokenizer Split");
        if (!p) return p.error();
        pt.pattern = std::move(*p);
        auto b = parse_behavior(j, SplitBehavior::isolated);
        if (!b) return b.error();
        pt.behavior = *b;
        pt.invert = json_bool(j, "invert", false);
    } else if (t == "Metaspace") {
        pt.kind = PreTokenizer::Kind::metaspace;
        auto parsed = parse_metaspace_fields(j, "pre_tokenizer Metaspace");
        if (!parsed) return parsed.error();
        pt.replacement = std::move(parsed->replacement);
        pt.prepend_scheme = parsed->prepend_scheme;
        pt.split = parsed->split;
    } else if (t == "Digits") {
        pt.kind = PreTokenizer::Kind::digits;
        pt.individual_digits = json_bool(j, "individual_digits", false);
    } else if (t == "Whitespace") {
        pt.kind = PreTokenizer::Kind::whitespace;
        auto r = Regex::compile(R"(\w+|[^\w\s]+)");
        if (!r) return r.error();
        pt.regex = std::move(*r);
    } else if (t == "WhitespaceSplit") {
        pt.kind = PreTokenizer::Kind::whitespace_split;
    } else if (t == "BertPreTokenizer") {
        pt.kind = PreTokenizer::Kind::bert;
    } else if (t == "Punctuation") {
        pt.kind = PreTokenizer::Kind::punctuation;
        auto b = parse_behavior(j, SplitBehavior::isolated);
        if (!b) return b.error();
        pt.behavior = *b;
    } else if (t == "CharDelimiterSplit") {
        pt.kind = PreTokenizer::Kind::char_delimiter;
        auto d = json_string(j, "delimiter", "pre_tokenizer CharDelimiterSplit");
        if (!d) return d.error();
        auto cp = single_code_point(*d, "CharDelimiterSplit delimiter");
        if (!cp) return cp.error();
        pt.delimiter = *cp;
    } else if (t == "FixedLength") {
        pt.kind = PreTokenizer::Kind::fixed_length;
        pt.length = json_size(j, "length", 5);
        if (pt.length == 0) {
            return make_error(errc::bad_tokenizer, "pre_tokenizer FixedLength needs length > 0");
        }
    } else {
        return make_error(errc::bad_tokenizer, "unknown pre_tokenizer type '" + t + "'");
    }
    return pt;
}

}  // namespace brigade::model::text

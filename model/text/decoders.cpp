#include "model/text/decoders.hpp"

#include <nlohmann/json.hpp>

#include "model/text/byte_level.hpp"
#include "model/text/tokenizer_json_util.hpp"
#include "model/text/unicode.hpp"
#include "model/text/utf8.hpp"

namespace brigade::model::text {
namespace {

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// "<0xAB>" → 0xAB, or -1.
int byte_fallback_value(const std::string& t) {
    if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
    int hi = hex_value(t[3]), lo = hex_value(t[4]);
    if (hi < 0 || lo < 0) return -1;
    return hi * 16 + lo;
}

void decode_byte_level(std::vector<std::string>& tokens) {
    std::string bytes;
    for (const auto& t : tokens) {
        if (!byte_level_decode(t, bytes)) bytes += t;  // not byte-level (an added token): as is
    }
    tokens.assign(1, utf8_lossy(bytes));
}

void decode_byte_fallback(std::vector<std::string>& tokens) {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string run;
    std::size_t run_len = 0;
    auto flush = [&] {
        if (run_len == 0) return;
        if (is_valid_utf8(run)) {
            out.push_back(run);
        } else {
            // One U+FFFD per byte, not per broken sequence: HF's choice, kept for parity.
            for (std::size_t k = 0; k < run_len; ++k) out.emplace_back(kReplacementChar);
        }
        run.clear();
        run_len = 0;
    };
    for (auto& t : tokens) {
        int b = byte_fallback_value(t);
        if (b >= 0) {
            run.push_back(static_cast<char>(b));
            ++run_len;
            continue;
        }
        flush();
        out.push_back(std::move(t));
    }
    flush();
    tokens = std::move(out);
}

void strip_token(std::string& t, std::string_view c, std::size_t start, std::size_t stop) {
    std::size_t b = 0;
    for (std::size_t n = 0; n < start && t.compare(b, c.size(), c) == 0; ++n) b += c.size();
    std::size_t e = t.size();
    for (std::size_t n = 0;
         n < stop && e >= b + c.size() && t.compare(e - c.size(), c.size(), c) == 0; ++n) {
        e -= c.size();
    }
    t = t.substr(b, e - b);
}

std::string replace_all(const std::string& text, const TextPattern& pattern,
                        const std::string& content) {
    auto matches = pattern.find_all(text);
    if (matches.empty()) return text;
    std::string out;
    std::size_t prev = 0;
    for (auto [b, e] : matches) {
        out.append(text, prev, b - prev);
        out += content;
        prev = e;
    }
    out.append(text, prev);
    return out;
}

std::string word_piece_cleanup(std::string s) {
    static constexpr std::pair<const char*, const char*> kRules[] = {
        {" .", "."},   {" ?", "?"},     {" !", "!"},     {" ,", ","},
        {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"},   {" do not", " don't"},
        {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
    };
    for (auto [from, to] : kRules) {
        std::string out;
        std::string_view f(from);
        std::size_t prev = 0, pos;
        while ((pos = s.find(f, prev)) != std::string::npos) {
            out.append(s, prev, pos - prev);
            out += to;
            prev = pos + f.size();
        }
        out.append(s, prev);
        s = std::move(out);
    }
    return s;
}

}  // namespace

void Decoder::decode_chain(std::vector<std::string>& tokens) const {
    switch (kind) {
        case Kind::sequence:
            for (const auto& c : children) c.decode_chain(tokens);
            return;
        case Kind::byte_level:
            decode_byte_level(tokens);
            return;
        case Kind::byte_fallback:
            decode_byte_fallback(tokens);
            return;
        case Kind::fuse: {
            std::string all;
            for (const auto& t : tokens) all += t;
            tokens.assign(1, std::move(all));
            return;
        }
        case Kind::strip:
            for (auto& t : tokens) strip_token(t, content, start, stop);
            return;
        case Kind::replace:
            for (auto& t : tokens) t = replace_all(t, pattern, content);
            return;
        case Kind::metaspace:
            // Every replacement char becomes a space, except in the first token, where HF
            // drops them (the prefix space the pre-tokenizer added) unless the scheme is never.
            for (std::size_t i = 0; i < tokens.size(); ++i) {
                std::string out;
                std::size_t pos = 0, prev = 0;
                const std::string& t = tokens[i];
                while ((pos = t.find(replacement, prev)) != std::string::npos) {
                    out.append(t, prev, pos - prev);
                    if (i != 0 || prepend_scheme == PrependScheme::never) out.push_back(' ');
                    prev = pos + replacement.size();
                }
                out.append(t, prev);
                tokens[i] = std::move(out);
            }
            return;
        case Kind::bpe:
            for (std::size_t i = 0; i < tokens.size(); ++i) {
                std::string rep = i + 1 == tokens.size() ? "" : " ";
                tokens[i] = replace_all(tokens[i], TextPattern::from_string(affix), rep);
            }
            return;
        case Kind::word_piece:
            for (std::size_t i = 0; i < tokens.size(); ++i) {
                auto& t = tokens[i];
                if (i != 0) {
                    if (t.compare(0, affix.size(), affix) == 0) {
                        t.erase(0, affix.size());
                    } else {
                        t = " " + t;
                    }
                }
                if (cleanup) t = word_piece_cleanup(std::move(t));
            }
            return;
    }
}

std::string run_decoder(const Decoder* decoder, std::vector<std::string> tokens) {
    std::string out;
    if (decoder == nullptr) {
        for (std::size_t i = 0; i < tokens.size(); ++i) {
            if (i) out.push_back(' ');
            out += tokens[i];
        }
        return out;
    }
    decoder->decode_chain(tokens);
    for (const auto& t : tokens) out += t;
    return out;
}

Result<Decoder> parse_decoder(const nlohmann::json& j) {
    auto type = json_type_of(j, "decoder");
    if (!type) return type.error();
    const std::string& t = *type;
    Decoder d;
    if (t == "Sequence") {
        d.kind = Decoder::Kind::sequence;
        auto it = j.find("decoders");
        if (it == j.end() || !it->is_array()) {
            return make_error(errc::bad_tokenizer, "decoder Sequence needs a 'decoders' array");
        }
        for (const auto& c : *it) {
            auto child = parse_decoder(c);
            if (!child) return child.error();
            d.children.push_back(std::move(*child));
        }
    } else if (t == "ByteLevel") {
        d.kind = Decoder::Kind::byte_level;
    } else if (t == "ByteFallback") {
        d.kind = Decoder::Kind::byte_fallback;
    } else if (t == "Fuse") {
        d.kind = Decoder::Kind::fuse;
    } else if (t == "Strip") {
        d.kind = Decoder::Kind::strip;
        auto c = json_string(j, "content", "decoder Strip");
        if (!c) return c.error();
        auto cp = single_code_point(*c, "decoder Strip content");
        if (!cp) return cp.error();
        d.content = std::move(*c);
        d.start = json_size(j, "start", 0);
        d.stop = json_size(j, "stop", 0);
    } else if (t == "Replace") {
        d.kind = Decoder::Kind::replace;
        auto p = parse_pattern(j, "decoder Replace");
        if (!p) return p.error();
        d.pattern = std::move(*p);
        auto c = json_string(j, "content", "decoder Replace");
        if (!c) return c.error();
        d.content = std::move(*c);
    } else if (t == "Metaspace") {
        d.kind = Decoder::Kind::metaspace;
        auto f = parse_metaspace_fields(j, "decoder Metaspace");
        if (!f) return f.error();
        d.replacement = std::move(f->replacement);
        d.prepend_scheme = f->prepend_scheme;
    } else if (t == "BPEDecoder") {
        d.kind = Decoder::Kind::bpe;
        d.affix = json_optional_string(j, "suffix").value_or("</w>");
    } else if (t == "WordPiece") {
        d.kind = Decoder::Kind::word_piece;
        d.affix = json_optional_string(j, "prefix").value_or("##");
        d.cleanup = json_bool(j, "cleanup", true);
    } else {
        return make_error(errc::bad_tokenizer, "unknown decoder type '" + t + "'");
    }
    return d;
}

}  // namespace brigade::model::text

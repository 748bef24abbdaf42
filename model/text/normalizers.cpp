#include "model/text/normalizers.hpp"

#include <nlohmann/json.hpp>

#include "model/text/byte_level.hpp"
#include "model/text/tokenizer_json_util.hpp"
#include "model/text/unicode.hpp"

namespace brigade::model::text {
namespace {

std::string replace_all(std::string_view text, const TextPattern& pattern,
                        std::string_view content) {
    auto matches = pattern.find_all(text);
    if (matches.empty()) return std::string(text);
    std::string out;
    out.reserve(text.size());
    std::size_t prev = 0;
    for (auto [b, e] : matches) {
        out.append(text.substr(prev, b - prev));
        out.append(content);
        prev = e;
    }
    out.append(text.substr(prev));
    return out;
}

std::string strip_whitespace(std::string_view text, bool left, bool right) {
    std::size_t b = 0, e = text.size();
    if (left) {
        while (b < e) {
            std::size_t i = b;
            if (!is_whitespace(next_code_point(text, i))) break;
            b = i;
        }
    }
    if (right) {
        while (e > b) {
            std::size_t start = e - 1;
            while (start > b && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
            std::size_t i = start;
            if (!is_whitespace(next_code_point(text, i))) break;
            e = start;
        }
    }
    return std::string(text.substr(b, e - b));
}

std::string remove_nonspacing_marks(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    std::size_t i = 0;
    while (i < text.size()) {
        char32_t cp = next_code_point(text, i);
        if (!is_nonspacing_mark(cp)) append_utf8(out, cp);
    }
    return out;
}

std::string bert_normalize(const Normalizer& n, std::string_view text) {
    std::string out;
    out.reserve(text.size());
    std::size_t i = 0;
    while (i < text.size()) {
        char32_t cp = next_code_point(text, i);
        if (n.clean_text) {
            bool control =
                cp != '\t' && cp != '\n' && cp != '\r' && (cp < 0x20 || (cp >= 0x7F && cp < 0xA0));
            if (cp == 0 || cp == 0xFFFD || control) continue;
            if (cp == '\t' || cp == '\n' || cp == '\r' || is_whitespace(cp)) cp = ' ';
        }
        if (n.handle_chinese_chars && is_chinese_char(cp)) {
            out.push_back(' ');
            append_utf8(out, cp);
            out.push_back(' ');
            continue;
        }
        append_utf8(out, cp);
    }
    if (n.strip_accents) out = remove_nonspacing_marks(normalize_unicode(out, NormalForm::nfd));
    if (n.lowercase) out = to_lowercase(out);
    return out;
}

std::string nmt_normalize(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    std::size_t i = 0;
    while (i < text.size()) {
        char32_t cp = next_code_point(text, i);
        if ((cp >= 0x01 && cp <= 0x08) || cp == 0x0B || (cp >= 0x0E && cp <= 0x1F) || cp == 0x7F ||
            cp == 0x8F || cp == 0x9F) {
            continue;
        }
        switch (cp) {
            case 0x09:
            case 0x0A:
            case 0x0C:
            case 0x0D:
            case 0x1680:
            case 0x2028:
            case 0x2029:
            case 0x2581:
            case 0xFEFF:
            case 0xFFFD:
                cp = ' ';
                break;
            default:
                if (cp >= 0x200B && cp <= 0x200F) cp = ' ';
                break;
        }
        append_utf8(out, cp);
    }
    return out;
}

}  // namespace

std::string Normalizer::apply(std::string_view text) const {
    switch (kind) {
        case Kind::sequence: {
            std::string s(text);
            for (const auto& c : children) s = c.apply(s);
            return s;
        }
        case Kind::nfc:
            return normalize_unicode(text, NormalForm::nfc);
        case Kind::nfd:
            return normalize_unicode(text, NormalForm::nfd);
        case Kind::nfkc:
            return normalize_unicode(text, NormalForm::nfkc);
        case Kind::nfkd:
            return normalize_unicode(text, NormalForm::nfkd);
        case Kind::lowercase:
            return to_lowercase(text);
        case Kind::strip:
            return strip_whitespace(text, left, right);
        case Kind::strip_accents:
            return remove_nonspacing_marks(text);
        case Kind::replace:
            return replace_all(text, pattern, content);
        case Kind::prepend:
            return text.empty() ? std::string() : content + std::string(text);
        case Kind::bert:
            return bert_normalize(*this, text);
        case Kind::nmt:
            return nmt_normalize(text);
        case Kind::byte_level: {
            std::string out;
            append_byte_level(out, text);
            return out;
        }
        case Kind::identity:
            return std::string(text);
    }
    return std::string(text);
}

Result<Normalizer> parse_normalizer(const nlohmann::json& j) {
    auto type = json_type_of(j, "normalizer");
    if (!type) return type.error();
    Normalizer n;
    const std::string& t = *type;
    if (t == "Sequence") {
        n.kind = Normalizer::Kind::sequence;
        auto it = j.find("normalizers");
        if (it == j.end() || !it->is_array()) {
            return make_error(errc::bad_tokenizer,
                              "normalizer Sequence needs a 'normalizers' array");
        }
        for (const auto& c : *it) {
            auto child = parse_normalizer(c);
            if (!child) return child.error();
            n.children.push_back(std::move(*child));
        }
    } else if (t == "NFC") {
        n.kind = Normalizer::Kind::nfc;
    } else if (t == "NFD") {
        n.kind = Normalizer::Kind::nfd;
    } else if (t == "NFKC") {
        n.kind = Normalizer::Kind::nfkc;
    } else if (t == "NFKD") {
        n.kind = Normalizer::Kind::nfkd;
    } else if (t == "Lowercase") {
        n.kind = Normalizer::Kind::lowercase;
    } else if (t == "Strip") {
        n.kind = Normalizer::Kind::strip;
        n.left = json_bool(j, "strip_left", true);
        n.right = json_bool(j, "strip_right", true);
    } else if (t == "StripAccents") {
        n.kind = Normalizer::Kind::strip_accents;
    } else if (t == "Replace") {
        n.kind = Normalizer::Kind::replace;
        auto p = parse_pattern(j, "normalizer Replace");
        if (!p) return p.error();
        n.pattern = std::move(*p);
        auto content = json_string(j, "content", "normalizer Replace");
        if (!content) return content.error();
        n.content = std::move(*content);
    } else if (t == "Prepend") {
        n.kind = Normalizer::Kind::prepend;
        auto content = json_string(j, "prepend", "normalizer Prepend");
        if (!content) return content.error();
        n.content = std::move(*content);
    } else if (t == "BertNormalizer") {
        n.kind = Normalizer::Kind::bert;
        n.clean_text = json_bool(j, "clean_text", true);
        n.handle_chinese_chars = json_bool(j, "handle_chinese_chars", true);
        n.lowercase = json_bool(j, "lowercase", true);
        // `strip_accents: null` means "follow lowercase" (BERT's uncased models).
        n.strip_accents = json_bool(j, "strip_accents", n.lowercase);
    } else if (t == "Nmt") {
        n.kind = Normalizer::Kind::nmt;
    } else if (t == "ByteLevel") {
        n.kind = Normalizer::Kind::byte_level;
    } else if (t == "Precompiled") {
        auto it = j.find("precompiled_charsmap");
        if (it != j.end() && !it->is_null() &&
            !(it->is_string() && it->get_ref<const std::string&>().empty())) {
            return make_error(errc::bad_tokenizer,
                              "normalizer Precompiled (a SentencePiece charsmap) is not supported");
        }
        n.kind = Normalizer::Kind::identity;
    } else {
        return make_error(errc::bad_tokenizer, "unknown normalizer type '" + t + "'");
    }
    return n;
}

}  // namespace brigade::model::text

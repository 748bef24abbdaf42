// libFuzzer target for the tokenizer. The first byte picks what the rest of the input is:
//   even: text for two small tokenizers (byte-level + Split regex, and SentencePiece-style with
//         byte fallback), exercising every added-token flag; then the same bytes as token ids
//         for decode and the streaming decoder;
//   odd:  a tokenizer.json document, which must load or fail with a Result error.
// Invariants checked: encode fails only on invalid UTF-8; decode and every streamed piece are
// valid UTF-8; streamed pieces add up to the full decode. ASan/UBSan catch the rest.
//
// Build (clang): cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DBRIGADE_FUZZ=ON
//                cmake --build build-fuzz --target tokenizer_fuzz
// Run:           build-fuzz/tests/tokenizer_fuzz -max_total_time=60 -max_len=4096

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "model/text/byte_level.hpp"
#include "model/text/tokenizer.hpp"
#include "model/text/utf8.hpp"

namespace {

using brigade::model::text::Tokenizer;
using nlohmann::json;

json added(int id, const char* content, bool special, bool lstrip, bool rstrip, bool single_word,
           bool normalized) {
    return {{"id", id},
            {"content", content},
            {"special", special},
            {"lstrip", lstrip},
            {"rstrip", rstrip},
            {"single_word", single_word},
            {"normalized", normalized}};
}

json byte_level_tokenizer() {
    json vocab = json::object();
    for (int b = 0; b < 256; ++b) {
        std::string s;
        char c = static_cast<char>(b);
        brigade::model::text::append_byte_level(s, std::string_view(&c, 1));
        vocab[s] = b;
    }
    const char* extra[] = {"\xC4\xA0t", "he", "\xC4\xA0the", "in", "ing", "\xC4\xA0\xC4\xA0"};
    for (int i = 0; i < 6; ++i) vocab[extra[i]] = 256 + i;
    return {
        {"added_tokens",
         {added(300, "<|im_end|>", true, false, false, false, false),
          added(301, "<m>", false, true, false, false, false),
          added(302, "<r>", false, false, true, false, false),
          added(303, "ab", false, false, false, true, true)}},
        {"normalizer", {{"type", "NFC"}}},
        {"pre_tokenizer",
         {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"},
             {"pattern",
              {{"Regex",
                R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
             {"behavior", "Isolated"},
             {"invert", false}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
        {"decoder", {{"type", "ByteLevel"}}},
        {"model",
         {{"type", "BPE"},
          {"vocab", vocab},
          {"merges", {"\xC4\xA0 t", "h e", "\xC4\xA0t he", "i n", "in g", "\xC4\xA0 \xC4\xA0"}}}}};
}

json spm_tokenizer() {
    const std::string sp = "\xE2\x96\x81";
    json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
    const char hex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
        vocab[std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">"] = 3 + b;
    }
    int next = 259;
    vocab[sp] = next++;
    for (char c = 'a'; c <= 'z'; ++c) vocab[std::string(1, c)] = next++;
    vocab[sp + "t"] = next++;
    vocab["he"] = next++;
    vocab[sp + "the"] = next++;
    return {{"added_tokens",
             {added(0, "<unk>", true, false, false, false, false),
              added(1, "<s>", true, false, false, false, false),
              added(2, "</s>", true, false, false, false, false),
              added(400, "<|end|>", true, false, true, false, false)}},
            {"normalizer",
             {{"type", "Sequence"},
              {"normalizers",
               {{{"type", "Prepend"}, {"prepend", sp}},
                {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", sp}}}}}},
            {"pre_tokenizer", nullptr},
            {"post_processor",
             json::parse(R"({"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>",
               "type_id":0}},{"Sequence":{"id":"A","type_id":0}}],"pair":[],
               "special_tokens":{"<s>":{"id":"<s>","ids":[1],"tokens":["<s>"]}}})")},
            {"decoder",
             {{"type", "Sequence"},
              {"decoders",
               {{{"type", "Replace"}, {"pattern", {{"String", sp}}}, {"content", " "}},
                {{"type", "ByteFallback"}},
                {{"type", "Fuse"}},
                {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
            {"model",
             {{"type", "BPE"},
              {"vocab", vocab},
              {"merges", {sp + " t", "h e", sp + "t he"}},
              {"unk_token", "<unk>"},
              {"byte_fallback", true},
              {"fuse_unk", true}}}};
}

const std::vector<Tokenizer>& tokenizers() {
    static const std::vector<Tokenizer> all = [] {
        std::vector<Tokenizer> v;
        for (const json& j : {byte_level_tokenizer(), spm_tokenizer()}) {
            auto t = Tokenizer::load_from_json(j.dump());
            if (!t) {
                std::fprintf(stderr, "fuzz setup: %s\n", t.error().what().c_str());
                std::abort();
            }
            v.push_back(std::move(*t));
        }
        return v;
    }();
    return all;
}

// An invariant broke: say which, and let libFuzzer record the input.
#define TOKENIZER_FUZZ_CHECK(cond)                                                 \
    do {                                                                           \
        if (!(cond)) {                                                             \
            std::fprintf(stderr, "tokenizer_fuzz: invariant failed: %s\n", #cond); \
            std::abort();                                                          \
        }                                                                          \
    } while (0)

void fuzz_text(std::string_view text) {
    for (const Tokenizer& tok : tokenizers()) {
        auto ids = tok.encode(text, true);
        TOKENIZER_FUZZ_CHECK(ids.has_value() == brigade::model::text::is_valid_utf8(text));
        if (ids) {
            for (int32_t id : *ids) TOKENIZER_FUZZ_CHECK(id >= 0 && id < tok.vocab_size());
            TOKENIZER_FUZZ_CHECK(brigade::model::text::is_valid_utf8(tok.decode(*ids, false)));
        }
        // The same bytes as arbitrary ids (including unknown ones) for both decoders.
        std::vector<int32_t> raw;
        for (std::size_t i = 0; i + 1 < text.size(); i += 2) {
            raw.push_back((static_cast<unsigned char>(text[i]) << 8 |
                           static_cast<unsigned char>(text[i + 1])) %
                          (tok.vocab_size() + 8));
        }
        for (bool skip : {false, true}) {
            std::string full = tok.decode(raw, skip);
            TOKENIZER_FUZZ_CHECK(brigade::model::text::is_valid_utf8(full));
            brigade::model::text::StreamingDecoder dec(tok, skip);
            std::string streamed;
            for (int32_t id : raw) {
                std::string piece = dec.push(id);
                TOKENIZER_FUZZ_CHECK(brigade::model::text::is_valid_utf8(piece));
                streamed += piece;
            }
            streamed += dec.finish();
            if (streamed != full) {
                std::fprintf(
                    stderr, "ids %s skip=%d\nfull     %s\nstreamed %s\n", json(raw).dump().c_str(),
                    skip ? 1 : 0,
                    json(full).dump(-1, ' ', true, json::error_handler_t::replace).c_str(),
                    json(streamed).dump(-1, ' ', true, json::error_handler_t::replace).c_str());
            }
            TOKENIZER_FUZZ_CHECK(streamed == full);
        }
    }
}

void fuzz_tokenizer_json(std::string_view doc) {
    auto tok = Tokenizer::load_from_json(doc, doc.substr(0, doc.size() / 2));
    if (!tok) return;
    auto ids = tok->encode("Hello <s> world \xC3\xA9\xF0\x9F\xA4\x97 12345\n", true);
    if (ids) (void)tok->decode(*ids, false);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
    if (data[0] % 2 == 0) {
        fuzz_text(rest);
    } else {
        fuzz_tokenizer_json(rest);
    }
    return 0;
}

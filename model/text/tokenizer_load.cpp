// Loading a Tokenizer: tokenizer.json, or vocab.json + merges.txt rebuilt the way transformers'
// slow-to-fast converters do (`Qwen2Converter`, `GPT2Converter` in
// huggingface/transformers:src/transformers/convert_slow_tokenizer.py), then the special-token
// ids from tokenizer_config.json, generation_config.json and config.json.

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/text/tokenizer.hpp"
#include "model/text/tokenizer_json_util.hpp"
#include "model/text/tokenizer_state.hpp"

namespace brigade::model::text {
namespace {

using nlohmann::json;

// Qwen2's pre-tokenizer regex, hard-coded in `Qwen2Converter` (formats.md §4.9).
constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

Result<std::string> read_text_file(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    if (!in) return make_error(errc::io_error, "cannot open " + p.string());
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) return make_error(errc::io_error, "cannot read " + p.string());
    return ss.str();
}

Result<json> parse_json(std::string_view text, std::string_view what) {
    try {
        return Result<json>(boost::system::in_place_value, json::parse(text.begin(), text.end()));
    } catch (const json::exception& e) {
        return make_error(errc::bad_tokenizer,
                          std::string(what) + " is not valid JSON: " + e.what());
    }
}

// An optional JSON file of the model directory: null when absent, an error when unreadable.
Result<json> read_optional_json(const std::filesystem::path& p) {
    std::error_code ec;
    if (!std::filesystem::exists(p, ec)) return Result<json>(boost::system::in_place_value, json());
    auto text = read_text_file(p);
    if (!text) return text.error();
    auto j = parse_json(*text, p.filename().string());
    if (!j) return make_error(errc::bad_config, j.error().message);
    return Result<json>(boost::system::in_place_value, std::move(*j));
}

// tokenizer_config's token fields are a string or an AddedToken object {"content": ...}.
std::optional<std::string> token_string(const json& config, const char* key) {
    if (!config.is_object()) return std::nullopt;
    auto it = config.find(key);
    if (it == config.end()) return std::nullopt;
    if (it->is_string()) return it->get<std::string>();
    if (it->is_object()) return json_optional_string(*it, "content");
    return std::nullopt;
}

// An `*_token_id` field: an integer or a list of integers.
std::vector<int32_t> token_ids(const json& config, const char* key) {
    std::vector<int32_t> out;
    if (!config.is_object()) return out;
    auto it = config.find(key);
    if (it == config.end()) return out;
    if (it->is_number_integer()) out.push_back(it->get<int32_t>());
    if (it->is_array()) {
        for (const auto& v : *it) {
            if (v.is_number_integer()) out.push_back(v.get<int32_t>());
        }
    }
    return out;
}

Result<AddedToken> parse_added_token(const json& j, std::optional<int32_t> id_override) {
    if (!j.is_object()) return make_error(errc::bad_tokenizer, "an added token must be an object");
    AddedToken t;
    auto content = json_string(j, "content", "added token");
    if (!content) return content.error();
    if (content->empty()) return make_error(errc::bad_tokenizer, "an added token is empty");
    t.content = std::move(*content);
    if (id_override) {
        t.id = *id_override;
    } else {
        auto it = j.find("id");
        if (it == j.end() || !it->is_number_integer() || it->get<int64_t>() < 0 ||
            it->get<int64_t>() > INT32_MAX) {
            return make_error(errc::bad_tokenizer,
                              "added token '" + t.content + "' has no valid id");
        }
        t.id = it->get<int32_t>();
    }
    t.special = json_bool(j, "special", false);
    t.single_word = json_bool(j, "single_word", false);
    t.lstrip = json_bool(j, "lstrip", false);
    t.rstrip = json_bool(j, "rstrip", false);
    t.normalized = json_bool(j, "normalized", !t.special);
    return t;
}

template <class T, class Parse>
Result<std::optional<T>> parse_component(const json& root, const char* key, Parse parse) {
    auto it = root.find(key);
    if (it == root.end() || it->is_null()) return std::optional<T>();
    auto r = parse(*it);
    if (!r) return r.error();
    return std::optional<T>(std::move(*r));
}

// Everything but the model and the special tokens, from a tokenizer.json object.
Result<std::shared_ptr<TokenizerState>> build_from_tokenizer_json(const json& root) {
    if (!root.is_object())
        return make_error(errc::bad_tokenizer, "tokenizer.json is not an object");
    auto state = std::make_shared<TokenizerState>();
    auto model_it = root.find("model");
    if (model_it == root.end())
        return make_error(errc::bad_tokenizer, "tokenizer.json has no 'model'");
    auto model = BpeModel::from_json(*model_it);
    if (!model) return model.error();
    state->model = std::move(*model);

    std::vector<AddedToken> added;
    if (auto it = root.find("added_tokens"); it != root.end() && !it->is_null()) {
        if (!it->is_array())
            return make_error(errc::bad_tokenizer, "'added_tokens' must be an array");
        for (const auto& a : *it) {
            auto t = parse_added_token(a, std::nullopt);
            if (!t) return t.error();
            added.push_back(std::move(*t));
        }
    }
    state->added = AddedVocabulary(std::move(added));

    auto n = parse_component<Normalizer>(root, "normalizer", parse_normalizer);
    if (!n) return n.error();
    state->normalizer = std::move(*n);
    auto p = parse_component<PreTokenizer>(root, "pre_tokenizer", parse_pre_tokenizer);
    if (!p) return p.error();
    state->pre_tokenizer = std::move(*p);
    auto pp = parse_component<PostProcessor>(root, "post_processor", parse_post_processor);
    if (!pp) return pp.error();
    state->post_processor = std::move(*pp);
    auto d = parse_component<Decoder>(root, "decoder", parse_decoder);
    if (!d) return d.error();
    state->decoder = std::move(*d);
    return state;
}

// vocab.json + merges.txt (+ tokenizer_config.json): what the converter would write.
Result<std::shared_ptr<TokenizerState>> build_from_vocab_files(const std::filesystem::path& dir,
                                                               const json& config) {
    auto vocab_text = read_text_file(dir / "vocab.json");
    if (!vocab_text) return vocab_text.error();
    auto vocab_json = parse_json(*vocab_text, "vocab.json");
    if (!vocab_json) return vocab_json.error();
    if (!vocab_json->is_object())
        return make_error(errc::bad_tokenizer, "vocab.json is not an object");
    auto merges_text = read_text_file(dir / "merges.txt");
    if (!merges_text) return merges_text.error();

    std::vector<std::pair<std::string, std::string>> merges;
    std::istringstream lines(*merges_text);
    std::string line;
    for (std::size_t n = 0; std::getline(lines, line); ++n) {
        // Python's `line.strip()` + `line.split()`, skipping the "#version" header.
        auto first = line.find_first_not_of(" \t\r\n");
        if (first == std::string::npos) continue;
        if (n == 0 && line.compare(first, 9, "#version:") == 0) continue;
        std::istringstream parts(line);
        std::string a, b, extra;
        parts >> a >> b;
        if (b.empty() || (parts >> extra)) {
            return make_error(errc::bad_tokenizer,
                              "merges.txt line " + std::to_string(n + 1) + " is not 'a b'");
        }
        merges.emplace_back(std::move(a), std::move(b));
    }

    auto vocab = BpeModel::parse_vocab(*vocab_json);
    if (!vocab) return vocab.error();
    auto bpe = BpeModel::create(std::move(*vocab), merges, BpeModel::Options{});
    if (!bpe) return bpe.error();

    auto state = std::make_shared<TokenizerState>();
    state->model = std::move(*bpe);

    std::string cls = json_optional_string(config, "tokenizer_class").value_or("");
    bool add_prefix_space = json_bool(config, "add_prefix_space", false);
    json pre;
    if (cls.rfind("Qwen2", 0) == 0 || cls.empty()) {
        state->normalizer = Normalizer{};
        state->normalizer->kind = Normalizer::Kind::nfc;
        pre = {{"type", "Sequence"},
               {"pretokenizers",
                {{{"type", "Split"},
                  {"pattern", {{"Regex", kQwen2Pattern}}},
                  {"behavior", "Isolated"},
                  {"invert", false}},
                 {{"type", "ByteLevel"},
                  {"add_prefix_space", add_prefix_space},
                  {"use_regex", false}}}}};
    } else {
        // GPT2Converter: the GPT-2 regex inside ByteLevel, no normalizer.
        pre = {{"type", "ByteLevel"}, {"add_prefix_space", add_prefix_space}, {"use_regex", true}};
    }
    auto pt = parse_pre_tokenizer(pre);
    if (!pt) return pt.error();
    state->pre_tokenizer = std::move(*pt);
    state->decoder = Decoder{};
    state->decoder->kind = Decoder::Kind::byte_level;
    state->post_processor = PostProcessor{};

    // Added tokens: added_tokens_decoder of tokenizer_config.json, then added_tokens.json for
    // any it lacks.
    std::vector<AddedToken> added;
    if (auto it = config.find("added_tokens_decoder");
        config.is_object() && it != config.end() && it->is_object()) {
        for (auto e = it->begin(); e != it->end(); ++e) {
            int64_t id = -1;
            try {
                id = std::stoll(e.key());
            } catch (const std::exception&) {
                id = -1;
            }
            if (id < 0 || id > INT32_MAX) {
                return make_error(errc::bad_tokenizer,
                                  "added_tokens_decoder key '" + e.key() + "' is not an id");
            }
            auto t = parse_added_token(*e, static_cast<int32_t>(id));
            if (!t) return t.error();
            added.push_back(std::move(*t));
        }
    }
    std::sort(added.begin(), added.end(),
              [](const AddedToken& a, const AddedToken& b) { return a.id < b.id; });
    auto extra = read_optional_json(dir / "added_tokens.json");
    if (!extra) return extra.error();
    if (extra->is_object()) {
        for (auto e = extra->begin(); e != extra->end(); ++e) {
            bool known = std::any_of(added.begin(), added.end(),
                                     [&](const AddedToken& t) { return t.content == e.key(); });
            if (known || !e->is_number_integer()) continue;
            AddedToken t;
            t.id = e->get<int32_t>();
            t.content = e.key();
            t.special = false;
            t.normalized = true;
            added.push_back(std::move(t));
        }
    }
    state->added = AddedVocabulary(std::move(added));
    return state;
}

std::optional<int32_t> lookup(const Tokenizer& tok, const std::optional<std::string>& token) {
    if (!token || token->empty()) return std::nullopt;
    return tok.token_to_id(*token);
}

bool has_byte_fallback(const Decoder& d) {
    if (d.kind == Decoder::Kind::byte_fallback) return true;
    for (const auto& c : d.children) {
        if (has_byte_fallback(c)) return true;
    }
    return false;
}

// Fills `state->special` (and honours an explicit add_bos_token / add_eos_token).
void resolve_special_tokens(TokenizerState& state, const Tokenizer& tok, const json& config,
                            const json& generation, const json& model_config) {
    SpecialTokens& sp = state.special;
    state.decoder_has_byte_fallback = state.decoder && has_byte_fallback(*state.decoder);
    state.split_special_tokens = json_bool(config, "split_special_tokens", false);
    auto first_id = [&](const char* key) -> std::optional<int32_t> {
        for (const json* j : {&generation, &model_config}) {
            auto ids = token_ids(*j, key);
            if (!ids.empty()) return ids.front();
        }
        return std::nullopt;
    };
    auto pick = [&](const char* token_key, const char* id_key, std::string& name,
                    std::optional<int32_t>& id) {
        auto s = token_string(config, token_key);
        id = lookup(tok, s);
        if (!id) id = first_id(id_key);
        if (s && id) {
            name = *s;
        } else if (id) {
            name = tok.id_to_token(*id);
        }
    };
    pick("bos_token", "bos_token_id", sp.bos_token, sp.bos);
    pick("eos_token", "eos_token_id", sp.eos_token, sp.eos);
    pick("pad_token", "pad_token_id", sp.pad_token, sp.pad);
    std::optional<std::string> unk_name = token_string(config, "unk_token");
    sp.unk = lookup(tok, unk_name);
    if (sp.unk) sp.unk_token = *unk_name;

    // End of turn: the chat formats' turn terminator when the vocab has one.
    for (const char* name : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                             "<|end_of_turn|>", "<|return|>"}) {
        if (const AddedToken* a = state.added.by_content(name)) {
            sp.eot = a->id;
            break;
        }
    }
    if (!sp.eot) sp.eot = sp.eos;

    auto add_stop = [&](int32_t id) {
        if (std::find(sp.stop_ids.begin(), sp.stop_ids.end(), id) == sp.stop_ids.end()) {
            sp.stop_ids.push_back(id);
        }
    };
    if (sp.eos) add_stop(*sp.eos);
    for (const json* j : {&generation, &model_config}) {
        for (int32_t id : token_ids(*j, "eos_token_id")) add_stop(id);
    }
    if (sp.eot) add_stop(*sp.eot);

    // transformers rebuilds the template from these flags when a config sets them; follow it
    // when tokenizer.json's own post-processor would leave the token out.
    if (!state.post_processor) state.post_processor = PostProcessor{};
    auto& pre = state.post_processor->prefix;
    auto& post = state.post_processor->suffix;
    if (json_bool(config, "add_bos_token", false) && sp.bos &&
        std::find(pre.begin(), pre.end(), *sp.bos) == pre.end()) {
        pre.insert(pre.begin(), *sp.bos);
    }
    if (json_bool(config, "add_eos_token", false) && sp.eos &&
        std::find(post.begin(), post.end(), *sp.eos) == post.end()) {
        post.push_back(*sp.eos);
    }
    sp.add_bos = sp.bos && std::find(pre.begin(), pre.end(), *sp.bos) != pre.end();
    sp.add_eos = sp.eos && std::find(post.begin(), post.end(), *sp.eos) != post.end();
}

int32_t compute_vocab_size(const TokenizerState& state) {
    int32_t n = state.model.id_limit();
    for (const auto& t : state.added.tokens()) n = std::max(n, t.id + 1);
    return n;
}

}  // namespace

Result<Tokenizer> Tokenizer::load_from_json(std::string_view tokenizer_json,
                                            std::string_view tokenizer_config_json) {
    try {
        auto root = parse_json(tokenizer_json, "tokenizer.json");
        if (!root) return root.error();
        json config;
        if (!tokenizer_config_json.empty()) {
            auto c = parse_json(tokenizer_config_json, "tokenizer_config.json");
            if (!c) return c.error();
            config = std::move(*c);
        }
        auto state = build_from_tokenizer_json(*root);
        if (!state) return state.error();
        (*state)->vocab_size = compute_vocab_size(**state);
        Tokenizer tok(*state);
        resolve_special_tokens(**state, tok, config, json(), json());
        return tok;
    } catch (const json::exception& e) {
        return make_error(errc::bad_tokenizer, std::string("tokenizer.json: ") + e.what());
    }
}

Result<Tokenizer> Tokenizer::load_from_dir(const std::filesystem::path& dir) {
    try {
        std::error_code ec;
        if (!std::filesystem::is_directory(dir, ec)) {
            return make_error(errc::io_error, dir.string() + " is not a directory");
        }
        auto config = read_optional_json(dir / "tokenizer_config.json");
        if (!config) return config.error();
        auto generation = read_optional_json(dir / "generation_config.json");
        if (!generation) return generation.error();
        auto model_config = read_optional_json(dir / "config.json");
        if (!model_config) return model_config.error();

        Result<std::shared_ptr<TokenizerState>> state = make_error(errc::bad_tokenizer, "");
        if (std::filesystem::exists(dir / "tokenizer.json", ec)) {
            auto text = read_text_file(dir / "tokenizer.json");
            if (!text) return text.error();
            auto root = parse_json(*text, (dir / "tokenizer.json").string());
            if (!root) return root.error();
            state = build_from_tokenizer_json(*root);
        } else if (std::filesystem::exists(dir / "vocab.json", ec) &&
                   std::filesystem::exists(dir / "merges.txt", ec)) {
            state = build_from_vocab_files(dir, *config);
        } else {
            return make_error(
                errc::bad_tokenizer,
                dir.string() + " has neither tokenizer.json nor vocab.json + merges.txt");
        }
        if (!state) return state.error();
        (*state)->vocab_size = compute_vocab_size(**state);
        Tokenizer tok(*state);
        resolve_special_tokens(**state, tok, *config, *generation, *model_config);
        return tok;
    } catch (const json::exception& e) {
        return make_error(errc::bad_tokenizer, dir.string() + ": " + e.what());
    }
}

}  // namespace brigade::model::text

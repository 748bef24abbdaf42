// `brigade tokenize`: encode text to ids or decode ids to text with a model's own tokenizer,
// exactly as Hugging Face `tokenizers` would. Handy for checking prompts and token counts.

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "model/text/tokenizer.hpp"
#include "node/commands.hpp"

namespace brigade::node {
namespace {

struct TokenizeOptions {
    std::string model_dir;
    std::string text;
    std::string text_file;
    std::string decode;
    bool special = false;
    bool skip_special = false;
    bool show_tokens = false;
    // Set by CLI11: whether each source was given (an empty --text is a valid input).
    CLI::Option* text_opt = nullptr;
    CLI::Option* text_file_opt = nullptr;
    CLI::Option* decode_opt = nullptr;
};

// "1,2, 3" (or "[1, 2, 3]") → ids; false with `error` set on anything else.
bool parse_ids(const std::string& s, std::vector<int32_t>& ids, std::string& error) {
    std::size_t i = 0;
    while (i <= s.size()) {
        std::size_t comma = s.find(',', i);
        if (comma == std::string::npos) comma = s.size();
        std::string item = s.substr(i, comma - i);
        auto b = item.find_first_not_of(" \t[]");
        auto e = item.find_last_not_of(" \t[]");
        if (b == std::string::npos) {
            if (comma == s.size() && i == comma && !ids.empty()) break;  // trailing comma
            error = "empty id in --decode list";
            return false;
        }
        item = item.substr(b, e - b + 1);
        try {
            std::size_t used = 0;
            long long v = std::stoll(item, &used);
            if (used != item.size() || v < 0 || v > INT32_MAX) throw std::out_of_range(item);
            ids.push_back(static_cast<int32_t>(v));
        } catch (const std::exception&) {
            error = "'" + item + "' is not a token id";
            return false;
        }
        i = comma + 1;
    }
    return true;
}

int run_tokenize(const TokenizeOptions& o) {
    const bool decode = o.decode_opt->count() > 0;
    std::size_t sources = o.text_opt->count() + o.text_file_opt->count() + o.decode_opt->count();
    if (sources != 1) {
        std::fprintf(stderr,
                     "brigade tokenize: give exactly one of --text, --text-file or --decode\n");
        return 1;
    }
    auto tok = model::text::Tokenizer::load_from_dir(o.model_dir);
    if (!tok) {
        std::fprintf(stderr, "brigade tokenize: %s\n", tok.error().what().c_str());
        return 1;
    }
    if (decode) {
        std::vector<int32_t> ids;
        std::string error;
        if (!parse_ids(o.decode, ids, error)) {
            std::fprintf(stderr, "brigade tokenize: %s\n", error.c_str());
            return 1;
        }
        for (int32_t id : ids) {
            if (id >= tok->vocab_size()) {
                std::fprintf(stderr,
                             "brigade tokenize: id %d is outside the vocabulary (size %d)\n", id,
                             tok->vocab_size());
                return 1;
            }
        }
        std::string text = tok->decode(ids, o.skip_special);
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fputc('\n', stdout);
        return 0;
    }
    std::string text = o.text;
    if (o.text_file_opt->count() > 0) {
        std::ostringstream ss;
        if (o.text_file == "-") {
            ss << std::cin.rdbuf();
        } else {
            std::ifstream in(o.text_file, std::ios::binary);
            if (!in) {
                std::fprintf(stderr, "brigade tokenize: cannot open %s\n", o.text_file.c_str());
                return 1;
            }
            ss << in.rdbuf();
        }
        text = ss.str();
    }
    auto ids = tok->encode(text, o.special);
    if (!ids) {
        std::fprintf(stderr, "brigade tokenize: %s\n", ids.error().what().c_str());
        return 1;
    }
    if (o.show_tokens) {
        nlohmann::json rows = nlohmann::json::array();
        for (int32_t id : *ids) rows.push_back({id, tok->id_to_token(id)});
        std::printf("%s\n",
                    rows.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
        std::printf("%s\n", nlohmann::json(*ids).dump().c_str());
    }
    return 0;
}

}  // namespace

void add_tokenize_command(CLI::App& app, CommandSet& commands) {
    auto opts = std::make_shared<TokenizeOptions>();
    auto* sub = app.add_subcommand(
        "tokenize",
        "Encode text to token ids (printed as a JSON array) or decode ids to text, with the "
        "model's own tokenizer.json (or vocab.json + merges.txt)");
    sub->add_option("--model", opts->model_dir, "Model directory holding the tokenizer files")
        ->required();
    opts->text_opt = sub->add_option("--text", opts->text, "Text to encode");
    opts->text_file_opt = sub->add_option("--text-file", opts->text_file,
                                          "Encode the contents of this file ('-': stdin)");
    sub->add_flag("--special", opts->special,
                  "Add the tokenizer's special tokens (e.g. BOS), as add_special_tokens=True");
    sub->add_flag("--tokens", opts->show_tokens,
                  "Print [id, token string] pairs instead of bare ids");
    opts->decode_opt =
        sub->add_option("--decode", opts->decode, "Comma-separated ids to decode, e.g. 1,2,3");
    sub->add_flag("--skip-special", opts->skip_special,
                  "With --decode: leave special tokens out of the text");
    sub->footer(
        "Examples:\n"
        "  brigade tokenize --model models/qwen2.5 --text 'Hello world'\n"
        "  brigade tokenize --model models/llama3 --text 'Hi' --special\n"
        "  brigade tokenize --model models/llama3 --decode 128000,9906,1917\n");
    commands.add(sub, [opts] { return run_tokenize(*opts); });
}

}  // namespace brigade::node

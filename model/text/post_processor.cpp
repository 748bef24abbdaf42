#include "model/text/post_processor.hpp"

#include <nlohmann/json.hpp>
#include <string>

#include "model/text/tokenizer_json_util.hpp"

namespace brigade::model::text {
namespace {

Result<PostProcessor> parse_template(const nlohmann::json& j) {
    auto single = j.find("single");
    if (single == j.end() || !single->is_array()) {
        return make_error(errc::bad_tokenizer,
                          "post_processor TemplateProcessing needs a 'single' array");
    }
    const nlohmann::json empty = nlohmann::json::object();
    auto specials_it = j.find("special_tokens");
    const nlohmann::json& specials =
        specials_it != j.end() && specials_it->is_object() ? *specials_it : empty;
    PostProcessor p;
    bool seen_sequence = false;
    for (const auto& item : *single) {
        if (auto st = item.find("SpecialToken"); item.is_object() && st != item.end()) {
            auto name = json_string(*st, "id", "TemplateProcessing SpecialToken");
            if (!name) return name.error();
            auto sp = specials.find(*name);
            if (sp == specials.end() || !sp->is_object() || !sp->contains("ids") ||
                !(*sp)["ids"].is_array()) {
                return make_error(errc::bad_tokenizer, "TemplateProcessing uses special token '" +
                                                           *name + "' without ids");
            }
            auto& dst = seen_sequence ? p.suffix : p.prefix;
            for (const auto& id : (*sp)["ids"]) {
                if (!id.is_number_integer()) {
                    return make_error(errc::bad_tokenizer, "special token ids must be integers");
                }
                dst.push_back(id.get<int32_t>());
            }
        } else if (item.is_object() && item.contains("Sequence")) {
            seen_sequence = true;
        } else {
            return make_error(errc::bad_tokenizer,
                              "unknown TemplateProcessing item " + item.dump());
        }
    }
    return p;
}

// RobertaProcessing / BertProcessing: `"cls": ["<s>", 0], "sep": ["</s>", 2]`.
Result<int32_t> pair_id(const nlohmann::json& j, const char* key) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_array() || it->size() != 2 || !(*it)[1].is_number_integer()) {
        return make_error(errc::bad_tokenizer,
                          std::string("post_processor needs '") + key + "': [token, id]");
    }
    return (*it)[1].get<int32_t>();
}

}  // namespace

Result<PostProcessor> parse_post_processor(const nlohmann::json& j) {
    auto type = json_type_of(j, "post_processor");
    if (!type) return type.error();
    const std::string& t = *type;
    if (t == "TemplateProcessing") return parse_template(j);
    if (t == "ByteLevel") return PostProcessor{};
    if (t == "RobertaProcessing" || t == "BertProcessing") {
        auto cls = pair_id(j, "cls");
        if (!cls) return cls.error();
        auto sep = pair_id(j, "sep");
        if (!sep) return sep.error();
        return PostProcessor{{*cls}, {*sep}};
    }
    if (t == "Sequence") {
        auto it = j.find("processors");
        if (it == j.end() || !it->is_array()) {
            return make_error(errc::bad_tokenizer,
                              "post_processor Sequence needs a 'processors' array");
        }
        PostProcessor all;
        for (const auto& c : *it) {
            auto p = parse_post_processor(c);
            if (!p) return p.error();
            // Each processor wraps what the previous ones produced.
            all.prefix.insert(all.prefix.begin(), p->prefix.begin(), p->prefix.end());
            all.suffix.insert(all.suffix.end(), p->suffix.begin(), p->suffix.end());
        }
        return all;
    }
    return make_error(errc::bad_tokenizer, "unknown post_processor type '" + t + "'");
}

}  // namespace brigade::model::text

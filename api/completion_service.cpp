#include "api/completion_service.hpp"

#include <utility>

namespace brigade::api {

std::optional<nlohmann::json> ToolCall::arguments_object() const {
    nlohmann::json parsed = nlohmann::json::parse(arguments, nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_object()) return std::nullopt;
    return parsed;
}

const ModelInfo* find_model(const std::vector<ModelInfo>& models, std::string_view name) {
    if (models.empty()) return nullptr;
    if (name.empty() || name == "default_model") return &models.front();
    for (const auto& model : models) {
        if (model.id == name) return &model;
        for (const auto& alias : model.aliases) {
            if (alias == name) return &model;
        }
    }
    return nullptr;
}

nlohmann::json health_json(const Health& health) {
    const char* state = health.state == HealthState::ok        ? "ok"
                        : health.state == HealthState::loading ? "loading"
                                                               : "unavailable";
    nlohmann::json body = {{"status", state}};
    if (!health.detail.empty()) body["detail"] = health.detail;
    if (health.load) {
        body["requests"] = {{"in_flight", health.load->in_flight}};
        if (health.load->head_running >= 0) {
            body["head"] = {{"running", health.load->head_running},
                            {"queued", health.load->head_queued},
                            {"kv_positions", health.load->head_kv_positions},
                            {"paused_for_kv", health.load->head_paused}};
        }
    }
    return body;
}

void Cancellation::cancel() {
    std::vector<std::function<void()>> to_run;
    {
        std::lock_guard lock(mutex_);
        if (cancelled_.exchange(true, std::memory_order_acq_rel)) return;
        to_run.swap(callbacks_);
    }
    // Outside the lock: a callback may call back into this object.
    for (auto& callback : to_run) callback();
}

void Cancellation::on_cancel(std::function<void()> callback) {
    {
        std::lock_guard lock(mutex_);
        if (!cancelled_.load(std::memory_order_acquire)) {
            callbacks_.push_back(std::move(callback));
            return;
        }
    }
    callback();
}

}  // namespace brigade::api

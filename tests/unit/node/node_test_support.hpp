#pragma once
// Shared by the node unit tests: the demo model's frontend and stages, loaded once per process.

#include <gtest/gtest.h>

#include <memory>

#include "node/logging.hpp"
#include "node/model_loading.hpp"
#include "tests/support/test_support.hpp"

namespace brigade::node::testing {

inline std::shared_ptr<spdlog::logger> quiet_logger() {
    static auto logger = make_stderr_logger("test", spdlog::level::warn);
    return logger;
}

// The bundled demo model (4 layers, 4096 tokens), frontend only.
inline const ModelFrontend& demo_frontend() {
    static const std::unique_ptr<ModelFrontend> frontend = [] {
        ServeModelOptions options;
        options.model_ref = (brigade::test::source_dir() / "model" / "demo").string();
        auto f = load_model_frontend(options, *quiet_logger());
        if (!f) {
            ADD_FAILURE() << f.error().message;
            std::abort();
        }
        return std::make_unique<ModelFrontend>(std::move(*f));
    }();
    return *frontend;
}

inline std::shared_ptr<StageResources> load_range(const ModelFrontend& model,
                                                  model::LayerRange range, int n_threads = 1) {
    StageLoadOptions options;
    options.n_threads = n_threads;
    options.show_progress = false;
    auto r = load_stage_resources(model, range, options, *quiet_logger());
    EXPECT_TRUE(r) << (r ? "" : r.error().message);
    return r ? *r : nullptr;
}

}  // namespace brigade::node::testing

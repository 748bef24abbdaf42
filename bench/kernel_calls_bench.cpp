// Decode matmuls (one token, or --tokens decode steps) on an MLX 4-bit (g64) matrix, on one
// thread, and nothing else: a
// fixed amount of kernel work whose instructions can be counted where time cannot be measured
// (scripts/count_arm64_instructions.sh runs it under qemu-user for 64-bit Arm), or counted with
// `perf stat` on a real CPU. Prints the seconds per call as well, which under emulation mean
// nothing.
//
// usage: kernel_calls_bench [--rows N] [--cols N] [--calls N] [--tokens N] [--f32]
//   --f32: the f32 kernels instead of split-int8 activations (where the CPU has them)
//   --tokens: a batch of N decode steps per call (Backend::set_rows_are_decode_steps), 1 to 31;
//             split-int8 takes up to 16 on every kernel (Arm's too, off in the serving default)

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/fast_rng.hpp"
#include "model/cpu/cpu_backend.hpp"

namespace {

using brigade::model::DType;
using brigade::model::WeightMatrix;

struct Options {
    std::int64_t rows = 896;
    std::int64_t cols = 896;
    int calls = 1;
    std::int64_t tokens = 1;
    bool f32 = false;
};

bool parse(int argc, char** argv, Options& opt) {
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const bool has_value = i + 1 < argc;
        if (a == "--rows" && has_value) {
            opt.rows = std::atoll(argv[++i]);
        } else if (a == "--cols" && has_value) {
            opt.cols = std::atoll(argv[++i]);
        } else if (a == "--calls" && has_value) {
            opt.calls = std::atoi(argv[++i]);
        } else if (a == "--tokens" && has_value) {
            opt.tokens = std::atoll(argv[++i]);
        } else if (a == "--f32") {
            opt.f32 = true;
        } else {
            return false;
        }
    }
    return opt.rows > 0 && opt.cols > 0 && opt.cols % 64 == 0 && opt.calls >= 0 &&
           opt.tokens >= 1 && opt.tokens <= 31;
}

}  // namespace

int main(int argc, char** argv) {
    Options opt;
    if (!parse(argc, argv, opt)) {
        std::fprintf(stderr,
                     "usage: kernel_calls_bench [--rows N] [--cols N (multiple of 64)] "
                     "[--calls N] [--tokens 1-31] [--f32]\n");
        return 2;
    }
    constexpr std::int64_t kGroup = 64;
    brigade::bench::FastRng rng;
    std::vector<std::uint8_t> codes(static_cast<std::size_t>(opt.rows * opt.cols / 2));
    for (auto& b : codes) b = static_cast<std::uint8_t>(rng.next());
    const auto n_groups = static_cast<std::size_t>(opt.rows * opt.cols / kGroup);
    std::vector<float> scales(n_groups), biases(n_groups);
    for (std::size_t g = 0; g < n_groups; ++g) {
        scales[g] = rng.uniform(0.001f, 0.01f);
        biases[g] = rng.uniform(-0.05f, 0.05f);
    }
    WeightMatrix w;
    w.dtype = DType::kU32;
    w.rows = opt.rows;
    w.cols = opt.cols;
    w.bits = 4;
    w.group_size = kGroup;
    w.scale_dtype = DType::kF32;
    w.data = codes.data();
    w.scales = scales.data();
    w.biases = biases.data();

    std::vector<float> x(static_cast<std::size_t>(opt.tokens * opt.cols)),
        y(static_cast<std::size_t>(opt.tokens * opt.rows));
    for (auto& v : x) v = rng.uniform(-1.0f, 1.0f);

    brigade::model::cpu::CpuTuning tuning;
    tuning.int16_activations = false;
    tuning.split_int8_activations = !opt.f32;
    // Arm's decode batches take the split-int8 kernel only where asked for (not measured on
    // Arm): here they do, so that --tokens compares it with the f32 tiles.
    tuning.split_int8_decode_max_tokens_neon = 16;
    brigade::model::cpu::CpuBackend backend(brigade::model::BackendOptions{1}, tuning);
    backend.set_rows_are_decode_steps(true);
    const bool split = !opt.f32 && brigade::model::cpu::split_int8_kernel_supports(w);

    const auto t0 = std::chrono::steady_clock::now();
    for (int c = 0; c < opt.calls; ++c) backend.matmul(w, x.data(), opt.tokens, y.data());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double check = 0;
    for (float v : y) check += v;
    std::printf("%s %lldx%lld q4g64, %lld token(s), %d call(s): %.3g s per call (checksum %.6g)\n",
                split ? "split-int8" : "f32", static_cast<long long>(opt.rows),
                static_cast<long long>(opt.cols), static_cast<long long>(opt.tokens), opt.calls,
                opt.calls > 0 ? s / opt.calls : 0.0, check);
    return 0;
}

// clang-format off
// First, so that HWY_TARGETS here is the kernels' set of targets.
#include "model/cpu/simd_targets.hpp"
#include <hwy/targets.h>
// clang-format on

#include "bench/cpu_tuning_choice.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>

namespace brigade::bench {
namespace {

using Tuning = model::cpu::CpuTuning;

// A switch flips a bool field of CpuTuning (KNOB), a number sets an integer one (KNOB=N,
// N >= min). One table, so that parsing and the error message cannot disagree.
struct AbKnob {
    const char* name;
    bool Tuning::*flag = nullptr;
    std::int64_t Tuning::*number = nullptr;
    long long min = 0;
};
const AbKnob kAbKnobs[] = {
    {"split-int8", &Tuning::split_int8_activations},
    {"amx", &Tuning::amx},
    {"amx-block-prefetch", &Tuning::amx_prefetch_next_block},
    {"amx-two-digits", &Tuning::amx_decode_two_digits},
    {"amx-pair-groups", &Tuning::amx_pair_groups},
    {"amx-pair-nibbles", &Tuning::amx_pair_nibbles},
    {"attention-prefetch", &Tuning::attention_prefetch_heads},
    {"attention-all-heads", &Tuning::attention_fewer_heads_per_tile},
    {"attention-stream-keys", nullptr, &Tuning::attention_stream_prefetch_keys, 0},
    {"prefetch-bytes", nullptr, &Tuning::prefetch_bytes, 0},
    {"attention-min-keys", nullptr, &Tuning::min_keys_per_split, 1},
    {"attention-splits", nullptr, &Tuning::long_context_splits_per_thread, 1},
    {"long-split-keys", nullptr, &Tuning::min_keys_per_long_split, 1},
    {"split-int8-serial", nullptr, &Tuning::split_int8_prepare_serial_below, 0},
    {"amx-prepare-serial", nullptr, &Tuning::amx_prepare_serial_below, 0},
    {"amx-min-tokens", nullptr, &Tuning::amx_min_tokens, 1},
    {"amx-8bit-min-tokens", nullptr, &Tuning::amx_8bit_min_tokens, 1},
    {"amx-bf16-min-tokens", nullptr, &Tuning::amx_bf16_min_tokens, 1},
    {"amx-bf16-large-min-tokens", nullptr, &Tuning::amx_bf16_large_min_tokens, 1},
    {"chunks-per-thread", nullptr, &Tuning::max_chunks_per_thread, 1},
    {"split-int8-max-tokens", nullptr, &Tuning::split_int8_max_tokens, 1},
    {"split-int8-decode-max-tokens", nullptr, &Tuning::split_int8_decode_max_tokens, 1},
    {"split-int8-decode-max-tokens-256", nullptr, &Tuning::split_int8_decode_max_tokens_256, 1},
    {"split-int8-decode-max-tokens-neon", nullptr, &Tuning::split_int8_decode_max_tokens_neon, 1},
    {"split-int8-pair", &Tuning::split_int8_pair},
    {"split-int8-four", &Tuning::split_int8_four},
    {"split-int8-decode-8bit", &Tuning::split_int8_decode_8bit},
    {"next-tile-prefetch", nullptr, &Tuning::next_tile_prefetch_row_bytes, 0},
    {"q4-lookup", &Tuning::q4_lookup},
    {"grouped-max-tokens", nullptr, &Tuning::grouped_max_tokens, 1},
    {"plain-tiles-max-tokens", nullptr, &Tuning::plain_tiles_max_tokens, 1},
    {"multi-row", &Tuning::grouped_multi_row},
};

}  // namespace

std::string ab_knob_list() {
    std::string list = "none";
    for (const AbKnob& k : kAbKnobs) {
        list.append(", ").append(k.name);
        if (k.number != nullptr) list.append("=N");
    }
    return list;
}

std::optional<Tuning> knob_applied(Tuning tuning, const std::string& knob) {
    const auto eq = knob.find('=');
    const std::string name = knob.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : knob.substr(eq + 1);
    if (name == "none" && eq == std::string::npos) return tuning;
    for (const AbKnob& k : kAbKnobs) {
        if (name != k.name) continue;
        if (k.flag != nullptr) {
            if (eq != std::string::npos) return std::nullopt;
            tuning.*k.flag = !(tuning.*k.flag);
            return tuning;
        }
        char* end = nullptr;
        const long long number = std::strtoll(value.c_str(), &end, 10);
        if (value.empty() || *end != '\0' || number < k.min) return std::nullopt;
        tuning.*k.number = number;
        return tuning;
    }
    return std::nullopt;
}

std::string isa_unavailable(const std::string& isa) {
    if (isa == "native") return "";
#if HWY_ARCH_X86
    namespace cpu = model::cpu;
    const auto variants = cpu::split_int8_variants_available();
    const bool avx_vnni = std::find(variants.begin(), variants.end(),
                                    cpu::SplitInt8Variant::kAvxVnni) != variants.end();
    const std::int64_t targets = hwy::SupportedTargets();
    if (isa == "avx512") return (targets & HWY_AVX3) != 0 ? "" : "this CPU has no AVX-512";
    if (isa == "avx2-vnni") {
        if ((targets & HWY_AVX2) == 0) return "this CPU has no AVX2";
        return avx_vnni ? "" : "this CPU has no AVX-VNNI";
    }
    if (isa == "avx2") return (targets & HWY_AVX2) != 0 ? "" : "this CPU has no AVX2";
    return "native, avx512, avx2-vnni or avx2";
#else
    return "only native on this architecture";
#endif
}

void hold_kernels_to_isa(const std::string& isa, Tuning& tuning) {
    if (isa == "native") return;
#if HWY_ARCH_X86
    if (isa == "avx2" || isa == "avx2-vnni") hwy::SetSupportedTargetsForTest(HWY_AVX2);
#endif
    tuning.amx = false;
    if (isa == "avx2-vnni") tuning.split_int8_variant = model::cpu::SplitInt8Variant::kAvxVnni;
    // Without VNNI the split-int8 kernel takes vpmaddubsw + vpmaddwd.
    if (isa == "avx2") tuning.split_int8_variant = model::cpu::SplitInt8Variant::kAvx2;
}

}  // namespace brigade::bench

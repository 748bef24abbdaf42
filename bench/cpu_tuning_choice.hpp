#pragma once
// How the benches choose the CPU backend's tuning from the command line: engine_bench's --ab
// knobs (one CpuTuning field changed against the defaults) and --isa / kernels_bench's --avx2
// (the kernels held to a smaller x86 instruction set, so one machine stands in for others).

#include <optional>
#include <string>

#include "model/cpu/cpu_backend.hpp"

namespace brigade::bench {

// "none, split-int8, ..., chunks-per-thread=N": every knob --ab accepts.
std::string ab_knob_list();
// `tuning` with KNOB applied: NAME flips a switch, NAME=N sets a number (N at least the knob's
// minimum), "none" changes nothing; nullopt for a knob not in the list or a value it does not
// take.
std::optional<model::cpu::CpuTuning> knob_applied(model::cpu::CpuTuning tuning,
                                                  const std::string& knob);

// --isa: native (what this machine runs), avx512 (AVX-512 without AMX: Zen 4, Ice Lake,
// Cascade Lake), avx2-vnni (Highway's AVX2 target, split-int8 at AVX-VNNI, no AMX: Alder Lake
// and later client cores), avx2 (Highway's AVX2 target, f32 kernels for quantized weights:
// Zen 2/3, Haswell to Comet Lake). Empty when this machine can run `isa`, else why not.
std::string isa_unavailable(const std::string& isa);
// Holds the kernels to `isa` (one that isa_unavailable accepts): sets the process's Highway
// targets (before any kernel runs) and the tuning's kernel choices.
void hold_kernels_to_isa(const std::string& isa, model::cpu::CpuTuning& tuning);

}  // namespace brigade::bench

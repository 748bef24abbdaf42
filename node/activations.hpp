#pragma once
// Hidden states on the wire (ActivationFrame::payload): f32 rows as BF16 (the default: half the
// bytes, ~3 significant digits) or F32 (exact; `--activations f32` for token-identical checks).

#include <cstdint>
#include <span>
#include <vector>

#include "mesh/messages.hpp"
#include "model/errors.hpp"

namespace brigade::node {

// Appends `values` in `dtype`, little-endian, to `out` (cleared first).
void encode_activations(std::span<const float> values, mesh::ActivationDType dtype,
                        std::vector<std::uint8_t>& out);

// `bytes` back to f32 into `out` (resized); an error when the size is not `n_values` elements.
model::Result<void> decode_activations(std::span<const std::uint8_t> bytes,
                                       mesh::ActivationDType dtype, std::size_t n_values,
                                       std::vector<float>& out);

}  // namespace brigade::node

// The SPIR-V modules compiled from shaders/gemv/*.comp, embedded by
// embed_spirv.cmake (the generated embedded_spirv.cpp defines this).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace coli::shaders {

// The module's words, or an empty span when no module has that name.
std::span<const std::uint32_t> embedded_spirv(std::string_view name);

}  // namespace coli::shaders

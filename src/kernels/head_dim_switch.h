// Runtime head dim -> compile-time template argument, the one switch of all three attention families
// (mma.sync, Hopper, fp32): a list type and a call over it. The lists themselves are flash_head_dims.h
// (generated: what exists) and flash_variants.h (written by CMake: what this build holds). Plain C++.
#pragma once
#include <array>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace lmscale::kernels {

// A list of head dims, ascending, as template arguments (empty where a build holds none of a family).
template <int... Ds>
struct HeadDimList {
  static constexpr std::array<int, sizeof...(Ds)> kValues{Ds...};
  static constexpr bool contains(int d) { return ((d == Ds) || ... || false); }
  // "16, 32, 64": what error messages print after "supported: ".
  static std::string str() {
    std::string s;
    ((s += (s.empty() ? "" : ", ") + std::to_string(Ds)), ...);
    return s;
  }
};

// Calls f(std::integral_constant<int, D>{}) for the D of the list equal to head_dim and returns true;
// returns false, calling nothing, when the list does not hold head_dim.
template <int... Ds, typename F>
bool with_head_dim(HeadDimList<Ds...>, int head_dim, F&& f) {
  return ((head_dim == Ds && (f(std::integral_constant<int, Ds>{}), true)) || ... || false);
}

// As with_head_dim, but a head dim outside the list throws std::runtime_error naming the caller, the
// kernel family and the list ("run_flash_fp32_fwd: head_dim 96 has no fp32 kernel; supported: 16, 32").
template <typename List, typename F>
void with_head_dim_or_throw(List list, int head_dim, const char* caller, const char* family, F&& f) {
  if (!with_head_dim(list, head_dim, static_cast<F&&>(f)))
    throw std::runtime_error(std::string(caller) + ": head_dim " + std::to_string(head_dim) + " has no " + family +
                             " kernel; supported: " + List::str());
}

}  // namespace lmscale::kernels

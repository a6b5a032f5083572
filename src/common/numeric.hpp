// Host-side scalar helpers shared by the CPU backend, the reference and the
// tests: f16/bf16 <-> f32 with round-to-nearest-even, and typed loads/stores
// of one element of a gdn_dtype_t tensor.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "gdn/gdn.h"

namespace gdn {

inline float bits_to_float(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline uint32_t float_to_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

inline float half_to_float(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (man << 13));  // inf / nan
    if (exp == 0) {
        if (man == 0) return bits_to_float(sign);
        // subnormal: value = man * 2^-24
        const float v = float(man) * 5.9604644775390625e-08f;
        return sign ? -v : v;
    }
    return bits_to_float(sign | ((exp + 112) << 23) | (man << 13));
}

inline uint16_t float_to_half(float f) {
    const uint32_t u = float_to_bits(f);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const uint32_t abs = u & 0x7fffffffu;
    if (abs >= 0x7f800000u)  // inf or nan
        return uint16_t(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
    if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: inf
    if (abs < 0x38800000u) {                                    // below 2^-14: subnormal half
        // round(|f| / 2^-24) to nearest even
        const float scaled = bits_to_float(abs) * 16777216.0f;  // exact (power of two)
        const float r = std::nearbyint(scaled);                 // default mode: ties to even
        return uint16_t(sign | uint32_t(r));
    }
    // normal: rebias and round the 13 dropped mantissa bits to nearest even
    uint32_t v = abs - 0x38000000u;  // exponent - 112
    const uint32_t rest = v & 0x1fffu;
    v >>= 13;
    if (rest > 0x1000u || (rest == 0x1000u && (v & 1u))) ++v;
    return uint16_t(sign | v);
}

inline float bf16_to_float(uint16_t b) { return bits_to_float(uint32_t(b) << 16); }

inline uint16_t float_to_bf16(float f) {
    uint32_t u = float_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);  // quiet nan
    u += 0x7fffu + ((u >> 16) & 1u);
    return uint16_t(u >> 16);
}

// Rounds an FP32 value to the nearest value of the given operand format.
inline float round_to_half(float f) { return half_to_float(float_to_half(f)); }
inline float round_to_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

inline float load_element(const void* base, gdn_dtype_t t, int64_t i) {
    switch (t) {
        case GDN_DTYPE_F32: return static_cast<const float*>(base)[i];
        case GDN_DTYPE_F16: return half_to_float(static_cast<const uint16_t*>(base)[i]);
        case GDN_DTYPE_BF16: return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
        default: break;  // a value gdn.h does not name (rejected by validation)
    }
    return 0.0f;
}

inline void store_element(void* base, gdn_dtype_t t, int64_t i, float x) {
    switch (t) {
        case GDN_DTYPE_F32: static_cast<float*>(base)[i] = x; break;
        case GDN_DTYPE_F16: static_cast<uint16_t*>(base)[i] = float_to_half(x); break;
        case GDN_DTYPE_BF16: static_cast<uint16_t*>(base)[i] = float_to_bf16(x); break;
        default: break;  // a value gdn.h does not name (rejected by validation)
    }
}

}  // namespace gdn

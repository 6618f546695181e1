// Block layouts of the quantized formats, byte-for-byte as ggml stores them in GGUF files
// (all fields little-endian; "fp16" fields hold IEEE binary16 bits). The reference code
// (one .cc per format) and the SIMD kernels both read these structs.
#pragma once

#include <cstddef>
#include <cstdint>

namespace frugal::quant {

inline constexpr int kQK = 32;           // elements per block of the 32-element formats
inline constexpr int kQK_K = 256;        // elements per super-block of the K-quants
inline constexpr int kKScaleBytes = 12;  // packed 6-bit scales/mins of Q3_K, Q4_K, Q5_K

struct BlockQ4_0 {
  uint16_t d;           // fp16 scale
  uint8_t qs[kQK / 2];  // byte j: element j (low nibble), element j+16 (high nibble)
};
struct BlockQ4_1 {
  uint16_t d;  // fp16 scale
  uint16_t m;  // fp16 offset
  uint8_t qs[kQK / 2];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];  // bit e of this LE u32 is the fifth bit of element e
  uint8_t qs[kQK / 2];
};
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};
struct BlockQ8_1 {
  uint16_t d;  // fp16 scale
  uint16_t s;  // fp16 of d * sum(qs)
  int8_t qs[kQK];
};
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[kQK / 2];  // indices into kIQ4NLValues, nibbles as in Q4_0
};

// MXFP4 (GGUF type 39, ggml's block_mxfp4): 32 E2M1 codes, one E8M0 scale: x = 2^(e-127) * E2M1[q].
struct BlockMXFP4 {
  uint8_t e;            // E8M0 scale
  uint8_t qs[kQK / 2];  // byte j: element j (low nibble), element j+16 (high nibble), as Q4_0
};

// NVFP4 (GGUF type 40): four sub-blocks of 16 E2M1 codes, each with a UE4M3 scale, in one
// 36-byte block of 64 elements: x = ue4m3(d[s]) * E2M1[q] * (the tensor's F32 global scale,
// applied to the product: WeightTensor::scale). Sub-block s holds elements 16s..16s+15 in
// qs[8s..8s+7], byte j pairing element 16s+j (low nibble) with 16s+j+8 (high nibble).
inline constexpr int kQK_NVFP4 = 64;     // elements per block
inline constexpr int kQK_NVFP4_SUB = 16;  // elements per UE4M3 scale
struct BlockNVFP4 {
  uint8_t d[kQK_NVFP4 / kQK_NVFP4_SUB];  // UE4M3 scales of the four sub-blocks
  uint8_t qs[kQK_NVFP4 / 2];
};

// HBQ (hierarchical block quantization, quant/hbq.cc; frugal's own GGUF types 1024 and 1025): an L1
// block of 128 E2M1 codes with one UE5M3 scale s, split into micro-blocks of 8 (HBQ-A) or 32
// (HBQ-E) elements that each carry a 2-bit code c choosing a multiplier from the block's set:
//   x = ue5m3(s) * (kHbqAlphaEighths[set][c] / 8) * E2M1[q].
// qs holds four 32-element groups of 16 bytes laid out as Q4_0/MXFP4 (byte j: element j low
// nibble, element j+16 high nibble), so each group lines up with one Q8_0 activation block.
// HBQ-A's c packs micro-block m into bits 2(m%4)..2(m%4)+1 of c[m/4]; HBQ-E's four codes share one
// byte the same way.
inline constexpr int kQK_HBQ = 128;
inline constexpr int kQK_HBQ_A_MICRO = 8;
inline constexpr int kQK_HBQ_E_MICRO = 32;
struct BlockHBQ_A {
  uint8_t s;    // UE5M3 scale
  uint8_t set;  // which multiplier set (HbqAlphaSet in quant/hbq.h)
  uint8_t c[kQK_HBQ / kQK_HBQ_A_MICRO / 4];
  uint8_t qs[kQK_HBQ / 2];
};
struct BlockHBQ_E {
  uint8_t s;
  uint8_t set;
  uint8_t c;
  uint8_t qs[kQK_HBQ / 2];
};

struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];  // per 16 elements: low nibble scale, high nibble min
  uint8_t qs[kQK_K / 4];       // 2-bit codes
  uint16_t d;                  // fp16 scale of the scales
  uint16_t dmin;               // fp16 scale of the mins
};
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];      // third bit of each code (set: no -4 offset)
  uint8_t qs[kQK_K / 4];         // low 2 bits of each code
  uint8_t scales[kKScaleBytes];  // 16 signed 6-bit scales, +32 offset
  uint16_t d;
};
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];  // 8 pairs of 6-bit (scale, min)
  uint8_t qs[kQK_K / 2];
};
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];  // low 4 bits
  uint8_t qh[kQK_K / 4];  // high 2 bits
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
struct BlockQ8_K {
  float d;  // plain f32, unlike every other format
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];  // sums of each 16 quants, for the K-quant min terms
};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockMXFP4) == 17);
static_assert(sizeof(BlockNVFP4) == 36);
static_assert(sizeof(BlockHBQ_A) == 70);
static_assert(sizeof(BlockHBQ_E) == 67);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);
static_assert(offsetof(BlockQ3_K, d) == 108);
static_assert(offsetof(BlockQ6_K, d) == 208);

// The non-linear 4-bit grid of IQ4_NL.
inline constexpr int8_t kIQ4NLValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// Scale j and min j (6 bits each) of the 12-byte packing shared by Q4_K and Q5_K.
inline void unpack_scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

inline void pack_scale_min_k4(const uint8_t* sc, const uint8_t* m, uint8_t* q) {
  for (int j = 0; j < 4; ++j) {
    q[j] = sc[j];
    q[j + 4] = m[j];
  }
  for (int j = 4; j < 8; ++j) {
    q[j + 4] = static_cast<uint8_t>((sc[j] & 0xF) | ((m[j] & 0xF) << 4));
    q[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
    q[j] |= static_cast<uint8_t>((m[j] >> 4) << 6);
  }
}

// The 16 signed scales of Q3_K (raw 6-bit value minus 32).
inline void unpack_scales_q3_k(const uint8_t* packed, int8_t* out) {
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? (packed[j] & 0xF) : (packed[j - 8] >> 4);
    const int high = (packed[8 + (j % 4)] >> (2 * (j / 4))) & 3;
    out[j] = static_cast<int8_t>((low | (high << 4)) - 32);
  }
}

// Inverse of unpack_scales_q3_k; values must lie in [-32, 31].
inline void pack_scales_q3_k(const int8_t* scales, uint8_t* packed) {
  for (int j = 0; j < kKScaleBytes; ++j) packed[j] = 0;
  for (int j = 0; j < 16; ++j) {
    const int l = scales[j] + 32;
    if (j < 8) {
      packed[j] = static_cast<uint8_t>(l & 0xF);
    } else {
      packed[j - 8] |= static_cast<uint8_t>((l & 0xF) << 4);
    }
    packed[8 + (j % 4)] |= static_cast<uint8_t>((l >> 4) << (2 * (j / 4)));
  }
}

}  // namespace frugal::quant

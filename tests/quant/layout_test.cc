// Bit layouts checked against hand-built blocks: the bytes are written here at the offsets of
// the reference notes (not through our structs or quantizers), then decoded by to_float_ref.
// Also known-value checks of the bit-exact reference quantizers' rounding rules.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <random>
#include <vector>

#include "frugal/core/half.h"
#include "frugal/quant/type_traits.h"

namespace frugal {
namespace {

void put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_fp16(v);
  std::memcpy(p, &h, 2);
}

std::vector<float> decode(DType type, const uint8_t* block) {
  const TypeTraits* t = type_traits(type);
  EXPECT_NE(t, nullptr);
  std::vector<float> y(static_cast<size_t>(dtype_layout(type).block_size));
  t->to_float_ref(block, y.data(), static_cast<int64_t>(y.size()));
  return y;
}

// ---- hand-derived single blocks ------------------------------------------------------------

TEST(QuantLayout, Q4_0Nibbles) {
  std::array<uint8_t, 18> b{};
  put_f16(&b[0], 0.5f);
  b[2 + 3] = 0xA2;  // element 3 -> code 2, element 19 -> code 10
  const auto y = decode(DType::kQ4_0, b.data());
  EXPECT_EQ(y[3], 0.5f * (2 - 8));
  EXPECT_EQ(y[19], 0.5f * (10 - 8));
  EXPECT_EQ(y[0], 0.5f * -8);
}

TEST(QuantLayout, Q4_1Offset) {
  std::array<uint8_t, 20> b{};
  put_f16(&b[0], 0.25f);
  put_f16(&b[2], -3.f);
  b[4 + 15] = 0xF1;  // element 15 -> 1, element 31 -> 15
  const auto y = decode(DType::kQ4_1, b.data());
  EXPECT_EQ(y[15], 0.25f * 1 - 3.f);
  EXPECT_EQ(y[31], 0.25f * 15 - 3.f);
  EXPECT_EQ(y[1], -3.f);
}

TEST(QuantLayout, Q5_0HighBitsAreLittleEndianU32) {
  std::array<uint8_t, 22> b{};
  put_f16(&b[0], 2.f);
  b[2] = 0x01;       // bit 0: element 0
  b[5] = 0x80;       // bit 31: element 31
  b[6 + 15] = 0xF0;  // element 31 low bits 15
  const auto y = decode(DType::kQ5_0, b.data());
  EXPECT_EQ(y[0], 0.f);         // code 16
  EXPECT_EQ(y[31], 2.f * 15);   // code 31
  EXPECT_EQ(y[16], 2.f * -16);  // code 0
}

TEST(QuantLayout, Q5_1Offset) {
  std::array<uint8_t, 24> b{};
  put_f16(&b[0], 1.f);
  put_f16(&b[2], 0.5f);
  b[4 + 2] = 0x02;  // bit 17: element 17
  b[8 + 1] = 0x3C;  // element 1 -> 12, element 17 -> 3 | 16
  const auto y = decode(DType::kQ5_1, b.data());
  EXPECT_EQ(y[1], 12.5f);
  EXPECT_EQ(y[17], 19.5f);
}

TEST(QuantLayout, Q8_0AndQ8_1) {
  std::array<uint8_t, 36> b{};
  put_f16(&b[0], 0.125f);
  put_f16(&b[2], 99.f);  // Q8_1's s: never used for dequantization
  b[4 + 7] = static_cast<uint8_t>(-100);
  EXPECT_EQ(decode(DType::kQ8_1, b.data())[7], 0.125f * -100);
  std::array<uint8_t, 34> c{};
  put_f16(&c[0], 0.125f);
  c[2 + 31] = 77;
  EXPECT_EQ(decode(DType::kQ8_0, c.data())[31], 0.125f * 77);
}

TEST(QuantLayout, IQ4_NLGrid) {
  static const int kGrid[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                1,    13,   25,  38,  53,  69,  89,  113};
  std::array<uint8_t, 18> b{};
  put_f16(&b[0], 0.5f);
  for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = decode(DType::kIQ4_NL, b.data());
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * kGrid[j]);
    EXPECT_EQ(y[j + 16], 0.5f * kGrid[15 - j]);
  }
}

TEST(QuantLayout, Q2_KCodeAndScalePositions) {
  std::array<uint8_t, 84> b{};
  for (int j = 0; j < 16; ++j) b[j] = 0x21;  // scale 1, min 2
  b[16 + 33] = 0b11100100;  // h=1, l=1: elements 129, 161, 193, 225 get codes 0, 1, 2, 3
  put_f16(&b[80], 1.f);
  put_f16(&b[82], 0.5f);
  const auto y = decode(DType::kQ2_K, b.data());
  EXPECT_EQ(y[129], -1.f);
  EXPECT_EQ(y[161], 0.f);
  EXPECT_EQ(y[193], 1.f);
  EXPECT_EQ(y[225], 2.f);
  EXPECT_EQ(y[1], -1.f);
}

TEST(QuantLayout, Q3_KHmaskAndScales) {
  std::array<uint8_t, 110> b{};
  b[5] = 0b00000100;                              // hmask[5] bit 2: element 2*32 + 5 = 69
  for (int i = 0; i < 8; ++i) b[96 + i] = 0x11;   // low nibbles of raw scale 33
  for (int i = 8; i < 12; ++i) b[96 + i] = 0xAA;  // high bits 0b10 of each
  put_f16(&b[108], 1.f);
  const auto y = decode(DType::kQ3_K, b.data());
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], e == 69 ? 0.f : -4.f) << e;
  // One scale with distinct bits: scale 13 (raw 45 = 0b10'1101) -> byte 5 high nibble,
  // bits 6..7 (2 * (13/4)) of byte 8 + 13%4 = 9.
  std::array<uint8_t, 110> c{};
  c[96 + 5] = 0xD0;
  c[96 + 9] = 0x80;
  put_f16(&c[108], 0.5f);
  std::memset(&c[0], 0xFF, 32);  // all high bits set: q = low bits = 0 -> set codes below
  c[32 + 16] = 0x03;             // h=0, l=16, j=0: element 16 -> low bits 3 (sub-block 1)
  c[32 + 32 + 16] = 0x30;        // h=1, l=16, j=2: element 128+64+16 = 208 (sub-block 13)
  const auto z = decode(DType::kQ3_K, c.data());
  EXPECT_EQ(z[208], 0.5f * 13 * 3);
  EXPECT_EQ(z[16], 0.5f * -32 * 3);  // sub-block 1: raw 0 -> -32
}

TEST(QuantLayout, Q4_KScalePacking) {
  std::array<uint8_t, 144> b{};
  put_f16(&b[0], 1.f);
  put_f16(&b[2], 1.f);
  // sc_5 = 6 | (3 << 4) = 54 (top bits in byte 1), m_7 = 1 | (2 << 4) = 33 (top bits in byte 7).
  const uint8_t scales[12] = {1, 2 | 0xC0, 3, 4, 0, 0, 0, 0 | 0x80, 5, 6, 7, 8 | 0x10};
  std::memcpy(&b[4], scales, 12);
  std::memset(&b[16], 0x11, 128);  // every code 1
  const auto y = decode(DType::kQ4_K, b.data());
  const float expect[8] = {1, 2, 3, 4, 5, 54, 7, 8 - 33};
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], expect[e / 32]) << e;
}

TEST(QuantLayout, Q5_KHighBits) {
  std::array<uint8_t, 176> b{};
  put_f16(&b[0], 1.f);
  for (int j = 0; j < 4; ++j) b[4 + j] = 1;      // scales 0..3 = 1, mins 0
  for (int j = 8; j < 12; ++j) b[4 + j] = 0x01;  // scales 4..7 = 1
  b[16 + 3] = 0b00000110;  // qh[3]: bit 1 -> element 32+3, bit 2 -> element 64+3
  b[48 + 32 + 3] = 0x20;   // chunk 1, l=3: element 64+32+3 = 99 gets low bits 2
  const auto y = decode(DType::kQ5_K, b.data());
  for (int e = 0; e < 256; ++e) {
    const float expect = (e == 35 || e == 67) ? 16.f : (e == 99 ? 2.f : 0.f);
    EXPECT_EQ(y[e], expect) << e;
  }
}

TEST(QuantLayout, Q6_KNibblesAndHighBits) {
  std::array<uint8_t, 210> b{};
  b[0] = 0x21;          // element 0 low 1, element 64 low 2
  b[32] = 0x43;         // element 32 low 3, element 96 low 4
  b[128] = 0b11100100;  // high bits: element 0 -> 0, 32 -> 1, 64 -> 2, 96 -> 3
  for (int j = 0; j < 16; ++j) b[192 + j] = 1;
  b[192 + 6] = static_cast<uint8_t>(-2);  // sub-block 6 (elements 96..111)
  put_f16(&b[208], 1.f);
  const auto y = decode(DType::kQ6_K, b.data());
  EXPECT_EQ(y[0], -31.f);
  EXPECT_EQ(y[32], -13.f);
  EXPECT_EQ(y[64], 2.f);
  EXPECT_EQ(y[96], -2.f * 20);
  EXPECT_EQ(y[1], -32.f);
  EXPECT_EQ(y[97], -2.f * -32);
}

// ---- randomized encoders written from the notes, decoded by every type's to_float_ref ------

struct KCodes {
  std::vector<int> q;  // per element
  std::vector<int> sc;
  std::vector<int> m;
};

KCodes random_codes(std::mt19937& rng, int qmax, int nsub, int scmax, int mmax) {
  KCodes k;
  for (int e = 0; e < 256; ++e) k.q.push_back(static_cast<int>(rng() % (qmax + 1)));
  for (int j = 0; j < nsub; ++j) {
    k.sc.push_back(static_cast<int>(rng() % (scmax + 1)));
    k.m.push_back(static_cast<int>(rng() % (mmax + 1)));
  }
  return k;
}

TEST(QuantLayout, RandomQ4_KAndQ5_KBlocks) {
  std::mt19937 rng(11);
  for (int iter = 0; iter < 20; ++iter) {
    for (const bool five : {false, true}) {
      const KCodes k = random_codes(rng, five ? 31 : 15, 8, 63, 63);
      std::vector<uint8_t> b(five ? 176 : 144, 0);
      put_f16(&b[0], 0.25f);
      put_f16(&b[2], 0.125f);
      uint8_t* s = &b[4];
      for (int j = 0; j < 8; ++j) {
        if (j < 4) {
          s[j] |= static_cast<uint8_t>(k.sc[j]);
          s[j + 4] |= static_cast<uint8_t>(k.m[j]);
        } else {
          s[j + 4] = static_cast<uint8_t>((k.sc[j] & 15) | ((k.m[j] & 15) << 4));
          s[j - 4] |= static_cast<uint8_t>((k.sc[j] >> 4) << 6);
          s[j] |= static_cast<uint8_t>((k.m[j] >> 4) << 6);
        }
      }
      uint8_t* qs = &b[five ? 48 : 16];
      for (int e = 0; e < 256; ++e) {
        const int c = e / 64;
        const int l = e % 32;
        const bool upper = (e % 64) >= 32;
        qs[32 * c + l] |= static_cast<uint8_t>((k.q[e] & 15) << (upper ? 4 : 0));
        if (five && (k.q[e] >> 4))
          b[16 + l] |= static_cast<uint8_t>(1 << (2 * c + (upper ? 1 : 0)));
      }
      const auto y = decode(five ? DType::kQ5_K : DType::kQ4_K, b.data());
      for (int e = 0; e < 256; ++e) {
        ASSERT_EQ(y[e], 0.25f * k.sc[e / 32] * k.q[e] - 0.125f * k.m[e / 32]) << e;
      }
    }
  }
}

TEST(QuantLayout, RandomQ2_KQ3_KQ6_KBlocks) {
  std::mt19937 rng(12);
  for (int iter = 0; iter < 20; ++iter) {
    {  // Q2_K
      const KCodes k = random_codes(rng, 3, 16, 15, 15);
      std::vector<uint8_t> b(84, 0);
      for (int j = 0; j < 16; ++j) b[j] = static_cast<uint8_t>(k.sc[j] | (k.m[j] << 4));
      for (int e = 0; e < 256; ++e)
        b[16 + 32 * (e / 128) + e % 32] |= static_cast<uint8_t>(k.q[e] << (2 * ((e % 128) / 32)));
      put_f16(&b[80], 0.5f);
      put_f16(&b[82], 0.25f);
      const auto y = decode(DType::kQ2_K, b.data());
      for (int e = 0; e < 256; ++e)
        ASSERT_EQ(y[e], 0.5f * k.sc[e / 16] * k.q[e] - 0.25f * k.m[e / 16]) << e;
    }
    {  // Q3_K: codes q in [-4, 3], scales in [-32, 31]
      const KCodes k = random_codes(rng, 7, 16, 63, 0);
      std::vector<uint8_t> b(110, 0);
      for (int e = 0; e < 256; ++e) {
        const int q = k.q[e] - 4;
        const int low = q >= 0 ? q : q + 4;
        if (q >= 0) b[e % 32] |= static_cast<uint8_t>(1 << (e / 32));
        b[32 + 32 * (e / 128) + e % 32] |= static_cast<uint8_t>(low << (2 * ((e % 128) / 32)));
      }
      for (int j = 0; j < 16; ++j) {
        const int raw = k.sc[j];
        if (j < 8) {
          b[96 + j] |= static_cast<uint8_t>(raw & 15);
        } else {
          b[96 + j - 8] |= static_cast<uint8_t>((raw & 15) << 4);
        }
        b[96 + 8 + j % 4] |= static_cast<uint8_t>((raw >> 4) << (2 * (j / 4)));
      }
      put_f16(&b[108], 0.5f);
      const auto y = decode(DType::kQ3_K, b.data());
      for (int e = 0; e < 256; ++e) ASSERT_EQ(y[e], 0.5f * (k.sc[e / 16] - 32) * (k.q[e] - 4)) << e;
    }
    {  // Q6_K: codes in [0, 63] stored, value q - 32; int8 scales
      const KCodes k = random_codes(rng, 63, 16, 255, 0);
      std::vector<uint8_t> b(210, 0);
      for (int e = 0; e < 256; ++e) {
        const int h = e / 128;
        const int kk = (e % 128) / 32;
        const int l = e % 32;
        const int idx = 64 * h + (kk % 2 == 1 ? 32 : 0) + l;
        b[idx] |= static_cast<uint8_t>((k.q[e] & 15) << (kk >= 2 ? 4 : 0));
        b[128 + 32 * h + l] |= static_cast<uint8_t>((k.q[e] >> 4) << (2 * kk));
      }
      for (int j = 0; j < 16; ++j) b[192 + j] = static_cast<uint8_t>(k.sc[j]);
      put_f16(&b[208], 0.25f);
      const auto y = decode(DType::kQ6_K, b.data());
      for (int e = 0; e < 256; ++e) {
        ASSERT_EQ(y[e], 0.25f * static_cast<int8_t>(k.sc[e / 16]) * (k.q[e] - 32)) << e;
      }
    }
  }
}

// ---- rounding rules of the bit-exact reference quantizers -------------------------------------

TEST(QuantReferenceRounding, Q8_0RoundsHalfAwayFromZero) {
  std::vector<float> x(32, 0.f);
  x[0] = 127.f;  // d = 1
  x[1] = -63.5f;
  x[2] = 0.5f;
  x[3] = 2.5f;
  x[4] = -2.5f;
  x[5] = 1.49f;
  std::array<uint8_t, 34> q{};
  type_traits(DType::kQ8_0)->from_float_ref(x.data(), q.data(), 32);
  uint16_t d;
  std::memcpy(&d, &q[0], 2);
  EXPECT_EQ(fp16_to_f32(d), 1.f);
  const int8_t* qs = reinterpret_cast<const int8_t*>(&q[2]);
  EXPECT_EQ(qs[0], 127);
  EXPECT_EQ(qs[1], -64);
  EXPECT_EQ(qs[2], 1);
  EXPECT_EQ(qs[3], 3);
  EXPECT_EQ(qs[4], -3);
  EXPECT_EQ(qs[5], 1);
}

TEST(QuantReferenceRounding, Q8_1StoresScaledSum) {
  std::vector<float> x(32, 0.f);
  x[0] = 127.f;
  x[1] = -27.f;
  x[2] = 2.5f;
  std::array<uint8_t, 36> q{};
  type_traits(DType::kQ8_1)->from_float_ref(x.data(), q.data(), 32);
  uint16_t s;
  std::memcpy(&s, &q[2], 2);
  EXPECT_EQ(fp16_to_f32(s), 127.f - 27.f + 3.f);
}

TEST(QuantReferenceRounding, Q8_KRoundsHalfToEvenAndFirstMaxWins) {
  std::vector<float> x(256, 0.f);
  x[0] = -127.f;  // signed max: iscale = 1
  x[1] = 2.5f;
  x[2] = 3.5f;
  x[3] = -0.5f;
  x[17] = 127.f;  // same magnitude later: maps to +127
  std::vector<uint8_t> q(292);
  type_traits(DType::kQ8_K)->from_float_ref(x.data(), q.data(), 256);
  float d;
  std::memcpy(&d, &q[0], 4);
  EXPECT_EQ(d, 1.f);
  const int8_t* qs = reinterpret_cast<const int8_t*>(&q[4]);
  EXPECT_EQ(qs[0], -127);
  EXPECT_EQ(qs[1], 2);
  EXPECT_EQ(qs[2], 4);
  EXPECT_EQ(qs[3], 0);
  EXPECT_EQ(qs[17], 127);
  int16_t bsums[16];
  std::memcpy(bsums, &q[260], 32);
  EXPECT_EQ(bsums[0], -127 + 2 + 4);
  EXPECT_EQ(bsums[1], 127);

  x[0] = 127.f;  // now the positive one comes first: it maps to -127
  x[17] = -127.f;
  type_traits(DType::kQ8_K)->from_float_ref(x.data(), q.data(), 256);
  std::memcpy(&d, &q[0], 4);
  EXPECT_EQ(d, -1.f);
  EXPECT_EQ(qs[0], -127);
  EXPECT_EQ(qs[1], -2);
  EXPECT_EQ(qs[17], 127);
}

TEST(QuantReferenceRounding, Q4_0TruncatesAfterHalfOffset) {
  std::vector<float> x(32, 0.f);
  x[0] = -8.f;  // signed max: d = -8 / -8 = 1
  x[1] = 7.f;
  x[2] = 7.4f;
  x[3] = 0.5f;
  x[4] = -0.5f;
  x[5] = -7.6f;
  x[16] = 3.f;
  std::array<uint8_t, 18> q{};
  type_traits(DType::kQ4_0)->from_float_ref(x.data(), q.data(), 32);
  const uint8_t* qs = &q[2];
  EXPECT_EQ(qs[0] & 15, 0);
  EXPECT_EQ(qs[1] & 15, 15);
  EXPECT_EQ(qs[2] & 15, 15);
  EXPECT_EQ(qs[3] & 15, 9);
  EXPECT_EQ(qs[4] & 15, 8);
  EXPECT_EQ(qs[5] & 15, 0);
  EXPECT_EQ(qs[0] >> 4, 11);  // element 16: trunc(3 + 8.5)
  EXPECT_EQ(qs[6], 8 | (8 << 4));
}

TEST(QuantReferenceRounding, Q4_1AndQ5_1UseMinAndRange) {
  std::vector<float> x(32, 0.f);
  x[0] = -1.f;
  x[1] = 14.f;  // range 15: d = 1, m = -1
  x[2] = 0.5f;  // (0.5 + 1) + 0.5 = 2 -> 2
  x[3] = 0.4f;  // 1.9 -> 1
  std::array<uint8_t, 20> q{};
  type_traits(DType::kQ4_1)->from_float_ref(x.data(), q.data(), 32);
  EXPECT_EQ(q[4 + 0] & 15, 0);
  EXPECT_EQ(q[4 + 1] & 15, 15);
  EXPECT_EQ(q[4 + 2] & 15, 2);
  EXPECT_EQ(q[4 + 3] & 15, 1);
  EXPECT_EQ(q[4 + 4] & 15, 1);  // x = 0 -> 1.5 -> 1
  x[1] = 30.f;                  // range 31: d = 1
  std::array<uint8_t, 24> r{};
  type_traits(DType::kQ5_1)->from_float_ref(x.data(), r.data(), 32);
  EXPECT_EQ(r[8 + 1] & 15, 15);  // code 31: low nibble 15, fifth bit set
  EXPECT_EQ(r[4] & 2, 2);
  EXPECT_EQ(r[8 + 2] & 15, 2);
}

TEST(QuantReferenceRounding, Q5_0SignedMaxMapsToZero) {
  std::vector<float> x(32, 0.f);
  x[0] = 16.f;  // d = 16 / -16 = -1
  x[1] = -15.f;
  x[2] = 1.f;
  std::array<uint8_t, 22> q{};
  type_traits(DType::kQ5_0)->from_float_ref(x.data(), q.data(), 32);
  uint32_t qh;
  std::memcpy(&qh, &q[2], 4);
  const uint8_t* qs = &q[6];
  auto code = [&](int e) {
    return (e < 16 ? (qs[e] & 15) : (qs[e - 16] >> 4)) | (((qh >> e) & 1) << 4);
  };
  EXPECT_EQ(code(0), 0);
  EXPECT_EQ(code(1), 31);  // trunc(15 + 16.5)
  EXPECT_EQ(code(2), 15);  // trunc(-1 + 16.5)
  EXPECT_EQ(code(3), 16);
}

}  // namespace
}  // namespace frugal

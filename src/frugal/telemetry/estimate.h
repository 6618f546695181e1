// The energy *estimate*: bytes moved from memory x pJ/byte + arithmetic x pJ/FLOP. It is reported
// beside a measurement under its own name ("estimate"), never in its place. It counts only the
// dynamic energy of DRAM/HBM traffic and of arithmetic: idle and static power, caches, the
// interconnect and the host are left out, so it is a lower bound of the order of magnitude, not a
// substitute for a counter.
//
// Constants (both from published figures; the arithmetic ones are for a 45 nm process and are
// larger than on current nodes):
//   cpu  DRAM 162.5 pJ/byte: a 64-bit DRAM access costs 1.3-2.6 nJ (M. Horowitz, "Computing's
//        energy problem (and what we can do about it)", ISSCC 2014, the energy table); the low end,
//        1.3 nJ / 8 bytes.
//        FP32 2.3 pJ/FLOP: a 32-bit float multiply 3.7 pJ + add 0.9 pJ = one FMA (2 FLOPs), same
//        source.
//   cuda HBM 31.2 pJ/byte: HBM2 at 3.9 pJ/bit (M. O'Connor et al., "Fine-Grained DRAM:
//        Energy-Efficient DRAM for Extreme Bandwidth Systems", MICRO 2017, the HBM2 baseline).
//        FP16 0.75 pJ/FLOP: a 16-bit float multiply 1.1 pJ + add 0.4 pJ per FMA (Horowitz 2014).
#pragma once

#include <string>

namespace frugal::telemetry {

struct CostModel {
  std::string name;       // "cpu-ddr-fp32", "gpu-hbm2-fp16"
  double pj_per_byte = 0;
  double pj_per_flop = 0;
};

// The model for a backend name ("cpu", "cuda"); the cpu one for anything else.
const CostModel& cost_model_for(const std::string& backend);

// The work of a phase: what the estimate multiplies.
struct Work {
  double weight_bytes = 0;  // weight bytes read (a request's share of each step's one pass)
  double kv_bytes = 0;      // K and V bytes read by attention
  double flops = 0;         // matrix and attention arithmetic (2 per multiply-add)
  void merge(const Work& o) {
    weight_bytes += o.weight_bytes;
    kv_bytes += o.kv_bytes;
    flops += o.flops;
  }
};

inline double estimate_joules(const Work& w, const CostModel& m) {
  return ((w.weight_bytes + w.kv_bytes) * m.pj_per_byte + w.flops * m.pj_per_flop) * 1e-12;
}

}  // namespace frugal::telemetry

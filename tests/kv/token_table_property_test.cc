// Random admit / append / evict / finish / fork / truncate steps over many sequences sharing one
// small pool, checked after every step against a plain model of what each sequence should hold.
//
// The storage the tables point into is simulated: every row holds a number that stands for its
// K/V content, a hash of the token prefix that produced it and of its (layer, head), as a real
// model's rows are. The test applies the copies and moves the tables ask for, exactly as the
// cache that owns the bytes will, and then reads every row of every live sequence back. So a page
// leaked, owned twice, written while shared, or reused for the wrong prefix shows up as a wrong
// value, beside the pool's own counts.
//
// Seeds are fresh each run; FRUGAL_TEST_SEED=N replays one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "frugal/core/hash.h"
#include "frugal/kv/token_table.h"

namespace frugal {
namespace {

constexpr int kLayers = 2;
constexpr int kHeads = 2;
constexpr int32_t kPageTokens = 4;
constexpr int32_t kPages = 160;
constexpr size_t kMaxLive = 12;
constexpr int kSteps = 100000;

uint64_t test_seed() {
  if (const char* s = std::getenv("FRUGAL_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
}

// What one sequence should hold, kept without pages.
struct Expected {
  std::vector<int32_t> tokens;        // token ids by position
  std::vector<uint64_t> prefix_hash;  // [pos]: hash of tokens[0..pos]
  struct Row {
    int32_t pos;
    uint64_t value;
  };
  std::vector<std::vector<Row>> heads;  // [layer * kHeads + head], in slot order
};

uint64_t row_value(uint64_t prefix_hash, int head_index) { return hash_combine(prefix_hash, static_cast<uint64_t>(head_index)); }

struct Sequence {
  TokenTable table;
  Expected want;
};

class PoolModel {
 public:
  explicit PoolModel(uint64_t seed) : rng_(seed), pool_(kPages), store_(static_cast<size_t>(kPages * kPageTokens), 0) {
    shape_.n_layer = kLayers;
    shape_.n_head_kv = kHeads;
    shape_.page_tokens = kPageTokens;
    // A few shared "system prompts" make prefix hits common.
    for (int i = 0; i < 3; ++i) {
      std::vector<int32_t> p(static_cast<size_t>(uniform(4, 14)));
      for (auto& t : p) t = uniform(0, 7);
      system_prompts_.push_back(p);
    }
  }

  // One random step; an error message when an invariant broke.
  std::optional<std::string> step() {
    const int r = uniform(0, 99);
    if (seqs_.empty() || (r < 10 && seqs_.size() < kMaxLive)) return admit();
    Sequence& s = seqs_[static_cast<size_t>(uniform(0, static_cast<int>(seqs_.size()) - 1))];
    if (r < 62) return decode(s);
    if (r < 80) return evict(s);
    if (r < 88) return finish(s);
    if (r < 93 && seqs_.size() < kMaxLive) return fork(s);
    if (r < 97) return truncate(s);
    s.table.publish_prefix(s.want.tokens);
    return std::nullopt;
  }

  std::optional<std::string> check();
  double worst_fragmentation() const { return worst_fragmentation_; }
  int64_t refusals() const { return refusals_; }
  const PagePool& pool() const { return pool_; }

 private:
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  // Holders per page, counted from the tables.
  std::vector<int32_t> holders() const {
    std::vector<int32_t> n(static_cast<size_t>(kPages), 0);
    for (const Sequence& s : seqs_) {
      for (int l = 0; l < kLayers; ++l) {
        for (int h = 0; h < kHeads; ++h) {
          for (PageId p : s.table.pages(l, h)) ++n[static_cast<size_t>(p)];
        }
      }
    }
    return n;
  }

  // Pages reserve(n) must take, computed from the model rather than asked of the table.
  int32_t expected_pages_for_reserve(const Sequence& s, int32_t n) const {
    const std::vector<int32_t> held = holders();
    int32_t need = 0;
    for (int l = 0; l < kLayers; ++l) {
      for (int h = 0; h < kHeads; ++h) {
        const int32_t size = s.table.size(l, h);
        need += (size + n + kPageTokens - 1) / kPageTokens - (size + kPageTokens - 1) / kPageTokens;
        if (size % kPageTokens != 0) {
          const PageId last = s.table.pages(l, h).back();
          if (held[static_cast<size_t>(last)] > 1) ++need;
        }
      }
    }
    return need;
  }

  void push_token(Expected& e, int32_t token) {
    const uint64_t parent = e.prefix_hash.empty() ? 0x5eed : e.prefix_hash.back();
    e.tokens.push_back(token);
    e.prefix_hash.push_back(hash_combine(parent, static_cast<uint64_t>(token)));
  }

  void apply(const std::vector<PageCopy>& copies) {
    for (const PageCopy& c : copies) {
      for (int32_t r = 0; r < c.rows; ++r) {
        store_[static_cast<size_t>(c.to * kPageTokens + r)] = store_[static_cast<size_t>(c.from * kPageTokens + r)];
      }
    }
  }

  // Appends positions [from, e.tokens.size()) to the table (room reserved) and the model.
  void write_rows(Sequence& s, int32_t from) {
    for (int32_t pos = from; pos < static_cast<int32_t>(s.want.tokens.size()); ++pos) {
      for (int l = 0; l < kLayers; ++l) {
        s.table.append(l, pos);
        for (int h = 0; h < kHeads; ++h) {
          const int hi = l * kHeads + h;
          const uint64_t v = row_value(s.want.prefix_hash[static_cast<size_t>(pos)], hi);
          const PageRow at = s.table.row(l, h, s.table.size(l, h) - 1);
          store_[static_cast<size_t>(at.page * kPageTokens + at.row)] = v;
          s.want.heads[static_cast<size_t>(hi)].push_back({pos, v});
        }
      }
    }
  }

  std::optional<std::string> refused(const Sequence& s, int32_t n, const char* what) {
    ++refusals_;
    const int32_t need = expected_pages_for_reserve(s, n);
    if (need <= pool_.free_pages()) {
      return std::string(what) + ": no free page reported with " + std::to_string(pool_.free_pages()) +
             " free for " + std::to_string(need) + " needed";
    }
    return std::nullopt;
  }

  std::optional<std::string> admit() {
    Sequence s{TokenTable(pool_, shape_), Expected{}};
    s.want.heads.resize(kLayers * kHeads);
    for (int32_t t : system_prompts_[static_cast<size_t>(uniform(0, 2))]) push_token(s.want, t);
    for (int i = uniform(1, 10); i > 0; --i) push_token(s.want, uniform(0, 7));
    const int32_t n = static_cast<int32_t>(s.want.tokens.size());
    const int32_t reused = s.table.reuse_prefix(std::span<const int32_t>(s.want.tokens).first(static_cast<size_t>(n - 1)));
    if (reused % kPageTokens != 0 || reused > n - 1) return "reuse_prefix returned " + std::to_string(reused);
    for (int hi = 0; hi < kLayers * kHeads; ++hi) {
      for (int32_t pos = 0; pos < reused; ++pos) {
        s.want.heads[static_cast<size_t>(hi)].push_back({pos, row_value(s.want.prefix_hash[static_cast<size_t>(pos)], hi)});
      }
    }
    const int32_t expected_need = expected_pages_for_reserve(s, n - reused);
    std::vector<PageCopy> copies;
    if (s.table.reserve(n - reused, &copies) == Room::kNoFreePage) {
      return refused(s, n - reused, "admit");  // the table (and the reused pages) go back now
    }
    if (!copies.empty()) return std::string("admit: copies on a fresh table");
    if (s.table.pages_held() != static_cast<int64_t>(expected_need) + reused / kPageTokens * kLayers * kHeads) {
      return std::string("admit: reserve took a different number of pages than the model expects");
    }
    write_rows(s, reused);
    s.table.publish_prefix(s.want.tokens);
    seqs_.push_back(std::move(s));
    return std::nullopt;
  }

  std::optional<std::string> decode(Sequence& s) {
    const int64_t free_before = pool_.free_pages();
    const int64_t held_before = s.table.pages_held();
    std::vector<PageCopy> copies;
    if (s.table.reserve(1, &copies) == Room::kNoFreePage) {
      if (pool_.free_pages() != free_before || s.table.pages_held() != held_before) {
        return std::string("decode: a refused reserve changed the pool");
      }
      return refused(s, 1, "decode");
    }
    apply(copies);
    push_token(s.want, uniform(0, 7));
    write_rows(s, static_cast<int32_t>(s.want.tokens.size()) - 1);
    return std::nullopt;
  }

  std::optional<std::string> evict(Sequence& s) {
    const int l = uniform(0, kLayers - 1), h = uniform(0, kHeads - 1);
    auto& rows = s.want.heads[static_cast<size_t>(l * kHeads + h)];
    std::vector<int32_t> slots;
    const int keep_pct = uniform(20, 95);
    for (int32_t i = 0; i < static_cast<int32_t>(rows.size()); ++i) {
      if (uniform(0, 99) < keep_pct) slots.push_back(i);
    }
    const int64_t free_before = pool_.free_pages();
    std::vector<RowMove> moves;
    if (s.table.keep(l, h, slots, &moves) == Room::kNoFreePage) {
      ++refusals_;
      if (pool_.free_pages() != free_before || !moves.empty()) return std::string("evict: a refused keep changed something");
      return std::nullopt;
    }
    for (const RowMove& m : moves) {
      store_[static_cast<size_t>(m.to.page * kPageTokens + m.to.row)] =
          store_[static_cast<size_t>(m.from.page * kPageTokens + m.from.row)];
    }
    std::vector<Expected::Row> kept;
    for (int32_t i : slots) kept.push_back(rows[static_cast<size_t>(i)]);
    rows = std::move(kept);
    return std::nullopt;
  }

  std::optional<std::string> finish(Sequence& s) {
    const size_t i = static_cast<size_t>(&s - seqs_.data());
    seqs_.erase(seqs_.begin() + static_cast<std::ptrdiff_t>(i));
    return std::nullopt;
  }

  std::optional<std::string> fork(Sequence& s) {
    Sequence child{s.table.fork(), s.want};
    seqs_.push_back(std::move(child));
    return std::nullopt;
  }

  std::optional<std::string> truncate(Sequence& s) {
    const int32_t n = static_cast<int32_t>(s.want.tokens.size());
    const int32_t pos = uniform(std::max(1, n - 6), n);
    s.table.truncate(pos);
    s.want.tokens.resize(static_cast<size_t>(pos));
    s.want.prefix_hash.resize(static_cast<size_t>(pos));
    for (auto& rows : s.want.heads) {
      rows.erase(std::remove_if(rows.begin(), rows.end(), [&](const Expected::Row& r) { return r.pos >= pos; }),
                 rows.end());
    }
    return std::nullopt;
  }

  std::mt19937_64 rng_;
  PagePool pool_;
  TokenTableShape shape_;
  std::vector<uint64_t> store_;  // [page][row]: the content a row stands for
  std::vector<std::vector<int32_t>> system_prompts_;
  std::vector<Sequence> seqs_;
  double worst_fragmentation_ = 0;
  int64_t refusals_ = 0;
};

std::optional<std::string> PoolModel::check() {
  if (Status st = pool_.audit(); !st.ok()) return st.to_string();
  if (pool_.free_pages() + pool_.used_pages() != pool_.total_pages()) return std::string("free + used != total");
  const std::vector<int32_t> held = holders();
  int32_t used = 0;
  for (PageId p = 0; p < kPages; ++p) {
    if (pool_.ref_count(p) != held[static_cast<size_t>(p)]) {
      return "page " + std::to_string(p) + ": reference count " + std::to_string(pool_.ref_count(p)) + ", held by " +
             std::to_string(held[static_cast<size_t>(p)]);
    }
    if (held[static_cast<size_t>(p)] > 0) ++used;
  }
  if (used != pool_.used_pages()) return "used pages " + std::to_string(pool_.used_pages()) + ", held " + std::to_string(used);

  // Every row reads back what the model says; a page holds rows of one head only (a page in two
  // heads is owned twice); every head holds exactly the pages its rows need.
  std::vector<int> page_head(static_cast<size_t>(kPages), -1);
  std::vector<int32_t> rows_in_page(static_cast<size_t>(kPages), 0);
  int64_t live_heads = 0;
  for (const Sequence& s : seqs_) {
    for (int l = 0; l < kLayers; ++l) {
      for (int h = 0; h < kHeads; ++h) {
        const int hi = l * kHeads + h;
        const auto& rows = s.want.heads[static_cast<size_t>(hi)];
        const auto pos = s.table.positions(l, h);
        const auto pages = s.table.pages(l, h);
        if (pos.size() != rows.size()) return "head " + std::to_string(hi) + ": size differs from the model";
        if (static_cast<int32_t>(pages.size()) != (static_cast<int32_t>(rows.size()) + kPageTokens - 1) / kPageTokens) {
          return "head " + std::to_string(hi) + ": " + std::to_string(pages.size()) + " pages for " +
                 std::to_string(rows.size()) + " rows";
        }
        live_heads += rows.empty() ? 0 : 1;
        for (PageId p : pages) {
          int& owner = page_head[static_cast<size_t>(p)];
          if (owner != -1 && owner != hi) return "page " + std::to_string(p) + " is in two different heads";
          owner = hi;
        }
        for (size_t i = 0; i < rows.size(); ++i) {
          if (pos[i] != rows[i].pos) return "head " + std::to_string(hi) + " slot " + std::to_string(i) + ": wrong position";
          const PageRow at = s.table.row(l, h, static_cast<int32_t>(i));
          if (store_[static_cast<size_t>(at.page * kPageTokens + at.row)] != rows[i].value) {
            return "head " + std::to_string(hi) + " slot " + std::to_string(i) + " (page " + std::to_string(at.page) +
                   " row " + std::to_string(at.row) + "): wrong content";
          }
          int32_t& n = rows_in_page[static_cast<size_t>(at.page)];
          n = std::max(n, at.row + 1);
        }
      }
    }
  }
  // Fragmentation: rows of held pages that hold nothing. Pages are fixed-size, so only the last
  // page of each head can be part-filled: at most page_tokens - 1 rows per live head.
  int64_t empty_rows = 0;
  for (PageId p = 0; p < kPages; ++p) {
    if (held[static_cast<size_t>(p)] > 0) empty_rows += kPageTokens - rows_in_page[static_cast<size_t>(p)];
  }
  if (empty_rows > live_heads * (kPageTokens - 1)) {
    return std::to_string(empty_rows) + " empty rows in held pages, over the bound for " + std::to_string(live_heads) +
           " heads";
  }
  if (used > 0) {
    worst_fragmentation_ = std::max(worst_fragmentation_, static_cast<double>(empty_rows) / (used * kPageTokens));
  }
  return std::nullopt;
}

TEST(TokenTableProperty, RandomStepsKeepPagesRefcountsAndRowsConsistent) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (replay with FRUGAL_TEST_SEED=" + std::to_string(seed) + ")");
  PoolModel model(seed);
  for (int step = 0; step < kSteps; ++step) {
    if (auto err = model.step()) FAIL() << "step " << step << ": " << *err;
    if (auto err = model.check()) FAIL() << "after step " << step << ": " << *err;
  }
  // The run must have exercised the interesting paths, not just appended.
  const PagePoolCounters& c = model.pool().counters();
  EXPECT_GT(c.prefix_hits, 0);
  EXPECT_GT(c.copies_on_write, 0);
  EXPECT_GT(c.reclaimed_cached, 0);
  EXPECT_GT(model.refusals(), 0);
  RecordProperty("worst_fragmentation", std::to_string(model.worst_fragmentation()));
  std::cout << "seed " << seed << ": worst fragmentation " << model.worst_fragmentation() << ", prefix hits "
            << c.prefix_hits << ", copies on write " << c.copies_on_write << ", no free page " << model.refusals()
            << "\n";
}

}  // namespace
}  // namespace frugal

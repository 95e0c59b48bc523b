#include "lowering/kernel_ir.h"

#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace lazyfuse {
namespace {

// Note [Affine over a domain]
// A reshape that merges or splits dimensions indexes its source through division and modulo of
// the flat index: viewing [8, 128, 256] as [1024, 256] reads the source at
// (v0 / 128, v0 % 128, v1), whose offset (v0 / 128) * 32768 + (v0 % 128) * 256 + v1 is v0 * 256
// + v1 for every point. ixAddAffine sees no affine form there, so such a view was copied by a
// kernel before every matmul that read it (the [B, T, C] -> [B*T, C] reshape around each Linear
// of a transformer). ixAffineOver knows the range of each variable (the domain) and rewrites
// with rules that hold for every point of it:
//  - A / c and A % c, where A = d*A' + R with d dividing c and 0 <= R < d over the domain, are
//    A' / (c/d) and d*(A' % (c/d)) + R (floor division of non-negative values);
//  - A / c is 0 and A % c is A when 0 <= A < c; X / a / b is X / (a*b);
//  - q*(X / c)*c + q*(X % c) is q*X.
// What stays a division or a modulo is an opaque term; the expression is affine when none is
// left. Every rule holds for non-negative operands, which Note [Kernel IR] promises.

struct Term {
  int64_t var = -1;        // the variable's number; -1 for a division or modulo
  int64_t lo = 0, hi = 0;  // its range over the domain
  std::string base;        // for a division or modulo: the key of the divided form
  int64_t divisor = 0;     // for a division or modulo
  bool mod = false;
};

struct Form {
  std::map<std::string, int64_t> coeffs;  // term key -> coefficient
  int64_t constant = 0;
};

class Analyzer {
 public:
  explicit Analyzer(const std::vector<int64_t>& sizes) : sizes_(sizes) {}

  std::optional<Form> eval(const IxPtr& ix) {
    switch (ix->op) {
      case IxOp::kConst: return Form{{}, ix->value};
      case IxOp::kVar: {
        const int64_t d = ix->value;
        if (d < 0 || d >= static_cast<int64_t>(sizes_.size())) return std::nullopt;
        if (sizes_[d] <= 1) return Form{};
        const std::string key = "v" + std::to_string(d);
        terms_[key] = Term{d, 0, sizes_[d] - 1, "", 0, false};
        return Form{{{key, 1}}, 0};
      }
      case IxOp::kAdd: {
        std::optional<Form> a = eval(ix->a), b = eval(ix->b);
        if (!a || !b) return std::nullopt;
        for (const auto& [key, c] : b->coeffs) a->coeffs[key] += c;
        a->constant += b->constant;
        return fold(std::move(*a));
      }
      case IxOp::kMul: {
        const bool a_const = ix->a->op == IxOp::kConst, b_const = ix->b->op == IxOp::kConst;
        if (!a_const && !b_const) return std::nullopt;
        std::optional<Form> f = eval(b_const ? ix->a : ix->b);
        if (!f) return std::nullopt;
        return scaled(*f, b_const ? ix->b->value : ix->a->value);
      }
      case IxOp::kDiv:
      case IxOp::kMod: {
        if (ix->b->op != IxOp::kConst || ix->b->value <= 0) return std::nullopt;
        std::optional<Form> f = eval(ix->a);
        if (!f) return std::nullopt;
        return ix->op == IxOp::kDiv ? divide(std::move(*f), ix->b->value)
                                    : modulo(std::move(*f), ix->b->value);
      }
      default: return std::nullopt;
    }
  }

  /// The coefficient of each variable, when `f` has no opaque term left.
  bool affine(const Form& f, std::vector<int64_t>& coeffs) const {
    coeffs.assign(sizes_.size(), 0);
    for (const auto& [key, c] : f.coeffs) {
      if (c == 0) continue;
      const Term& t = terms_.at(key);
      if (t.var < 0) return false;
      coeffs[t.var] += c;
    }
    return true;
  }

 private:
  static Form scaled(Form f, int64_t s) {
    for (auto& [key, c] : f.coeffs) c *= s;
    f.constant *= s;
    return f;
  }

  std::pair<int64_t, int64_t> range(const Form& f) const {
    int64_t lo = f.constant, hi = f.constant;
    for (const auto& [key, c] : f.coeffs) {
      const Term& t = terms_.at(key);
      lo += c >= 0 ? c * t.lo : c * t.hi;
      hi += c >= 0 ? c * t.hi : c * t.lo;
    }
    return {lo, hi};
  }

  static std::string keyOf(const Form& f) {
    std::string key = std::to_string(f.constant);
    for (const auto& [k, c] : f.coeffs) {
      if (c != 0) key += "+" + std::to_string(c) + "*" + k;
    }
    return key;
  }

  /// Splits f into d*quotient + rest when every coefficient not divisible by d, with the
  /// constant's remainder, stays in [0, d) over the domain.
  std::optional<std::pair<Form, Form>> split(const Form& f, int64_t d) const {
    Form q, r;
    for (const auto& [key, c] : f.coeffs) {
      if (c % d == 0) {
        q.coeffs[key] = c / d;
      } else {
        r.coeffs[key] = c;
      }
    }
    if (f.constant < 0) return std::nullopt;
    q.constant = f.constant / d;
    r.constant = f.constant % d;
    const auto [lo, hi] = range(r);
    if (lo < 0 || hi >= d) return std::nullopt;
    return std::make_pair(std::move(q), std::move(r));
  }

  /// The divisors of c worth trying: its gcd with each coefficient and with the constant.
  std::vector<int64_t> candidates(const Form& f, int64_t c) const {
    std::vector<int64_t> ds = {c};
    for (const auto& [key, k] : f.coeffs) ds.push_back(std::gcd(c, k < 0 ? -k : k));
    ds.push_back(std::gcd(c, f.constant < 0 ? -f.constant : f.constant));
    return ds;
  }

  Form opaque(const Form& f, int64_t c, bool mod) {
    const std::string base = keyOf(f);
    const std::string key = "(" + base + (mod ? ")%" : ")/") + std::to_string(c);
    const auto [lo, hi] = range(f);
    forms_[base] = f;
    terms_[key] = Term{-1, mod ? 0 : lo / c, mod ? std::min(hi, c - 1) : hi / c, base, c, mod};
    return Form{{{key, 1}}, 0};
  }

  std::optional<Form> divide(Form f, int64_t c) {
    if (c == 1) return f;
    const auto [lo, hi] = range(f);
    if (lo < 0) return std::nullopt;
    if (hi < c) return Form{};
    for (int64_t d : candidates(f, c)) {
      if (d <= 1 || c % d != 0) continue;
      if (auto qr = split(f, d)) return divide(std::move(qr->first), c / d);
    }
    // X / a / c is X / (a*c).
    if (f.constant == 0 && f.coeffs.size() == 1 && f.coeffs.begin()->second == 1) {
      const Term& t = terms_.at(f.coeffs.begin()->first);
      if (t.divisor > 0 && !t.mod) return opaque(forms_.at(t.base), t.divisor * c, false);
    }
    return opaque(f, c, false);
  }

  std::optional<Form> modulo(Form f, int64_t c) {
    if (c == 1) return Form{};
    const auto [lo, hi] = range(f);
    if (lo < 0) return std::nullopt;
    if (hi < c) return f;
    for (int64_t d : candidates(f, c)) {
      if (d <= 1 || c % d != 0 || d == c) continue;
      if (auto qr = split(f, d)) {
        std::optional<Form> inner = modulo(std::move(qr->first), c / d);
        if (!inner) return std::nullopt;
        Form out = scaled(std::move(*inner), d);
        for (const auto& [key, k] : qr->second.coeffs) out.coeffs[key] += k;
        out.constant += qr->second.constant;
        return fold(std::move(out));
      }
    }
    if (auto qr = split(f, c)) return qr->second;  // A = c*A' + R: A % c is R
    return opaque(f, c, true);
  }

  /// q*c*(X / c) + q*(X % c) -> q*X, until nothing pairs.
  Form fold(Form f) {
    for (bool changed = true; changed;) {
      changed = false;
      for (const auto& [term_key, coeff] : f.coeffs) {
        const std::string key = term_key;  // copies: the loop below writes f.coeffs
        const int64_t k = coeff;
        if (k == 0) continue;
        const Term& m = terms_.at(key);
        if (!m.mod) continue;
        const Form& x = forms_.at(m.base);
        std::string div_key = "(" + m.base + ")/" + std::to_string(m.divisor);
        if (x.constant == 0 && x.coeffs.size() == 1 && x.coeffs.begin()->second == 1) {
          // (X / a) % c pairs with X / (a*c), the form divide gives (X / a) / c.
          const Term& inner = terms_.at(x.coeffs.begin()->first);
          if (inner.divisor > 0 && !inner.mod) {
            div_key = "(" + inner.base + ")/" + std::to_string(inner.divisor * m.divisor);
          }
        }
        auto it = f.coeffs.find(div_key);
        if (it == f.coeffs.end() || it->second != k * m.divisor) continue;
        const std::string mod_key = key;
        f.coeffs[mod_key] = 0;
        f.coeffs[div_key] = 0;
        for (const auto& [xk, xc] : x.coeffs) f.coeffs[xk] += k * xc;
        f.constant += k * x.constant;
        changed = true;
        break;
      }
    }
    for (auto it = f.coeffs.begin(); it != f.coeffs.end();) {
      it = it->second == 0 ? f.coeffs.erase(it) : std::next(it);
    }
    return f;
  }

  const std::vector<int64_t>& sizes_;
  std::map<std::string, Term> terms_;
  std::map<std::string, Form> forms_;  // the divided form of each division or modulo, by key
};

}  // namespace

bool ixAffineOver(const IxPtr& ix, const std::vector<int64_t>& sizes, std::vector<int64_t>& coeffs,
                  int64_t& constant) {
  Analyzer analyzer(sizes);
  std::optional<Form> form = analyzer.eval(ix);
  if (!form || !analyzer.affine(*form, coeffs)) return false;
  constant = form->constant;
  return true;
}

}  // namespace lazyfuse

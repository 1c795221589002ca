#include "lower/helpers.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

namespace torch_tpu::lower {

namespace {

int kind_rank(ElementType t) {
  if (t == ElementType::Pred) return 0;
  if (is_integral(t)) return 1;
  if (is_floating(t)) return 2;
  return 3;  // complex
}

ElementType signed_of_width(int bits) {
  switch (bits) {
    case 8:
      return ElementType::S8;
    case 16:
      return ElementType::S16;
    case 32:
      return ElementType::S32;
    default:
      return ElementType::S64;
  }
}

// torch's combine_categories: the higher-priority result wins unless the
// lower-priority one is of a higher kind (e.g. int tensor + float scalar).
ElementType combine(ElementType higher, ElementType lower) {
  if (higher == ElementType::Invalid) return lower;
  if (lower == ElementType::Invalid) return higher;
  if (is_complex(higher)) return higher;
  if (is_complex(lower)) {
    return is_floating(higher) ? to_complex(higher) : lower;
  }
  if (is_floating(higher)) return higher;
  if (higher == ElementType::Pred || is_floating(lower)) {
    return promote_types(higher, lower);
  }
  return higher;
}

}  // namespace

ElementType promote_types(ElementType a, ElementType b) {
  if (a == b) return a;
  if (a == ElementType::Pred) return b;
  if (b == ElementType::Pred) return a;
  int ka = kind_rank(a), kb = kind_rank(b);
  if (ka != kb) {
    ElementType hi = ka > kb ? a : b;
    ElementType lo = ka > kb ? b : a;
    // float + complex keeps the wider precision.
    if (is_complex(hi) && is_floating(lo) && bit_width(lo) > bit_width(hi) / 2) {
      return ElementType::C128;
    }
    return hi;
  }
  if (kb == 1) {  // both integral
    bool ua = is_unsigned(a), ub = is_unsigned(b);
    if (ua == ub) return bit_width(a) >= bit_width(b) ? a : b;
    ElementType s = ua ? b : a, u = ua ? a : b;
    if (bit_width(s) > bit_width(u)) return s;
    return signed_of_width(std::min(64, bit_width(u) * 2));
  }
  if (kb == 2) {  // both floating
    if ((a == ElementType::F16 && b == ElementType::BF16) ||
        (a == ElementType::BF16 && b == ElementType::F16)) {
      return ElementType::F32;
    }
    return bit_width(a) >= bit_width(b) ? a : b;
  }
  return bit_width(a) >= bit_width(b) ? a : b;  // both complex
}

ElementType result_type(const std::vector<const Operand*>& operands) {
  ElementType by_category[3] = {ElementType::Invalid, ElementType::Invalid, ElementType::Invalid};
  for (const Operand* o : operands) {
    if (!o) continue;
    auto& slot = by_category[static_cast<int>(o->category)];
    slot = slot == ElementType::Invalid ? o->dtype : promote_types(slot, o->dtype);
  }
  return combine(by_category[0], combine(by_category[1], by_category[2]));
}

ElementType to_floating(ElementType t) {
  return is_floating(t) || is_complex(t) ? t : ElementType::F32;
}

int64_t wrap_dim(int64_t dim, int64_t rank) {
  int64_t r = std::max<int64_t>(rank, 1);
  if (dim < -r || dim >= r) {
    throw std::invalid_argument("dimension " + std::to_string(dim) + " out of range for rank " +
                                std::to_string(rank));
  }
  return dim < 0 ? dim + r : dim;
}

Dims all_dims(int64_t rank) {
  Dims d(rank);
  for (int64_t i = 0; i < rank; ++i) d[i] = i;
  return d;
}

Dims reduction_dims(const IntList& dims, int64_t rank) {
  Dims out;
  if (dims.empty()) {
    for (int64_t i = 0; i < rank; ++i) out.push_back(i);
    return out;
  }
  for (int64_t d : dims) {
    if (rank == 0) continue;  // dim 0 / -1 of a scalar reduces nothing
    out.push_back(wrap_dim(d, rank));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

Dims broadcast_shapes(const Dims& a, const Dims& b) {
  size_t n = std::max(a.size(), b.size());
  Dims out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1) {
      throw std::invalid_argument("shapes cannot be broadcast together");
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Value broadcast_to(Builder& b, const Value& x, const Dims& dims) {
  if (x.dims() == dims) return x;
  int64_t lead = static_cast<int64_t>(dims.size()) - x.rank();
  if (lead < 0) throw std::invalid_argument("broadcast_to: rank too small");
  Dims mapping(x.rank());
  for (int64_t i = 0; i < x.rank(); ++i) mapping[i] = lead + i;
  return b.broadcast_in_dim(x, dims, mapping);
}

Dims reduced_shape(const Dims& dims, const Dims& reduced, bool keepdim) {
  Dims out;
  for (int64_t i = 0; i < static_cast<int64_t>(dims.size()); ++i) {
    bool r = std::find(reduced.begin(), reduced.end(), i) != reduced.end();
    if (!r)
      out.push_back(dims[i]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

namespace {

// Floating -> integer as PyTorch's CPU kernels convert (a C++ cast, which x86
// makes through a 32-bit integer, or a 64-bit one for 32-bit unsigned and
// 64-bit results): a value out of that integer's range or NaN gives its
// lowest value, and narrower results are its low bits (-2.0 is 254 as uint8,
// as on CUDA), where XLA's convert would saturate to the result's range.
Value float_to_integer(Builder& b, const Value& x, ElementType type) {
  const bool wide =
      type == ElementType::S64 || type == ElementType::U64 || type == ElementType::U32;
  const ElementType via = wide ? ElementType::S64 : ElementType::S32;
  const double limit = wide ? 9223372036854775808.0 : 2147483648.0;
  Value in_range = b.and_(b.compare(x, b.full(x.shape, -limit), hlo::Comparison::GE),
                          b.compare(x, b.full(x.shape, limit), hlo::Comparison::LT));
  Value lowest = b.full({via, x.dims()}, -limit);
  Value integer = b.select(in_range, b.convert(x, via), lowest);
  return via == type ? integer : b.convert(integer, type);
}

}  // namespace

Value convert(Builder& b, const Value& x, ElementType type) {
  if (x.type() == type) return x;
  // A complex number is true where either part is nonzero (c10's operator
  // bool); other real types take the real part.
  if (is_complex(x.type()) && type == ElementType::Pred) {
    Value zero = b.full(b.real(x).shape, 0);
    return b.or_(b.compare(b.real(x), zero, hlo::Comparison::NE),
                 b.compare(b.imag(x), zero, hlo::Comparison::NE));
  }
  if (is_complex(x.type()) && !is_complex(type)) return convert(b, b.real(x), type);
  if (is_floating(x.type()) && is_integral(type) && type != ElementType::U64) {
    return float_to_integer(b, x, type);
  }
  return b.convert(x, type);
}

Value scalar(Builder& b, double value, ElementType type) { return b.constant(value, type); }

Value full_like(Builder& b, const Value& like, double value) { return b.full(like.shape, value); }

Value is_nan(Builder& b, const Value& x) {
  if (is_complex(x.type())) return b.or_(is_nan(b, b.real(x)), is_nan(b, b.imag(x)));
  if (!is_floating(x.type())) return b.full({ElementType::Pred, x.dims()}, 0);
  return b.compare(x, x, hlo::Comparison::NE);
}

Value is_inf(Builder& b, const Value& x) {
  if (is_complex(x.type())) return b.or_(is_inf(b, b.real(x)), is_inf(b, b.imag(x)));
  if (!is_floating(x.type())) return b.full({ElementType::Pred, x.dims()}, 0);
  return b.compare(b.abs(x), full_like(b, x, INFINITY), hlo::Comparison::EQ);
}

Value sign_bit(Builder& b, const Value& x) {
  if (is_floating(x.type())) {
    ElementType bits = element_size(x.type()) == 8   ? ElementType::S64
                       : element_size(x.type()) == 4 ? ElementType::S32
                                                     : ElementType::S16;
    Value as_int = b.bitcast_convert(x, bits);
    return b.compare(as_int, b.full({bits, x.dims()}, 0), hlo::Comparison::LT);
  }
  if (is_integral(x.type()) && !is_unsigned(x.type())) {
    return b.compare(x, full_like(b, x, 0), hlo::Comparison::LT);
  }
  return b.full({ElementType::Pred, x.dims()}, 0);
}

Value copy_sign(Builder& b, const Value& magnitude, const Value& sign) {
  Value m = b.abs(magnitude);
  return b.select(sign_bit(b, sign), b.neg(m), m);
}

std::vector<Value> broadcast_all(Builder& b, std::vector<Value> values) {
  Dims dims;
  for (const Value& v : values) dims = broadcast_shapes(dims, v.dims());
  for (Value& v : values) v = broadcast_to(b, v, dims);
  return values;
}

std::vector<Value> promote(Builder& b, const std::vector<const Operand*>& operands,
                           ElementType type) {
  std::vector<Value> values;
  for (const Operand* o : operands) values.push_back(convert(b, o->value, type));
  return broadcast_all(b, std::move(values));
}

namespace {

Value reduce_with(Builder& b, const Value& x, const Dims& dims, const Value& init,
                  Value (Builder::*op)(const Value&, const Value&)) {
  if (dims.empty()) return x;
  return b.reduce({x}, {init}, dims,
                  [op](Builder& r, const std::vector<Value>& a) -> std::vector<Value> {
                    return {(r.*op)(a[0], a[1])};
                  })[0];
}

template <class T>
Value limit(Builder& b, ElementType t, bool high) {
  return b.constant_int(
      static_cast<int64_t>(high ? std::numeric_limits<T>::max() : std::numeric_limits<T>::lowest()),
      t);
}

Value extreme(Builder& b, ElementType t, bool high) {
  switch (t) {
    case ElementType::Pred:
      return b.constant_bool(high);
    case ElementType::S8:
      return limit<int8_t>(b, t, high);
    case ElementType::S16:
      return limit<int16_t>(b, t, high);
    case ElementType::S32:
      return limit<int32_t>(b, t, high);
    case ElementType::S64:
      return limit<int64_t>(b, t, high);
    case ElementType::U8:
      return limit<uint8_t>(b, t, high);
    case ElementType::U16:
      return limit<uint16_t>(b, t, high);
    case ElementType::U32:
      return limit<uint32_t>(b, t, high);
    case ElementType::U64:
      return b.constant_int(high ? -1 : 0, t);  // prints 2^64-1
    default:
      return b.constant(
          high ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity(),
          t);
  }
}

}  // namespace

Value reduced_count(Builder& b, const Value& x, const Dims& dims, ElementType type) {
  if (!b.has_dynamic_sizes()) {
    int64_t n = 1;
    for (int64_t d : dims) n *= x.dim(d);
    Dims kept;
    for (int64_t d = 0; d < x.rank(); ++d) {
      if (std::find(dims.begin(), dims.end(), d) == dims.end()) kept.push_back(x.dim(d));
    }
    return b.full({type, kept}, static_cast<double>(n));
  }
  // A sum of ones that come from x, so that they carry its sizes (MLIR folds
  // get_dimension_size of a statically typed value to its bound). Compared as
  // floats: XLA folds an integer's x == x to a constant, which has no sizes.
  Value f = is_floating(x.type()) ? x : b.convert(x, ElementType::F32);
  Value one = b.or_(b.compare(f, f, hlo::Comparison::EQ), b.compare(f, f, hlo::Comparison::NE));
  return reduce_sum(b, b.convert(one, type), dims);
}

Value reduce_sum(Builder& b, const Value& x, const Dims& dims) {
  if (x.type() == ElementType::Pred) {
    return reduce_with(b, x, dims, b.constant_bool(false), &Builder::or_);
  }
  return reduce_with(b, x, dims, b.constant(0.0, x.type()), &Builder::add);
}

// The reduce combiner of XLA CPU drops NaNs that elementwise maximum would
// propagate; PyTorch propagates them, so floating combiners check explicitly.
Value extreme_of(Builder& b, const Value& x, const Value& y, bool max) {
  Value m = max ? b.max(x, y) : b.min(x, y);
  if (!is_floating(x.type())) return m;
  Value x_nan = b.compare(x, x, hlo::Comparison::NE);
  Value y_nan = b.compare(y, y, hlo::Comparison::NE);
  return b.select(x_nan, x, b.select(y_nan, y, m));
}

Value reduce_extreme(Builder& b, const Value& x, const Dims& dims, bool max) {
  if (dims.empty()) return x;
  Value init = max ? lowest_value(b, x.type()) : highest_value(b, x.type());
  return b.reduce({x}, {init}, dims,
                  [max](Builder& r, const std::vector<Value>& a) -> std::vector<Value> {
                    return {extreme_of(r, a[0], a[1], max)};
                  })[0];
}

// Two single-output reduces, not one variadic reduce of the three candidates: XLA's
// CPU backend vectorises a single reduce into partial sums, and runs a variadic one
// as one sequential sum whose error grows with its length (6e-4 relative at 2e6
// float32 elements, against 3e-5 on the CPU).
Value vector_norm(Builder& b, const Value& x, const Value& ord, const Dims& dims) {
  Value v = is_complex(x.type()) ? b.abs(x) : x;
  v = convert(b, b.abs(v), accumulation_type(v.type()));
  ElementType t = v.type();
  Value p = convert(b, ord, t);
  auto is = [&](double value) { return b.compare(p, b.constant(value, t), hlo::Comparison::EQ); };
  const double inf = std::numeric_limits<double>::infinity();
  // A rank-0 predicate selects whole arrays.
  Value nonzero = b.convert(b.compare(v, b.full(v.shape, 0), hlo::Comparison::NE), t);
  Value term = b.select(
      is(0), nonzero,
      b.select(is(1), v, b.select(is(2), b.mul(v, v), b.pow(v, broadcast_to(b, p, v.dims())))));
  Value sum = reduce_sum(b, term, dims);
  // max|x|, or -max(-|x|) = min|x| for ord -inf.
  Value largest = reduce_max(b, b.select(is(-inf), b.neg(v), v), dims);
  Value root = b.pow(sum, broadcast_to(b, b.div(b.constant(1.0, t), p), sum.dims()));
  Value norm = b.select(b.or_(is(0), is(1)), sum, b.select(is(2), b.sqrt(sum), root));
  return b.select(is(inf), largest, b.select(is(-inf), b.neg(largest), norm));
}

hlo::RegionFn scatter_combiner(const std::string& reduce) {
  using Values = std::vector<Value>;
  if (reduce == "replace") return [](Builder&, const Values& v) -> Values { return {v[1]}; };
  if (reduce == "sum" || reduce == "add" || reduce == "mean") {
    return [](Builder& r, const Values& v) -> Values { return {r.add(v[0], v[1])}; };
  }
  if (reduce == "prod" || reduce == "multiply") {
    return [](Builder& r, const Values& v) -> Values { return {r.mul(v[0], v[1])}; };
  }
  if (reduce == "amax" || reduce == "amin") {
    const bool max = reduce == "amax";
    return
        [max](Builder& r, const Values& v) -> Values { return {extreme_of(r, v[0], v[1], max)}; };
  }
  throw Unsupported("scatter reduce '" + reduce + "'");
}

Value reduce_max(Builder& b, const Value& x, const Dims& dims) {
  return reduce_extreme(b, x, dims, true);
}

Value reduce_min(Builder& b, const Value& x, const Dims& dims) {
  return reduce_extreme(b, x, dims, false);
}

Value lowest_value(Builder& b, ElementType t) { return extreme(b, t, false); }
Value highest_value(Builder& b, ElementType t) { return extreme(b, t, true); }

ElementType accumulation_type(ElementType t) {
  return t == ElementType::F16 || t == ElementType::BF16 ? ElementType::F32 : t;
}

Value index_constant(Builder& b, const Dims& values, const Dims& dims) {
  // MLIR's hex form: the raw little-endian bytes.
  static const char* hex = "0123456789ABCDEF";
  std::string text = "0x";
  for (int64_t v : values) {
    unsigned char bytes[8];
    std::memcpy(bytes, &v, 8);
    for (unsigned char ch : bytes) {
      text += hex[ch >> 4];
      text += hex[ch & 15];
    }
  }
  Shape flat{ElementType::S64, {static_cast<int64_t>(values.size())}};
  Value v = values.empty() ? b.full(flat, 0)
                           : b.emit("stablehlo.constant", {},
                                    "value = dense<\"" + text + "\"> : " + flat.mlir(), {flat})[0];
  return b.reshape(v, dims);
}

Value gather_along(Builder& b, const Value& x, int64_t dim, const Dims& idx) {
  hlo::GatherDims d;
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (i != dim) d.offset_dims.push_back(i);
  }
  d.collapsed_slice_dims = {dim};
  d.start_index_map = {dim};
  d.index_vector_dim = 1;
  Dims sizes = x.dims();
  sizes[dim] = 1;
  const int64_t n = static_cast<int64_t>(idx.size());
  return b.gather(x, index_constant(b, idx, {n, 1}), d, sizes);
}

Value scatter_add_along(Builder& b, const Value& g, int64_t dim, const Dims& idx, int64_t size) {
  hlo::ScatterDims d;
  for (int64_t i = 0; i < g.rank(); ++i) {
    if (i != dim) d.update_window_dims.push_back(i);
  }
  d.inserted_window_dims = {dim};
  d.scatter_dims_to_operand_dims = {dim};
  d.index_vector_dim = 1;
  Dims dims = g.dims();
  dims[dim] = size;
  const int64_t n = static_cast<int64_t>(idx.size());
  return b.scatter(b.full({g.type(), dims}, 0), index_constant(b, idx, {n, 1}), g, d,
                   [](Builder& r, const std::vector<Value>& v) -> std::vector<Value> {
                     return {r.add(v[0], v[1])};
                   });
}

void check_index_range(Context& c, const Value& index, int64_t size, bool negative_ok,
                       DataCheck::Error error, std::string message) {
  check_index_range(c, index, scalar(c.b, static_cast<double>(size), ElementType::S64), negative_ok,
                    error, std::move(message));
}

void check_index_range(Context& c, const Value& index, const Value& size, bool negative_ok,
                       DataCheck::Error error, std::string message) {
  if (index.shape.numel() == 0) return;
  Builder& b = c.b;
  Value i = convert(b, index, ElementType::S64);
  Dims all = all_dims(i.rank());
  Value high = reduce_max(b, i, all), low = reduce_min(b, i, all);
  Value above = b.compare(high, size, hlo::Comparison::GE);
  Value lowest = negative_ok ? b.neg(size) : scalar(b, 0.0, ElementType::S64);
  Value below = b.compare(low, lowest, hlo::Comparison::LT);
  Value value = b.select(above, high, low);
  if (message.find(kSizePlaceholder) != std::string::npos) {
    // The index in the high half, the size in the low one (DataCheck's packing).
    value = b.add(b.mul(value, scalar(b, 4294967296.0, ElementType::S64)), size);
  }
  c.check({b.or_(above, below), value, error, std::move(message)});
}

Value wrap_index(Builder& b, const Value& index, const Value& size, bool clamp) {
  Value i = convert(b, index, ElementType::S64);
  Value n = broadcast_to(b, size, i.dims());
  if (clamp) i = b.clamp(b.neg(n), i, b.sub(n, b.full(n.shape, 1)));
  Value negative = b.compare(i, b.full(i.shape, 0), hlo::Comparison::LT);
  return b.select(negative, b.add(i, n), i);
}

Value wrap_index(Builder& b, const Value& index, int64_t size, bool clamp) {
  return wrap_index(b, index, scalar(b, static_cast<double>(size), ElementType::S64), clamp);
}

Value runtime_size(Builder& b, const Value& x, int64_t dim) {
  if (!b.has_dynamic_sizes()) return scalar(b, static_cast<double>(x.dim(dim)), ElementType::S64);
  // Count the entries of one line along `dim` (XLA masks the padding in a sum).
  Dims start(x.rank(), 0), limit(x.rank(), 1), strides(x.rank(), 1);
  limit[dim] = x.dim(dim);
  Value line = b.slice(x, start, limit, strides);
  return reduced_count(b, line, all_dims(x.rank()), ElementType::S64);
}

void check_none(Context& c, const Value& invalid, DataCheck::Error error, std::string message) {
  if (invalid.shape.numel() == 0) return;
  Builder& b = c.b;
  Value any = reduce_max(b, convert(b, invalid, ElementType::S64), all_dims(invalid.rank()));
  c.check({b.compare(any, scalar(b, 0, ElementType::S64), hlo::Comparison::NE),
           scalar(b, 0, ElementType::S64), error, std::move(message)});
}

}  // namespace torch_tpu::lower

#include "hlo/builder.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <stdexcept>

namespace torch_tpu::hlo {

namespace {

[[noreturn]] void fail(const std::string& what) {
  throw std::invalid_argument("StableHLO builder: " + what);
}

std::string join(const Dims& values, const char* sep) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) out += sep;
    out += std::to_string(values[i]);
  }
  return out;
}

std::string types_of(const std::vector<Value>& values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) out += ", ";
    out += values[i].shape.mlir();
  }
  return out;
}

std::string names_of(const std::vector<Value>& values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) out += ", ";
    out += values[i].name();
  }
  return out;
}

std::string shapes_text(const std::vector<Shape>& shapes) {
  std::string out;
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (i) out += ", ";
    out += shapes[i].mlir();
  }
  return out;
}

void check_same_shape(const Value& a, const Value& b, const char* op) {
  if (a.shape != b.shape) {
    fail(std::string(op) + " operands differ: " + to_string(a.shape) + " vs " + to_string(b.shape));
  }
}

Shape scalar_of(ElementType t) { return Shape{t, {}}; }

// Output extent of a window sliding over a (dilated, padded) dimension.
int64_t window_output(int64_t in, int64_t window, int64_t stride, int64_t base_dilation,
                      int64_t window_dilation, int64_t lo, int64_t hi) {
  int64_t dilated = in == 0 ? 0 : (in - 1) * base_dilation + 1;
  int64_t padded = dilated + lo + hi;
  int64_t effective = (window - 1) * window_dilation + 1;
  if (padded < effective) return 0;
  return (padded - effective) / stride + 1;
}

Dims ones(size_t n) { return Dims(n, 1); }

std::string precision_attr(Precision p, int operands) {
  const char* name = p == Precision::Highest ? "HIGHEST"
                     : p == Precision::High  ? "HIGH"
                                             : "DEFAULT";
  std::string out = "precision_config = [";
  for (int i = 0; i < operands; ++i) {
    if (i) out += ", ";
    out += std::string("#stablehlo<precision ") + name + ">";
  }
  return out + "]";
}

std::string hex_float(double value, ElementType type) {
  char buf[32];
  if (type == ElementType::F64) {
    uint64_t bits;
    std::memcpy(&bits, &value, 8);
    std::snprintf(buf, sizeof(buf), "0x%016" PRIX64, bits);
  } else {
    float f = static_cast<float>(value);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    std::snprintf(buf, sizeof(buf), "0x%08" PRIX32, bits);
  }
  return buf;
}

}  // namespace

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::string Shape::mlir() const {
  std::string out = "tensor<";
  for (int64_t d : dims) out += std::to_string(d) + "x";
  return out + mlir_name(type) + ">";
}

std::string to_string(const Shape& shape) {
  return std::string(short_name(shape.type)) + "[" + join(shape.dims, ",") + "]";
}

std::string Value::name() const {
  // Parameters carry negative ids: -1 is %arg0.
  std::string n = id < 0 ? "%arg" + std::to_string(-id - 1) : "%v" + std::to_string(id);
  if (result >= 0) n += "#" + std::to_string(result);
  return n;
}

std::string i64_array(const Dims& values) {
  return values.empty() ? "array<i64>" : "array<i64: " + join(values, ", ") + ">";
}

std::string i64_list(const Dims& values) { return "[" + join(values, ", ") + "]"; }

std::string padding_attr(const std::vector<std::pair<int64_t, int64_t>>& p) {
  std::string out = "dense<";
  if (p.empty()) return "dense<> : tensor<0x2xi64>";
  out += "[";
  for (size_t i = 0; i < p.size(); ++i) {
    if (i) out += ", ";
    out += "[" + std::to_string(p[i].first) + ", " + std::to_string(p[i].second) + "]";
  }
  return out + "]> : tensor<" + std::to_string(p.size()) + "x2xi64>";
}

// ------------------------------------------------------------------ program

Value Builder::parameter(const Shape& shape) {
  params_.push_back(shape);
  largest_value_ = std::max(largest_value_, shape.numel());
  Value v;
  v.id = -static_cast<int>(params_.size());
  v.shape = shape;
  return v;
}

void Builder::alias_output(int param, int result) { aliases_.emplace_back(param, result); }

std::string Builder::module_text(const std::vector<Value>& results) const {
  std::ostringstream s;
  s << "module @torch_tpu {\n  func.func public @main(";
  for (size_t i = 0; i < params_.size(); ++i) {
    if (i) s << ", ";
    s << "%arg" << i << ": " << params_[i].mlir();
    for (auto [param, result] : aliases_) {
      if (param == static_cast<int>(i)) {
        s << " {tf.aliasing_output = " << result << " : i32}";
      }
    }
  }
  s << ") -> (" << types_of(results) << ") {\n" << body_;
  s << "    \"func.return\"(" << names_of(results) << ") : (" << types_of(results)
    << ") -> ()\n  }\n"
    << functions_ << "}\n";
  return s.str();
}

std::vector<Value> Builder::call(const std::string& entry, const std::string& functions,
                                 const std::vector<Value>& operands,
                                 const std::vector<Shape>& results) {
  if (function_entries_.insert(entry).second) functions_ += functions + "\n";
  return emit("func.call", operands, "callee = @" + entry, results);
}

// ------------------------------------------------------------------ emission

namespace {

// Ops whose work grows faster than their operands and results.
bool superlinear(const std::string& op) {
  static const std::unordered_set<std::string> ops = {"stablehlo.while",
                                                      "stablehlo.sort",
                                                      "stablehlo.dot_general",
                                                      "stablehlo.convolution",
                                                      "stablehlo.reduce_window",
                                                      "stablehlo.select_and_scatter",
                                                      "stablehlo.fft",
                                                      "stablehlo.custom_call",
                                                      "stablehlo.triangular_solve",
                                                      "stablehlo.cholesky",
                                                      "func.call"};
  return ops.count(op) > 0;
}

}  // namespace

std::vector<Value> Builder::emit(const std::string& op, const std::vector<Value>& operands,
                                 const std::string& attributes, const std::vector<Shape>& results,
                                 const std::vector<std::string>& regions) {
  superlinear_ops_ = superlinear_ops_ || superlinear(op);
  for (const Shape& r : results) largest_value_ = std::max(largest_value_, r.numel());
  int id = next_id_++;
  std::string line(indent_, ' ');
  line += "%v" + std::to_string(id);
  if (results.size() != 1) line += ":" + std::to_string(results.size());
  line += " = \"" + op + "\"(" + names_of(operands) + ")";
  if (!regions.empty()) {
    line += " (";
    for (size_t i = 0; i < regions.size(); ++i) {
      if (i) line += ", ";
      line += regions[i];
    }
    line += ")";
  }
  if (!attributes.empty()) line += " {" + attributes + "}";
  line += " : (" + types_of(operands) + ") -> ";
  line += results.size() == 1 ? results[0].mlir() : "(" + shapes_text(results) + ")";
  *out_ += line + "\n";

  std::vector<Value> values(results.size());
  for (size_t i = 0; i < results.size(); ++i) {
    values[i].id = id;
    values[i].result = results.size() == 1 ? -1 : static_cast<int>(i);
    values[i].shape = results[i];
  }
  return values;
}

Value Builder::emit1(const std::string& op, const std::vector<Value>& operands,
                     const std::string& attributes, const Shape& result,
                     const std::vector<std::string>& regions) {
  return emit(op, operands, attributes, {result}, regions)[0];
}

std::string Builder::region(const std::vector<Shape>& args, const RegionFn& body) {
  std::string text;
  std::string* saved_out = out_;
  int saved_indent = indent_;
  out_ = &text;
  indent_ = saved_indent + 4;
  std::vector<Value> block_args;
  std::string header = std::string(saved_indent + 2, ' ') + "^bb0(";
  for (size_t i = 0; i < args.size(); ++i) {
    Value v;
    v.id = next_id_++;
    v.shape = args[i];
    block_args.push_back(v);
    if (i) header += ", ";
    header += v.name() + ": " + args[i].mlir();
  }
  header += "):\n";
  std::vector<Value> yielded;
  try {
    yielded = body(*this, block_args);
  } catch (...) {
    out_ = saved_out;
    indent_ = saved_indent;
    throw;
  }
  text += std::string(indent_, ' ') + "\"stablehlo.return\"(" + names_of(yielded) + ") : (" +
          types_of(yielded) + ") -> ()\n";
  out_ = saved_out;
  indent_ = saved_indent;
  return "{\n" + header + text + std::string(saved_indent, ' ') + "}";
}

// ------------------------------------------------------------------ constants

Value Builder::constant(double value, ElementType type) {
  if (type == ElementType::F16 || type == ElementType::BF16) {
    return convert(constant(value, ElementType::F32), type);
  }
  if (is_complex(type)) {
    ElementType part = complex_component(type);
    return complex(constant(value, part), constant(0.0, part));
  }
  if (type == ElementType::Pred) return constant_bool(value != 0);
  if (is_integral(type)) return constant_int(static_cast<int64_t>(value), type);
  Shape shape = scalar_of(type);
  return emit1("stablehlo.constant", {},
               "value = dense<" + hex_float(value, type) + "> : " + shape.mlir(), shape);
}

Value Builder::constant_int(int64_t value, ElementType type) {
  if (!is_integral(type)) return constant(static_cast<double>(value), type);
  Shape shape = scalar_of(type);
  std::string text =
      is_unsigned(type) ? std::to_string(static_cast<uint64_t>(value)) : std::to_string(value);
  return emit1("stablehlo.constant", {}, "value = dense<" + text + "> : " + shape.mlir(), shape);
}

Value Builder::constant_bool(bool value) {
  Shape shape = scalar_of(ElementType::Pred);
  return emit1("stablehlo.constant", {},
               std::string("value = dense<") + (value ? "true" : "false") + "> : " + shape.mlir(),
               shape);
}

Value Builder::full(const Shape& shape, double value) {
  Value scalar = constant(value, shape.type);
  if (shape.dims.empty()) return scalar;
  return broadcast_in_dim(scalar, shape.dims, {});
}

Value Builder::iota(const Shape& shape, int64_t dimension) {
  if (dimension < 0 || dimension >= shape.rank()) fail("iota dimension out of range");
  return emit1("stablehlo.iota", {}, "iota_dimension = " + std::to_string(dimension) + " : i64",
               shape);
}

// ------------------------------------------------------------------ elementwise

Value Builder::unary(const char* op, const Value& x, std::optional<ElementType> result_type) {
  Shape shape = x.shape;
  if (result_type) shape.type = *result_type;
  return elementwise(std::string("stablehlo.") + op, {x}, "", shape);
}

Value Builder::binary(const char* op, const Value& a, const Value& b) {
  check_same_shape(a, b, op);
  return elementwise(std::string("stablehlo.") + op, {a, b}, "", a.shape);
}

Value Builder::abs(const Value& x) { return unary("abs", x, complex_component(x.type())); }

Value Builder::compare(const Value& a, const Value& b, Comparison direction) {
  check_same_shape(a, b, "compare");
  static const char* names[] = {"EQ", "NE", "LT", "LE", "GT", "GE"};
  std::string attrs = std::string("comparison_direction = #stablehlo<comparison_direction ") +
                      names[static_cast<int>(direction)] + ">";
  const char* compare_type = is_floating(a.type()) || is_complex(a.type())            ? "FLOAT"
                             : is_unsigned(a.type()) || a.type() == ElementType::Pred ? "UNSIGNED"
                                                                                      : "SIGNED";
  attrs += std::string(", compare_type = #stablehlo<comparison_type ") + compare_type + ">";
  return elementwise("stablehlo.compare", {a, b}, attrs, Shape{ElementType::Pred, a.dims()});
}

Value Builder::select(const Value& pred, const Value& on_true, const Value& on_false) {
  check_same_shape(on_true, on_false, "select");
  if (pred.type() != ElementType::Pred) fail("select predicate must be pred");
  if (pred.rank() != 0 && pred.dims() != on_true.dims()) fail("select predicate shape");
  return elementwise("stablehlo.select", {pred, on_true, on_false}, "", on_true.shape);
}

Value Builder::clamp(const Value& lo, const Value& x, const Value& hi) {
  return elementwise("stablehlo.clamp", {lo, x, hi}, "", x.shape);
}

Value Builder::convert(const Value& x, ElementType type) {
  if (x.type() == type) return x;
  return elementwise("stablehlo.convert", {x}, "", Shape{type, x.dims()});
}

Value Builder::bitcast_convert(const Value& x, ElementType type) {
  if (x.type() == type) return x;
  int from = element_size(x.type()), to = element_size(type);
  Dims dims = x.dims();
  if (to < from) {
    dims.push_back(from / to);  // each element becomes a row of narrower ones
  } else if (to > from) {
    if (x.rank() == 0 || dims.back() != to / from) {
      fail("bitcast_convert to a wider type needs a last dimension of " +
           std::to_string(to / from));
    }
    dims.pop_back();
  }
  if (to == from) return elementwise("stablehlo.bitcast_convert", {x}, "", Shape{type, dims});
  return emit1("stablehlo.bitcast_convert", {x}, "", Shape{type, dims});
}

Value Builder::complex(const Value& real, const Value& imag) {
  check_same_shape(real, imag, "complex");
  return elementwise("stablehlo.complex", {real, imag}, "",
                     Shape{to_complex(real.type()), real.dims()});
}

Value Builder::real(const Value& x) { return unary("real", x, complex_component(x.type())); }

Value Builder::imag(const Value& x) { return unary("imag", x, complex_component(x.type())); }

// ------------------------------------------------------------------ shapes

Value Builder::reshape(const Value& x, const Dims& dims) {
  Shape shape{x.type(), dims};
  if (shape.numel() != x.shape.numel()) {
    fail("reshape " + to_string(x.shape) + " to " + to_string(shape));
  }
  // A reshape of a reshape reads the original: programs keep storages flat,
  // so an op's result often goes to 1-D and back to its own shape.
  auto source_of = reshaped_from_.find(x.id);
  const Value& source = x.result < 0 && source_of != reshaped_from_.end() ? source_of->second : x;
  if (dims == source.dims()) return source;
  Value y = emit1("stablehlo.reshape", {source}, "", shape);
  reshaped_from_.emplace(y.id, source);
  return y;
}

Value Builder::broadcast_in_dim(const Value& x, const Dims& dims,
                                const Dims& broadcast_dimensions) {
  if (static_cast<int64_t>(broadcast_dimensions.size()) != x.rank()) {
    fail("broadcast_in_dim needs one target dimension per operand dimension");
  }
  for (size_t i = 0; i < broadcast_dimensions.size(); ++i) {
    int64_t d = broadcast_dimensions[i];
    if (d < 0 || d >= static_cast<int64_t>(dims.size()) ||
        (x.dims()[i] != 1 && x.dims()[i] != dims[d])) {
      fail("broadcast_in_dim of " + to_string(x.shape) + " to [" + join(dims, ",") + "] along " +
           i64_list(broadcast_dimensions));
    }
  }
  if (dims == x.dims()) {
    bool identity = true;
    for (size_t i = 0; i < broadcast_dimensions.size(); ++i) {
      identity &= broadcast_dimensions[i] == static_cast<int64_t>(i);
    }
    if (identity) return x;
  }
  Value y =
      emit1("stablehlo.broadcast_in_dim", {x},
            "broadcast_dimensions = " + i64_array(broadcast_dimensions), Shape{x.type(), dims});
  if (x.rank() == 0) broadcast_of_.emplace(y.id, x);
  return y;
}

Value Builder::elementwise(const std::string& op, const std::vector<Value>& operands,
                           const std::string& attributes, const Shape& result) {
  // The source shape of the first operand that is a reshape. The others must
  // be reshapes too, broadcast scalars or values XLA keeps in memory (a
  // product): reshaping those is free, while reshaping a broadcast along a
  // dimension or a transpose would cost index arithmetic per element.
  // Programs with bounded dynamic sizes keep their shapes: XLA tracks the
  // sizes by dimension.
  const Value* source = nullptr;
  bool movable = !dynamic_sizes_;
  for (const Value& x : operands) {
    if (x.rank() == 0) continue;  // a select's predicate or a clamp's bound
    bool single = x.result < 0;
    auto it = single ? reshaped_from_.find(x.id) : reshaped_from_.end();
    if (it != reshaped_from_.end()) {
      if (!source) source = &it->second;
    } else if (!(single && (broadcast_of_.count(x.id) || stored_.count(x.id)))) {
      movable = false;
    }
  }
  if (!source || !movable) return emit1(op, operands, attributes, result);
  Dims dims = source->dims();
  std::vector<Value> moved;
  for (const Value& x : operands) {
    auto scalar = x.result < 0 ? broadcast_of_.find(x.id) : broadcast_of_.end();
    if (x.rank() == 0) {
      moved.push_back(x);  // a select's predicate or a clamp's bound
    } else if (scalar != broadcast_of_.end()) {
      Value value = scalar->second;  // the map may grow below
      moved.push_back(broadcast_in_dim(value, dims, {}));
    } else {
      moved.push_back(reshape(x, dims));
    }
  }
  Value flat = emit1(op, moved, attributes, Shape{result.type, dims});
  return reshape(flat, result.dims);
}

namespace {

// A transpose with size-1 dimensions dropped and runs of dimensions that stay
// adjacent and in order merged: the same data movement at the lowest rank.
struct CollapsedTranspose {
  Dims dims;         // operand dimensions after collapsing
  Dims permutation;  // over `dims`
};

CollapsedTranspose collapse(const Dims& dims, const Dims& permutation) {
  // Output-ordered runs [first, last] of operand dimensions, size-1 ones skipped.
  std::vector<std::pair<int64_t, int64_t>> runs;
  for (int64_t d : permutation) {
    if (dims[d] == 1) continue;
    if (!runs.empty() && runs.back().second + 1 == d) {
      runs.back().second = d;
    } else {
      runs.emplace_back(d, d);
    }
  }
  std::vector<size_t> by_operand(runs.size());
  for (size_t i = 0; i < runs.size(); ++i) by_operand[i] = i;
  std::sort(by_operand.begin(), by_operand.end(),
            [&](size_t l, size_t r) { return runs[l].first < runs[r].first; });
  CollapsedTranspose c;
  c.permutation.resize(runs.size());
  for (size_t k = 0; k < by_operand.size(); ++k) {
    const auto& [first, last] = runs[by_operand[k]];
    int64_t size = 1;
    for (int64_t d = first; d <= last; ++d) size *= dims[d];
    c.dims.push_back(size);
    c.permutation[by_operand[k]] = static_cast<int64_t>(k);
  }
  return c;
}

// XLA's CPU backend compiles a rank-6 transpose in seconds and a rank-8 one
// in minutes (LLVM unrolls the loop nest of the copy); transposes above this
// rank are done as several of rank <= 4.
constexpr size_t kMaxTransposeRank = 4;

}  // namespace

Value Builder::transpose(const Value& x, const Dims& permutation) {
  if (static_cast<int64_t>(permutation.size()) != x.rank()) fail("transpose permutation");
  Dims dims(permutation.size());
  bool identity = true;
  for (size_t i = 0; i < permutation.size(); ++i) {
    dims[i] = x.dim(permutation[i]);
    identity &= permutation[i] == static_cast<int64_t>(i);
  }
  if (identity) return x;
  // Programs with bounded dynamic sizes transpose dimension by dimension: a
  // reshape merging a sized dimension with another would make XLA move the
  // valid entries together (its compaction), not keep the padded layout.
  if (dynamic_sizes_) return emit_transpose(x, permutation);
  CollapsedTranspose c = collapse(x.dims(), permutation);
  Value y = c.dims.size() == static_cast<size_t>(x.rank()) ? x : reshape(x, c.dims);
  if (std::is_sorted(c.permutation.begin(), c.permutation.end())) {
    // Only size-1 dimensions moved: a reshape.
  } else if (c.dims.size() <= kMaxTransposeRank) {
    y = emit_transpose(y, c.permutation);
  } else {
    // Move each dimension to its place in turn: every step keeps a prefix and
    // a suffix and swaps two blocks, a transpose of rank <= 4 once collapsed.
    Dims order(c.dims.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
    for (size_t i = 0; i < order.size(); ++i) {
      size_t j = std::find(order.begin(), order.end(), c.permutation[i]) - order.begin();
      if (j == i) continue;
      Dims step(order.size());
      for (size_t k = 0; k < step.size(); ++k) {
        step[k] = static_cast<int64_t>(k < i || k > j ? k : k == i ? j : k - 1);
      }
      CollapsedTranspose s = collapse(y.dims(), step);
      Dims moved(order.size());
      for (size_t k = 0; k < step.size(); ++k) moved[k] = y.dim(step[k]);
      // The barrier keeps XLA from folding the steps back into one.
      Value t = emit_transpose(reshape(y, s.dims), s.permutation);
      t = optimization_barrier({t})[0];
      y = reshape(t, moved);
      std::rotate(order.begin() + i, order.begin() + j, order.begin() + j + 1);
    }
  }
  y = y.dims() == dims ? y : reshape(y, dims);
  transposed_[y.id] = {x, permutation};
  return y;
}

namespace {

// replica_groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>
std::string replica_groups_attr(const Builder::ReplicaGroups& groups) {
  if (groups.empty() || groups[0].empty()) fail("collectives need non-empty replica groups");
  std::string out = "replica_groups = dense<[";
  for (size_t i = 0; i < groups.size(); ++i) {
    if (groups[i].size() != groups[0].size()) fail("replica groups of unequal size");
    out += (i ? ", " : "") + i64_list(groups[i]);
  }
  return out + "]> : tensor<" + std::to_string(groups.size()) + "x" +
         std::to_string(groups[0].size()) + "xi64>";
}

int64_t group_size(const Builder::ReplicaGroups& groups) {
  return groups.empty() ? 0 : static_cast<int64_t>(groups[0].size());
}

void check_dimension(const Value& x, int64_t dimension, const char* op) {
  if (dimension < 0 || dimension >= x.rank()) fail(std::string(op) + " dimension out of range");
}

}  // namespace

Value Builder::all_reduce(const Value& x, const ReplicaGroups& groups, const RegionFn& combine) {
  const Shape scalar{x.type(), {}};
  return emit1("stablehlo.all_reduce", {x}, replica_groups_attr(groups), x.shape,
               {region({scalar, scalar}, combine)});
}

Value Builder::all_gather(const Value& x, int64_t dimension, const ReplicaGroups& groups) {
  check_dimension(x, dimension, "all_gather");
  Shape out = x.shape;
  out.dims[dimension] *= group_size(groups);
  return emit1(
      "stablehlo.all_gather", {x},
      "all_gather_dim = " + std::to_string(dimension) + " : i64, " + replica_groups_attr(groups),
      out);
}

Value Builder::reduce_scatter(const Value& x, int64_t dimension, const ReplicaGroups& groups,
                              const RegionFn& combine) {
  check_dimension(x, dimension, "reduce_scatter");
  const int64_t n = group_size(groups);
  if (n == 0 || x.dim(dimension) % n != 0) fail("reduce_scatter of an indivisible dimension");
  Shape out = x.shape;
  out.dims[dimension] /= n;
  const Shape scalar{x.type(), {}};
  return emit1(
      "stablehlo.reduce_scatter", {x},
      "scatter_dimension = " + std::to_string(dimension) + " : i64, " + replica_groups_attr(groups),
      out, {region({scalar, scalar}, combine)});
}

Value Builder::all_to_all(const Value& x, int64_t split_dimension, int64_t concat_dimension,
                          const ReplicaGroups& groups) {
  check_dimension(x, split_dimension, "all_to_all");
  check_dimension(x, concat_dimension, "all_to_all");
  const int64_t n = group_size(groups);
  if (n == 0 || x.dim(split_dimension) % n != 0) fail("all_to_all of an indivisible dimension");
  Shape out = x.shape;
  out.dims[split_dimension] /= n;
  out.dims[concat_dimension] *= n;
  return emit1("stablehlo.all_to_all", {x},
               "split_dimension = " + std::to_string(split_dimension) +
                   " : i64, concat_dimension = " + std::to_string(concat_dimension) +
                   " : i64, split_count = " + std::to_string(n) + " : i64, " +
                   replica_groups_attr(groups),
               out);
}

Value Builder::collective_permute(const Value& x,
                                  const std::vector<std::pair<int64_t, int64_t>>& pairs) {
  if (pairs.empty()) fail("collective_permute without pairs");
  std::string attr = "source_target_pairs = dense<[";
  for (size_t i = 0; i < pairs.size(); ++i) {
    attr += (i ? ", [" : "[") + std::to_string(pairs[i].first) + ", " +
            std::to_string(pairs[i].second) + "]";
  }
  attr += "]> : tensor<" + std::to_string(pairs.size()) + "x2xi64>";
  return emit1("stablehlo.collective_permute", {x}, attr, x.shape);
}

Value Builder::replica_id() {
  return emit1("stablehlo.replica_id", {}, "", {ElementType::U32, {}});
}

std::vector<Value> Builder::optimization_barrier(const std::vector<Value>& values) {
  std::vector<Shape> shapes;
  for (const Value& v : values) shapes.push_back(v.shape);
  return emit("stablehlo.optimization_barrier", values, "", shapes);
}

Value Builder::set_dimension_size(const Value& x, const Value& size, int64_t dimension) {
  if (dimension < 0 || dimension >= x.rank()) fail("set_dimension_size dimension out of range");
  dynamic_sizes_ = true;
  return emit1("stablehlo.set_dimension_size", {x, size},
               "dimension = " + std::to_string(dimension) + " : i64", x.shape);
}

Value Builder::static_size(const Value& x) {
  // A gather's result has the static shape of its indices, whichever sizes its
  // operand has (a constant set_dimension_size, a pad or a dynamic_slice of the
  // whole all keep the dimension dynamic on XLA's CPU backend).
  Value flat = reshape(x, {x.shape.numel()});
  Value indices = iota({ElementType::S32, {flat.dim(0), 1}}, 0);
  GatherDims dims;
  dims.collapsed_slice_dims = {0};
  dims.start_index_map = {0};
  dims.index_vector_dim = 1;
  return reshape(gather(flat, indices, dims, {1}), x.dims());
}

const Builder::Transposed* Builder::transposed(const Value& x) const {
  auto it = transposed_.find(x.id);
  return it == transposed_.end() || x.result >= 0 ? nullptr : &it->second;
}

Value Builder::emit_transpose(const Value& x, const Dims& permutation) {
  Dims dims(permutation.size());
  for (size_t i = 0; i < permutation.size(); ++i) dims[i] = x.dim(permutation[i]);
  return emit1("stablehlo.transpose", {x}, "permutation = " + i64_array(permutation),
               Shape{x.type(), dims});
}

Value Builder::slice(const Value& x, const Dims& start, const Dims& limit, const Dims& strides) {
  if (static_cast<int64_t>(start.size()) != x.rank() || limit.size() != start.size() ||
      strides.size() != start.size()) {
    fail("slice indices do not match the operand rank");
  }
  Dims dims(start.size());
  for (size_t i = 0; i < start.size(); ++i) {
    if (start[i] < 0 || limit[i] > x.dims()[i] || start[i] > limit[i] || strides[i] < 1) {
      fail("slice out of bounds on " + to_string(x.shape));
    }
    dims[i] = (limit[i] - start[i] + strides[i] - 1) / strides[i];
  }
  if (dims == x.dims()) return x;
  return emit1("stablehlo.slice", {x},
               "start_indices = " + i64_array(start) + ", limit_indices = " + i64_array(limit) +
                   ", strides = " + i64_array(strides),
               Shape{x.type(), dims});
}

Value Builder::dynamic_slice(const Value& x, const std::vector<Value>& starts, const Dims& sizes) {
  if (static_cast<int64_t>(starts.size()) != x.rank() || sizes.size() != starts.size()) {
    fail("dynamic_slice indices do not match the operand rank");
  }
  std::vector<Value> operands{x};
  operands.insert(operands.end(), starts.begin(), starts.end());
  return emit1("stablehlo.dynamic_slice", operands, "slice_sizes = " + i64_array(sizes),
               Shape{x.type(), sizes});
}

Value Builder::dynamic_update_slice(const Value& x, const Value& update,
                                    const std::vector<Value>& starts) {
  if (static_cast<int64_t>(starts.size()) != x.rank() || update.rank() != x.rank() ||
      update.type() != x.type()) {
    fail("dynamic_update_slice operands");
  }
  std::vector<Value> operands{x, update};
  operands.insert(operands.end(), starts.begin(), starts.end());
  return emit1("stablehlo.dynamic_update_slice", operands, "", x.shape);
}

// XLA's CPU backend compiles a concatenate in time that grows faster than its
// operand count (270 s for 999 operands, 0.6 s for 500). Longer ones are
// concatenated in groups of kConcatenateGroup, each behind a barrier (XLA's
// simplifier would merge nested concatenates back into one), then the groups'
// results likewise: compile time stays about linear (0.5 s for 1,000 operands,
// 6 s for 10,000), for one more copy of the data per level.
constexpr size_t kMaxConcatenateOperands = 64;
constexpr size_t kConcatenateGroup = 8;

Value Builder::concatenate(const std::vector<Value>& xs, int64_t dimension) {
  if (xs.empty()) fail("concatenate of nothing");
  if (xs.size() == 1) return xs[0];
  if (xs.size() > kMaxConcatenateOperands) {
    std::vector<Value> groups;
    for (size_t i = 0; i < xs.size(); i += kConcatenateGroup) {
      std::vector<Value> part(xs.begin() + i,
                              xs.begin() + std::min(xs.size(), i + kConcatenateGroup));
      groups.push_back(optimization_barrier({concatenate(part, dimension)})[0]);
    }
    return concatenate(groups, dimension);
  }
  Shape shape = xs[0].shape;
  shape.dims[dimension] = 0;
  for (const Value& x : xs) {
    if (x.rank() != shape.rank() || x.type() != shape.type) fail("concatenate operands");
    shape.dims[dimension] += x.dim(dimension);
  }
  return emit1("stablehlo.concatenate", xs, "dimension = " + std::to_string(dimension) + " : i64",
               shape);
}

Value Builder::pad(const Value& x, const Value& padding_value, const Dims& low, const Dims& high,
                   const Dims& interior) {
  Dims dims(x.rank());
  for (int64_t i = 0; i < x.rank(); ++i) {
    int64_t n = x.dim(i);
    dims[i] = low[i] + high[i] + n + (n > 0 ? (n - 1) * interior[i] : 0);
    if (dims[i] < 0) fail("pad produces a negative dimension");
  }
  return emit1("stablehlo.pad", {x, padding_value},
               "edge_padding_low = " + i64_array(low) + ", edge_padding_high = " + i64_array(high) +
                   ", interior_padding = " + i64_array(interior),
               Shape{x.type(), dims});
}

Value Builder::reverse(const Value& x, const Dims& dimensions) {
  if (dimensions.empty()) return x;
  return emit1("stablehlo.reverse", {x}, "dimensions = " + i64_array(dimensions), x.shape);
}

// ------------------------------------------------------------------ reductions

std::vector<Value> Builder::reduce(const std::vector<Value>& inputs,
                                   const std::vector<Value>& inits, const Dims& dimensions,
                                   const RegionFn& body) {
  if (inputs.size() != inits.size() || inputs.empty()) fail("reduce operands");
  std::vector<bool> reduced(inputs[0].rank(), false);
  for (int64_t d : dimensions) {
    if (d < 0 || d >= inputs[0].rank() || reduced[d]) fail("reduce dimensions");
    reduced[d] = true;
  }
  Dims out_dims;
  for (int64_t i = 0; i < inputs[0].rank(); ++i) {
    if (!reduced[i]) out_dims.push_back(inputs[0].dim(i));
  }
  std::vector<Shape> args, results;
  for (const Value& init : inits) args.push_back(init.shape);
  for (const Value& init : inits) args.push_back(init.shape);
  for (const Value& init : inits) results.push_back(Shape{init.type(), out_dims});
  std::vector<Value> operands = inputs;
  operands.insert(operands.end(), inits.begin(), inits.end());
  std::string body_text = region(args, body);
  return emit("stablehlo.reduce", operands, "dimensions = " + i64_array(dimensions), results,
              {body_text});
}

std::vector<Value> Builder::reduce_window(const std::vector<Value>& inputs,
                                          const std::vector<Value>& inits, const Window& window,
                                          const RegionFn& body) {
  if (inputs.size() != inits.size() || inputs.empty()) fail("reduce_window operands");
  size_t rank = inputs[0].rank();
  Dims strides = window.strides.empty() ? ones(rank) : window.strides;
  Dims base = window.base_dilations.empty() ? ones(rank) : window.base_dilations;
  Dims wdil = window.window_dilations.empty() ? ones(rank) : window.window_dilations;
  auto padding = window.padding;
  if (padding.empty()) padding.assign(rank, {0, 0});
  Dims out_dims(rank);
  for (size_t i = 0; i < rank; ++i) {
    out_dims[i] = window_output(inputs[0].dim(i), window.dimensions[i], strides[i], base[i],
                                wdil[i], padding[i].first, padding[i].second);
  }
  std::vector<Shape> args, results;
  for (const Value& init : inits) args.push_back(init.shape);
  for (const Value& init : inits) args.push_back(init.shape);
  for (const Value& init : inits) results.push_back(Shape{init.type(), out_dims});
  std::vector<Value> operands = inputs;
  operands.insert(operands.end(), inits.begin(), inits.end());
  std::string attrs =
      "window_dimensions = " + i64_array(window.dimensions) +
      ", window_strides = " + i64_array(strides) + ", base_dilations = " + i64_array(base) +
      ", window_dilations = " + i64_array(wdil) + ", padding = " + padding_attr(padding);
  std::string body_text = region(args, body);
  return emit("stablehlo.reduce_window", operands, attrs, results, {body_text});
}

Value Builder::select_and_scatter(const Value& operand, const Value& source, const Value& init,
                                  const Window& window, const RegionFn& select,
                                  const RegionFn& scatter) {
  size_t rank = operand.rank();
  Dims strides = window.strides.empty() ? ones(rank) : window.strides;
  auto padding = window.padding;
  if (padding.empty()) padding.assign(rank, {0, 0});
  Shape elem{operand.type(), {}};
  std::string select_text = region({elem, elem}, select);
  std::string scatter_text = region({init.shape, init.shape}, scatter);
  std::string attrs = "window_dimensions = " + i64_array(window.dimensions) +
                      ", window_strides = " + i64_array(strides) +
                      ", padding = " + padding_attr(padding);
  return emit1("stablehlo.select_and_scatter", {operand, source, init}, attrs, operand.shape,
               {select_text, scatter_text});
}

// ------------------------------------------------------------------ linalg

Value Builder::dot_general(const Value& lhs, const Value& rhs, const DotDims& d,
                           Precision precision, ElementType result_type) {
  if (d.lhs_batch.size() != d.rhs_batch.size() || d.lhs_contract.size() != d.rhs_contract.size()) {
    fail("dot_general dimension numbers");
  }
  Dims out;
  for (size_t i = 0; i < d.lhs_batch.size(); ++i) {
    if (lhs.dim(d.lhs_batch[i]) != rhs.dim(d.rhs_batch[i])) fail("dot_general batch sizes");
    out.push_back(lhs.dim(d.lhs_batch[i]));
  }
  for (size_t i = 0; i < d.lhs_contract.size(); ++i) {
    if (lhs.dim(d.lhs_contract[i]) != rhs.dim(d.rhs_contract[i])) {
      fail("dot_general contracting sizes " + to_string(lhs.shape) + " x " + to_string(rhs.shape));
    }
  }
  auto free_dims = [&](const Value& v, const Dims& batch, const Dims& contract) {
    for (int64_t i = 0; i < v.rank(); ++i) {
      bool used = false;
      for (int64_t b : batch) used |= b == i;
      for (int64_t c : contract) used |= c == i;
      if (!used) out.push_back(v.dim(i));
    }
  };
  free_dims(lhs, d.lhs_batch, d.lhs_contract);
  free_dims(rhs, d.rhs_batch, d.rhs_contract);
  std::string attrs =
      "dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = " + i64_list(d.lhs_batch) +
      ", rhs_batching_dimensions = " + i64_list(d.rhs_batch) +
      ", lhs_contracting_dimensions = " + i64_list(d.lhs_contract) +
      ", rhs_contracting_dimensions = " + i64_list(d.rhs_contract) + ">, " +
      precision_attr(precision, 2);
  Value y = emit1("stablehlo.dot_general", {lhs, rhs}, attrs, Shape{result_type, out});
  stored_.insert(y.id);
  return y;
}

Value Builder::convolution(const Value& lhs, const Value& rhs, const ConvDims& d,
                           const ConvConfig& c, Precision precision, ElementType result_type) {
  size_t spatial = d.input_spatial.size();
  Dims strides = c.window_strides.empty() ? ones(spatial) : c.window_strides;
  Dims lhs_dil = c.lhs_dilation.empty() ? ones(spatial) : c.lhs_dilation;
  Dims rhs_dil = c.rhs_dilation.empty() ? ones(spatial) : c.rhs_dilation;
  auto padding = c.padding;
  if (padding.empty()) padding.assign(spatial, {0, 0});
  Dims out(lhs.rank());
  out[d.output_batch] = lhs.dim(d.input_batch) / c.batch_group_count;
  out[d.output_feature] = rhs.dim(d.kernel_output_feature);
  for (size_t i = 0; i < spatial; ++i) {
    out[d.output_spatial[i]] =
        window_output(lhs.dim(d.input_spatial[i]), rhs.dim(d.kernel_spatial[i]), strides[i],
                      lhs_dil[i], rhs_dil[i], padding[i].first, padding[i].second);
  }
  std::string dims =
      "#stablehlo.conv<raw input_batch_dimension = " + std::to_string(d.input_batch) +
      ", input_feature_dimension = " + std::to_string(d.input_feature) +
      ", input_spatial_dimensions = " + i64_list(d.input_spatial) +
      ", kernel_input_feature_dimension = " + std::to_string(d.kernel_input_feature) +
      ", kernel_output_feature_dimension = " + std::to_string(d.kernel_output_feature) +
      ", kernel_spatial_dimensions = " + i64_list(d.kernel_spatial) +
      ", output_batch_dimension = " + std::to_string(d.output_batch) +
      ", output_feature_dimension = " + std::to_string(d.output_feature) +
      ", output_spatial_dimensions = " + i64_list(d.output_spatial) + ">";
  std::string attrs =
      "batch_group_count = " + std::to_string(c.batch_group_count) +
      " : i64, dimension_numbers = " + dims +
      ", feature_group_count = " + std::to_string(c.feature_group_count) +
      " : i64, lhs_dilation = " + i64_array(lhs_dil) + ", padding = " + padding_attr(padding) +
      ", rhs_dilation = " + i64_array(rhs_dil) + ", window_strides = " + i64_array(strides) + ", " +
      precision_attr(precision, 2);
  Value y = emit1("stablehlo.convolution", {lhs, rhs}, attrs, Shape{result_type, out});
  stored_.insert(y.id);
  return y;
}

// ------------------------------------------------------------------ indexing

Value Builder::gather(const Value& operand, const Value& indices, const GatherDims& d,
                      const Dims& slice_sizes) {
  Dims batch;
  for (int64_t i = 0; i < indices.rank(); ++i) {
    if (i != d.index_vector_dim) batch.push_back(indices.dim(i));
  }
  Dims offsets;
  for (int64_t i = 0; i < operand.rank(); ++i) {
    bool collapsed = false;
    for (int64_t c : d.collapsed_slice_dims) collapsed |= c == i;
    if (!collapsed) offsets.push_back(slice_sizes[i]);
  }
  Dims out(batch.size() + offsets.size());
  size_t next_batch = 0, next_offset = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    bool is_offset = false;
    for (int64_t o : d.offset_dims) is_offset |= o == static_cast<int64_t>(i);
    out[i] = is_offset ? offsets.at(next_offset++) : batch.at(next_batch++);
  }
  std::string attrs =
      "dimension_numbers = #stablehlo.gather<offset_dims = " + i64_list(d.offset_dims) +
      ", collapsed_slice_dims = " + i64_list(d.collapsed_slice_dims) +
      ", start_index_map = " + i64_list(d.start_index_map) +
      ", index_vector_dim = " + std::to_string(d.index_vector_dim) +
      ">, indices_are_sorted = false, slice_sizes = " + i64_array(slice_sizes);
  return emit1("stablehlo.gather", {operand, indices}, attrs, Shape{operand.type(), out});
}

Value Builder::scatter(const Value& operand, const Value& indices, const Value& updates,
                       const ScatterDims& d, const RegionFn& update) {
  Shape elem{operand.type(), {}};
  std::string update_text = region({elem, elem}, update);
  std::string attrs =
      "indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<"
      "update_window_dims = " +
      i64_list(d.update_window_dims) +
      ", inserted_window_dims = " + i64_list(d.inserted_window_dims) +
      ", scatter_dims_to_operand_dims = " + i64_list(d.scatter_dims_to_operand_dims) +
      ", index_vector_dim = " + std::to_string(d.index_vector_dim) + ">, unique_indices = false";
  return emit1("stablehlo.scatter", {operand, indices, updates}, attrs, operand.shape,
               {update_text});
}

// ------------------------------------------------------------------ misc

std::vector<Value> Builder::sort(const std::vector<Value>& inputs, int64_t dimension, bool stable,
                                 const RegionFn& comparator) {
  std::vector<Shape> args, results;
  for (const Value& v : inputs) {
    args.push_back(Shape{v.type(), {}});
    args.push_back(Shape{v.type(), {}});
    results.push_back(v.shape);
  }
  std::string text = region(args, comparator);
  ++loops_and_sorts_;
  return emit("stablehlo.sort", inputs,
              "dimension = " + std::to_string(dimension) +
                  " : i64, is_stable = " + (stable ? "true" : "false"),
              results, {text});
}

std::pair<Value, Value> Builder::rng_bit_generator(const Value& state, const Shape& shape) {
  auto values = emit("stablehlo.rng_bit_generator", {state},
                     "rng_algorithm = #stablehlo<rng_algorithm THREE_FRY>", {state.shape, shape});
  return {values[0], values[1]};
}

std::vector<Value> Builder::while_loop(const std::vector<Value>& init, const RegionFn& cond,
                                       const RegionFn& body) {
  std::vector<Shape> shapes;
  for (const Value& v : init) shapes.push_back(v.shape);
  std::string cond_text = region(shapes, cond);
  std::string body_text = region(shapes, body);
  ++loops_and_sorts_;
  return emit("stablehlo.while", init, "", shapes, {cond_text, body_text});
}

}  // namespace torch_tpu::hlo

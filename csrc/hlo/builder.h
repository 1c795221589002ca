// A small StableHLO program builder. Values are typed with static shapes; each
// method emits one StableHLO op in MLIR's generic syntax (stable across the
// StableHLO versions of the plugins we load) and infers its result type.
// `Builder::module_text()` prints a module whose entry is `func.func public
// @main`.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "runtime/element_type.h"

namespace torch_tpu::hlo {

using Dims = std::vector<int64_t>;

struct Shape {
  ElementType type = ElementType::Invalid;
  Dims dims;

  int64_t rank() const { return static_cast<int64_t>(dims.size()); }
  int64_t numel() const;
  // tensor<2x3xf32>
  std::string mlir() const;
  bool operator==(const Shape& o) const { return type == o.type && dims == o.dims; }
  bool operator!=(const Shape& o) const { return !(*this == o); }
};

std::string to_string(const Shape& shape);  // f32[2,3]

// An SSA value of the program being built.
struct Value {
  int id = 0;       // parameters have negative ids (-1 is %arg0)
  int result = -1;  // index into a multi-result op, or -1
  Shape shape;

  ElementType type() const { return shape.type; }
  const Dims& dims() const { return shape.dims; }
  int64_t rank() const { return shape.rank(); }
  int64_t dim(int64_t i) const { return shape.dims.at(i < 0 ? i + rank() : i); }
  std::string name() const;
};

enum class Comparison { EQ, NE, LT, LE, GT, GE };
enum class Precision { Default, High, Highest };

struct DotDims {
  Dims lhs_batch, rhs_batch, lhs_contract, rhs_contract;
};

struct ConvDims {
  int64_t input_batch = 0, input_feature = 1;
  Dims input_spatial;
  int64_t kernel_output_feature = 0, kernel_input_feature = 1;
  Dims kernel_spatial;
  int64_t output_batch = 0, output_feature = 1;
  Dims output_spatial;
};

struct ConvConfig {
  Dims window_strides;
  std::vector<std::pair<int64_t, int64_t>> padding;
  Dims lhs_dilation;
  Dims rhs_dilation;
  int64_t feature_group_count = 1;
  int64_t batch_group_count = 1;
};

struct GatherDims {
  Dims offset_dims, collapsed_slice_dims, start_index_map;
  int64_t index_vector_dim = 0;
};

struct ScatterDims {
  Dims update_window_dims, inserted_window_dims, scatter_dims_to_operand_dims;
  int64_t index_vector_dim = 0;
};

struct Window {
  Dims dimensions;
  Dims strides;
  Dims base_dilations;
  Dims window_dilations;
  std::vector<std::pair<int64_t, int64_t>> padding;
};

class Builder;
// Body of a region: receives the builder and the block arguments, returns
// what the region yields.
using RegionFn = std::function<std::vector<Value>(Builder&, const std::vector<Value>&)>;

class Builder {
 public:
  Builder() = default;
  Builder(const Builder&) = delete;
  Builder& operator=(const Builder&) = delete;

  // ---- program interface
  Value parameter(const Shape& shape);
  const std::vector<Shape>& parameters() const { return params_; }
  // Marks parameter `param` as reusable for result `result` (donation).
  void alias_output(int param, int result);
  // Prints the whole module returning `results` from @main.
  std::string module_text(const std::vector<Value>& results) const;

  // ---- constants
  // Scalar (rank-0) constant; floats of every width print exactly.
  Value constant(double value, ElementType type);
  Value constant_int(int64_t value, ElementType type);
  Value constant_bool(bool value);
  // Splat constant of `shape`.
  Value full(const Shape& shape, double value);
  Value iota(const Shape& shape, int64_t dimension);

  // ---- elementwise
  // Generic unary op, result type = operand type unless `result_type` given.
  Value unary(const char* op, const Value& x,
              std::optional<ElementType> result_type = std::nullopt);
  // Generic binary op on operands of equal shape.
  Value binary(const char* op, const Value& a, const Value& b);
  Value add(const Value& a, const Value& b) { return binary("add", a, b); }
  Value sub(const Value& a, const Value& b) { return binary("subtract", a, b); }
  Value mul(const Value& a, const Value& b) { return binary("multiply", a, b); }
  Value div(const Value& a, const Value& b) { return binary("divide", a, b); }
  Value rem(const Value& a, const Value& b) { return binary("remainder", a, b); }
  Value max(const Value& a, const Value& b) { return binary("maximum", a, b); }
  Value min(const Value& a, const Value& b) { return binary("minimum", a, b); }
  Value pow(const Value& a, const Value& b) { return binary("power", a, b); }
  Value and_(const Value& a, const Value& b) { return binary("and", a, b); }
  Value or_(const Value& a, const Value& b) { return binary("or", a, b); }
  Value xor_(const Value& a, const Value& b) { return binary("xor", a, b); }
  Value atan2(const Value& a, const Value& b) { return binary("atan2", a, b); }
  Value neg(const Value& x) { return unary("negate", x); }
  Value abs(const Value& x);
  Value exp(const Value& x) { return unary("exponential", x); }
  Value log(const Value& x) { return unary("log", x); }
  Value sqrt(const Value& x) { return unary("sqrt", x); }
  Value rsqrt(const Value& x) { return unary("rsqrt", x); }
  Value tanh(const Value& x) { return unary("tanh", x); }
  Value logistic(const Value& x) { return unary("logistic", x); }
  Value not_(const Value& x) { return unary("not", x); }
  Value floor(const Value& x) { return unary("floor", x); }
  Value ceil(const Value& x) { return unary("ceil", x); }
  Value is_finite(const Value& x) { return unary("is_finite", x, ElementType::Pred); }
  Value compare(const Value& a, const Value& b, Comparison direction);
  Value select(const Value& pred, const Value& on_true, const Value& on_false);
  Value clamp(const Value& lo, const Value& x, const Value& hi);
  Value convert(const Value& x, ElementType type);
  Value bitcast_convert(const Value& x, ElementType type);
  Value complex(const Value& real, const Value& imag);
  Value real(const Value& x);
  Value imag(const Value& x);

  // ---- shape manipulation
  Value reshape(const Value& x, const Dims& dims);
  Value broadcast_in_dim(const Value& x, const Dims& dims, const Dims& broadcast_dimensions);
  Value transpose(const Value& x, const Dims& permutation);
  // The operand and permutation `x` was made from by transpose(), or null.
  // Elementwise work commutes with a transpose: done on the operand instead,
  // XLA shares it with the operand's other uses (a weight read as W in one
  // op and as W^T in another) and folds the transpose into a dot.
  struct Transposed {
    Value operand;
    Dims permutation;
  };
  const Transposed* transposed(const Value& x) const;
  Value slice(const Value& x, const Dims& start, const Dims& limit, const Dims& strides);
  Value dynamic_slice(const Value& x, const std::vector<Value>& starts, const Dims& sizes);
  Value dynamic_update_slice(const Value& x, const Value& update, const std::vector<Value>& starts);
  Value concatenate(const std::vector<Value>& xs, int64_t dimension);
  Value pad(const Value& x, const Value& padding_value, const Dims& low, const Dims& high,
            const Dims& interior);
  Value reverse(const Value& x, const Dims& dimensions);
  // `x` with only the first `size` (an s32 scalar) entries of `dimension` valid
  // (bounded dynamism: XLA masks the rest in the ops that follow). A program
  // that has such sizes returns its results through static_size().
  Value set_dimension_size(const Value& x, const Value& size, int64_t dimension);
  bool has_dynamic_sizes() const { return dynamic_sizes_; }
  // Loops and sorts emitted so far: XLA's dynamic padder carries no bounded
  // size through them.
  int64_t loops_and_sorts() const { return loops_and_sorts_; }
  // What the program's execution costs at most, to choose how hard XLA
  // optimises it: the elements of its largest value (parameters included),
  // and whether it has ops whose work grows faster than their values (loops,
  // sorts, products, convolutions, windows, FFTs, calls into libraries).
  int64_t largest_value() const { return largest_value_; }
  bool has_superlinear_ops() const { return superlinear_ops_; }
  // `x` of static size again: a result's valid entries, in order, lead its
  // buffer (XLA's reshapes compact them), followed by padding.
  Value static_size(const Value& x);

  // ---- reductions and windows
  std::vector<Value> reduce(const std::vector<Value>& inputs, const std::vector<Value>& inits,
                            const Dims& dimensions, const RegionFn& body);
  std::vector<Value> reduce_window(const std::vector<Value>& inputs,
                                   const std::vector<Value>& inits, const Window& window,
                                   const RegionFn& body);
  Value select_and_scatter(const Value& operand, const Value& source, const Value& init,
                           const Window& window, const RegionFn& select, const RegionFn& scatter);

  // ---- linear algebra
  Value dot_general(const Value& lhs, const Value& rhs, const DotDims& dims, Precision precision,
                    ElementType result_type);
  Value convolution(const Value& lhs, const Value& rhs, const ConvDims& dims,
                    const ConvConfig& config, Precision precision, ElementType result_type);

  // ---- indexing
  Value gather(const Value& operand, const Value& indices, const GatherDims& dims,
               const Dims& slice_sizes);
  Value scatter(const Value& operand, const Value& indices, const Value& updates,
                const ScatterDims& dims, const RegionFn& update);

  // ---- misc
  std::vector<Value> sort(const std::vector<Value>& inputs, int64_t dimension, bool stable,
                          const RegionFn& comparator);
  // Returns {new_state, random_bits of `shape`} (THREE_FRY, u64[2] state).
  std::pair<Value, Value> rng_bit_generator(const Value& state, const Shape& shape);
  std::vector<Value> while_loop(const std::vector<Value>& init, const RegionFn& cond,
                                const RegionFn& body);

  // The values unchanged, but XLA may neither fuse through nor reorder across
  // the barrier: everything it returns is computed before any of its uses.
  std::vector<Value> optimization_barrier(const std::vector<Value>& values);

  // ---- collectives
  // Cross-replica: each replica of the program (one device each) runs the op
  // on its own operand, together with the replicas of its group. `groups`
  // partitions the replica ids; every group has `group_size` members.
  using ReplicaGroups = std::vector<Dims>;
  Value all_reduce(const Value& x, const ReplicaGroups& groups, const RegionFn& combine);
  // Concatenates the group's operands along `dimension`, in replica order.
  Value all_gather(const Value& x, int64_t dimension, const ReplicaGroups& groups);
  // Combines the group's operands, then keeps block `i` of `dimension` (split
  // in group-size blocks) on the group's i-th replica.
  Value reduce_scatter(const Value& x, int64_t dimension, const ReplicaGroups& groups,
                       const RegionFn& combine);
  // Splits `split_dimension` in group-size blocks, sends block j to the
  // group's j-th replica and concatenates what arrives along `concat_dimension`.
  Value all_to_all(const Value& x, int64_t split_dimension, int64_t concat_dimension,
                   const ReplicaGroups& groups);
  // Sends the operand from each pair's source replica to its target; a
  // replica no pair targets receives zeros.
  Value collective_permute(const Value& x, const std::vector<std::pair<int64_t, int64_t>>& pairs);
  // This replica's index (u32 scalar).
  Value replica_id();

  // ---- calls
  // Calls the function `entry` on `operands`. `functions` (MLIR func.func
  // ops, `entry` among them, symbol names unique to them) enter the module
  // once per `entry`, however often it is called; XLA inlines the calls, so
  // it optimises and fuses across them.
  std::vector<Value> call(const std::string& entry, const std::string& functions,
                          const std::vector<Value>& operands, const std::vector<Shape>& results);

  // Emits any op in generic form (escape hatch for rarely used ops).
  std::vector<Value> emit(const std::string& op, const std::vector<Value>& operands,
                          const std::string& attributes, const std::vector<Shape>& results,
                          const std::vector<std::string>& regions = {});

 private:
  Value emit1(const std::string& op, const std::vector<Value>& operands,
              const std::string& attributes, const Shape& result,
              const std::vector<std::string>& regions = {});
  // Emits an elementwise op. Elementwise work commutes with a reshape: when
  // an operand is a reshape (a view of a flat storage), the op runs on the
  // reshape's source shape and its result is reshaped back. XLA then sees an
  // op on the storage's own shape, which it can update in place: it never
  // shares a buffer across the bitcast of a reshape, so a donated storage
  // updated through a reshape is copied.
  Value elementwise(const std::string& op, const std::vector<Value>& operands,
                    const std::string& attributes, const Shape& result);
  // Builds the text of a single-block region with scalar arguments.
  std::string region(const std::vector<Shape>& args, const RegionFn& body);
  Value emit_transpose(const Value& x, const Dims& permutation);

  std::vector<Shape> params_;
  std::vector<std::pair<int, int>> aliases_;
  std::unordered_map<int, Transposed> transposed_;  // by result id
  std::unordered_map<int, Value> reshaped_from_;    // reshape results' operands
  std::unordered_map<int, Value> broadcast_of_;     // broadcast scalars by result id
  std::unordered_set<int> stored_;                  // products: XLA keeps them in memory
  bool dynamic_sizes_ = false;
  int64_t loops_and_sorts_ = 0;
  int64_t largest_value_ = 0;
  bool superlinear_ops_ = false;
  std::string body_;
  std::string functions_;  // called functions, after @main
  std::unordered_set<std::string> function_entries_;
  std::string* out_ = &body_;
  int indent_ = 4;
  int next_id_ = 0;
};

// Attribute printing helpers, shared with lowerings that use `emit`.
std::string i64_array(const Dims& values);  // array<i64: 1, 2>
std::string i64_list(const Dims& values);   // [1, 2]
std::string padding_attr(const std::vector<std::pair<int64_t, int64_t>>& p);

}  // namespace torch_tpu::hlo

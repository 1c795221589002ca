// Lowering rules: one function per ATen operator (or family), from symbolic
// input values plus static arguments to symbolic outputs. Rules see metadata
// only (shapes and element types), never data, and say nothing about
// dispatch, caching or views: strict eager, DeferAndFuse and torch.compile
// all call the same table.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "hlo/builder.h"

namespace torch_tpu::lower {

using hlo::Builder;
using hlo::Dims;
using hlo::Precision;
using hlo::Shape;
using hlo::Value;

struct None {
  bool operator==(const None&) const { return true; }
};
using IntList = std::vector<int64_t>;
using FloatList = std::vector<double>;
using BoolList = std::vector<bool>;
// A non-tensor argument whose value is part of the program (dim, keepdim,
// kernel_size, eps, reduction, dtype, ...).
using Static = std::variant<None, bool, int64_t, double, std::string, ElementType, IntList,
                            FloatList, BoolList>;

// PyTorch's type-promotion priority of an operand: tensors with dimensions
// win over zero-dim tensors, which win over Python numbers.
enum class Category : uint8_t { Tensor, ZeroDim, WrappedNumber };

// A tensor (or runtime scalar) operand of a rule.
struct Operand {
  Value value;
  // The dtype PyTorch promotes with. Equal to value.type() for tensors; for
  // Python numbers it is the default dtype of their kind (float32, int64,
  // bool, complex64) whatever type carries the value into the program.
  ElementType dtype = ElementType::Invalid;
  Category category = Category::Tensor;
};

struct Arg {
  Static value;                                  // static arguments
  std::vector<std::optional<Operand>> operands;  // tensor/scalar (one) or list
  bool is_operand = false;
  bool is_list = false;
};

class Args {
 public:
  explicit Args(std::vector<Arg> args) : args_(std::move(args)) {}

  size_t size() const { return args_.size(); }
  bool is_none(size_t i) const;

  // Tensor or scalar operands.
  Value tensor(size_t i) const { return operand(i).value; }
  const Operand& operand(size_t i) const;
  std::optional<Value> optional_tensor(size_t i) const;
  std::vector<Value> tensors(size_t i) const;
  const std::vector<std::optional<Operand>>& operand_list(size_t i) const;

  // Static arguments.
  int64_t integer(size_t i) const;
  std::optional<int64_t> optional_integer(size_t i) const;
  IntList ints(size_t i) const;  // an int also reads as a one-element list
  double real(size_t i) const;
  std::optional<double> optional_real(size_t i) const;
  bool boolean(size_t i) const;
  std::optional<bool> optional_boolean(size_t i) const;
  const std::string& str(size_t i) const;
  std::optional<ElementType> dtype(size_t i) const;
  BoolList bools(size_t i) const;

 private:
  const Arg& at(size_t i) const;
  std::vector<Arg> args_;
};

// A check the CPU's kernel makes on data before computing (an index in range,
// a valid probability). Rules cannot see data, so the program computes it:
// the engine raises the CPU's exception at the next point where the host
// waits anyway, naming the op (and at the op in the debug eager mode).
inline constexpr const char* kSizePlaceholder = "{size}";

struct DataCheck {
  enum class Error : uint8_t { Runtime, Index };  // RuntimeError or IndexError
  Value failed;                                   // pred scalar: the CPU would raise
  // s64 scalar written where `message` has "{}"; where it also has
  // kSizePlaceholder, value holds that "{}" times 2^32 plus the size.
  Value value;
  Error error = Error::Runtime;
  std::string message;  // the CPU's
};

class Context {
 public:
  Context(Builder& builder, std::string op_name, Precision precision, std::string platform,
          std::vector<Shape> outputs)
      : b(builder),
        op_name_(std::move(op_name)),
        precision_(precision),
        platform_(std::move(platform)),
        outputs_(std::move(outputs)) {}

  Builder& b;

  const std::string& op_name() const { return op_name_; }
  // float32 matmul/convolution precision (torch.tpu.Precision).
  Precision precision() const { return precision_; }
  // Platform that runs the program: "cpu", "cuda" or "tpu".
  const std::string& platform() const { return platform_; }
  // The results PyTorch expects (shape and dtype), in schema order.
  const Shape& output(size_t i) const;
  size_t num_outputs() const { return outputs_.size(); }

  // Random bits of `shape` (u32 or u64) from the op's generator. Only for
  // rules registered as `random`.
  Value random_bits(const Shape& shape);
  void set_rng_state(Value state) { rng_state_ = state; }
  int64_t random_consumed() const { return random_consumed_; }

  void check(DataCheck check) { checks_.push_back(std::move(check)); }
  const std::vector<DataCheck>& checks() const { return checks_; }

 private:
  std::string op_name_;
  Precision precision_;
  std::string platform_;
  std::vector<Shape> outputs_;
  std::optional<Value> rng_state_;
  int64_t random_consumed_ = 0;
  std::vector<DataCheck> checks_;
};

using RuleFn = std::vector<Value> (*)(Context&, const Args&);

struct Rule {
  RuleFn fn = nullptr;
  // Reads Context::precision() (matmul family): precision is in the cache key.
  bool precision = false;
  // Draws random numbers (needs the generator state as an operand).
  bool random = false;
  // The float argument of this name travels as a runtime scalar operand, not a
  // compiled-in constant: a value that changes every step (a scheduled
  // learning rate) must not compile a program per value.
  const char* float_operand = nullptr;
  // Each result entry depends only on operand entries at its position or
  // before it along every dimension (cumulative sums and products): operands
  // of bounded size are read at their bounds as they are, padding included,
  // which changes no valid entry; XLA's dynamic sizes would fail on the loop.
  bool prefix = false;
  // Takes dtypes the CPU's kernel refuses, as CUDA's kernel takes them (integer
  // histc): the CPU's refusal of a dtype (aten/meta_errors.h) is not the rule's.
  bool cuda_dtypes = false;
};

// Registers `rule` for each ATen operator name ("add.Tensor", "relu").
bool register_rule(std::initializer_list<const char*> names, Rule rule);
const Rule* find_rule(std::string_view name);
std::vector<std::string> rule_names();
// Names registered more than once (a mistake: the last registration wins).
std::vector<std::string> duplicate_rule_names();

// A rule that is invalid for the given inputs (used by rules for argument
// combinations they do not handle; the caller falls back to the CPU).
class Unsupported : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace torch_tpu::lower

#define TPU_LOWER_CAT2(a, b) a##b
#define TPU_LOWER_CAT(a, b) TPU_LOWER_CAT2(a, b)
#define TPU_REGISTER_RULE(rule, ...)                         \
  static const bool TPU_LOWER_CAT(tpu_lowering_, __LINE__) = \
      ::torch_tpu::lower::register_rule({__VA_ARGS__}, rule)

// TPU_LOWERING(relu, "relu") registers `relu` for the listed operators.
#define TPU_LOWERING(fn, ...) \
  TPU_REGISTER_RULE((::torch_tpu::lower::Rule{fn, false, false}), __VA_ARGS__)
// For rules that read Context::precision().
#define TPU_LOWERING_PRECISION(fn, ...) \
  TPU_REGISTER_RULE((::torch_tpu::lower::Rule{fn, true, false}), __VA_ARGS__)
// For rules whose float argument `arg` is read as a scalar operand (a.tensor).
#define TPU_LOWERING_FLOAT_OPERAND(fn, arg, ...) \
  TPU_REGISTER_RULE((::torch_tpu::lower::Rule{fn, false, false, arg}), __VA_ARGS__)
// For rules whose results depend on operand entries at or before their position.
#define TPU_LOWERING_PREFIX(fn, ...) \
  TPU_REGISTER_RULE((::torch_tpu::lower::Rule{fn, false, false, nullptr, true}), __VA_ARGS__)
// For rules that take dtypes the CPU's kernel refuses, as CUDA's does.
#define TPU_LOWERING_CUDA_DTYPES(fn, ...) \
  TPU_REGISTER_RULE((::torch_tpu::lower::Rule{fn, false, false, nullptr, false, true}), __VA_ARGS__)
// For rules that call Context::random_bits().
#define TPU_LOWERING_RANDOM(fn, ...) \
  TPU_REGISTER_RULE((::torch_tpu::lower::Rule{fn, false, true}), __VA_ARGS__)

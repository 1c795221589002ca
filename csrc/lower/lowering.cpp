#include "lower/lowering.h"

#include <map>

namespace torch_tpu::lower {

namespace {

std::map<std::string, Rule, std::less<>>& table() {
  static std::map<std::string, Rule, std::less<>> rules;
  return rules;
}

[[noreturn]] void bad_arg(size_t i, const char* expected) {
  throw std::invalid_argument("lowering argument " + std::to_string(i) + " is not " + expected);
}

template <class T>
const T& get(const Static& value, size_t i, const char* expected) {
  if (auto* v = std::get_if<T>(&value)) return *v;
  bad_arg(i, expected);
}

std::vector<std::string>& duplicates() {
  static std::vector<std::string> names;
  return names;
}

}  // namespace

bool register_rule(std::initializer_list<const char*> names, Rule rule) {
  for (const char* name : names) {
    if (table().count(name)) duplicates().push_back(name);
    table()[name] = rule;
  }
  return true;
}

std::vector<std::string> duplicate_rule_names() { return duplicates(); }

const Rule* find_rule(std::string_view name) {
  auto it = table().find(name);
  return it == table().end() ? nullptr : &it->second;
}

std::vector<std::string> rule_names() {
  std::vector<std::string> names;
  for (const auto& [name, rule] : table()) names.push_back(name);
  return names;
}

// ------------------------------------------------------------------ Args

const Arg& Args::at(size_t i) const {
  if (i >= args_.size()) {
    throw std::invalid_argument("lowering argument " + std::to_string(i) + " is missing");
  }
  return args_[i];
}

bool Args::is_none(size_t i) const {
  if (i >= args_.size()) return true;
  const Arg& a = args_[i];
  if (a.is_operand) return !a.operands[0].has_value();
  return std::holds_alternative<None>(a.value);
}

const Operand& Args::operand(size_t i) const {
  const Arg& a = at(i);
  if (!a.is_operand || a.is_list || !a.operands[0]) bad_arg(i, "a tensor");
  return *a.operands[0];
}

std::optional<Value> Args::optional_tensor(size_t i) const {
  if (is_none(i)) return std::nullopt;
  return tensor(i);
}

const std::vector<std::optional<Operand>>& Args::operand_list(size_t i) const {
  const Arg& a = at(i);
  if (!a.is_list) bad_arg(i, "a tensor list");
  return a.operands;
}

std::vector<Value> Args::tensors(size_t i) const {
  std::vector<Value> values;
  for (const auto& o : operand_list(i)) {
    if (!o) bad_arg(i, "a list without None");
    values.push_back(o->value);
  }
  return values;
}

int64_t Args::integer(size_t i) const {
  const Static& v = at(i).value;
  if (auto* b = std::get_if<bool>(&v)) return *b;
  return get<int64_t>(v, i, "an int");
}

std::optional<int64_t> Args::optional_integer(size_t i) const {
  if (is_none(i)) return std::nullopt;
  return integer(i);
}

IntList Args::ints(size_t i) const {
  const Static& v = at(i).value;
  if (auto* n = std::get_if<int64_t>(&v)) return {*n};
  return get<IntList>(v, i, "an int list");
}

double Args::real(size_t i) const {
  const Static& v = at(i).value;
  if (auto* n = std::get_if<int64_t>(&v)) return static_cast<double>(*n);
  return get<double>(v, i, "a float");
}

std::optional<double> Args::optional_real(size_t i) const {
  if (is_none(i)) return std::nullopt;
  return real(i);
}

bool Args::boolean(size_t i) const { return get<bool>(at(i).value, i, "a bool"); }

std::optional<bool> Args::optional_boolean(size_t i) const {
  if (is_none(i)) return std::nullopt;
  return boolean(i);
}

const std::string& Args::str(size_t i) const {
  return get<std::string>(at(i).value, i, "a string");
}

std::optional<ElementType> Args::dtype(size_t i) const {
  if (is_none(i)) return std::nullopt;
  return get<ElementType>(at(i).value, i, "a dtype");
}

BoolList Args::bools(size_t i) const { return get<BoolList>(at(i).value, i, "a bool list"); }

// ------------------------------------------------------------------ Context

const Shape& Context::output(size_t i) const {
  if (i >= outputs_.size()) {
    throw std::invalid_argument(op_name_ + ": no expected type for output " + std::to_string(i));
  }
  return outputs_[i];
}

Value Context::random_bits(const Shape& shape) {
  if (!rng_state_) {
    throw std::logic_error(op_name_ +
                           " draws random numbers but its rule is "
                           "not registered with TPU_LOWERING_RANDOM");
  }
  // The state is (seed, offset); each draw starts at a fresh counter so draws
  // within one program never overlap. The caller advances the generator's
  // offset by random_consumed() after every launch.
  Value zero = b.reshape(b.constant_int(0, ElementType::U64), {1});
  Value offset = b.reshape(b.constant_int(random_consumed_, ElementType::U64), {1});
  Value state = b.add(*rng_state_, b.concatenate({zero, offset}, 0));
  random_consumed_ += (shape.numel() + 3) / 4 * 4;
  return b.rng_bit_generator(state, shape).second;
}

}  // namespace torch_tpu::lower

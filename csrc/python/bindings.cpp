// torch_tpu._C: the Python face of the C++ layers.
#include <pybind11/chrono.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/profiler/combined_traceback.h>
#include <torch/extension.h>

#include "aten/allocator.h"
#include "aten/bounded.h"
#include "aten/captured_graph.h"
#include "aten/cpu_fallback.h"
#include "aten/device.h"
#include "aten/generator.h"
#include "aten/lowered_ops.h"
#include "aten/memory_history.h"
#include "aten/tensor_bridge.h"
#include "distributed/job.h"
#include "distributed/process_group_tpu.h"
#include "engine/backend.h"
#include "engine/deferred.h"
#include "engine/device_group.h"
#include "engine/executor.h"
#include "engine/metrics.h"
#include "lower/stablehlo_call.h"

namespace py = pybind11;
using namespace torch_tpu;

namespace torch {
// Declared in torch/csrc/profiler/python/combined_traceback.h, which includes a
// JSON header the wheels do not ship; libtorch_python exports it (2.11, 2.13).
std::vector<pybind11::object> py_symbolize(std::vector<CapturedTraceback*>& to_symbolize);
}  // namespace torch

namespace {

engine::Backend& backend() { return engine::Backend::get(); }

py::dict metrics() {
  auto& m = engine::metrics();
  py::dict d;
  d["compiles"] = m.compiles.load();
  d["compile_seconds"] = m.compile_nanos.load() / 1e9;
  d["fast_compiles"] = m.fast_compiles.load();
  d["cache_hits"] = m.cache_hits.load();
  d["persistent_cache_hits"] = m.persistent_cache_hits.load();
  d["cache_misses"] = m.cache_misses.load();
  d["executions"] = m.executions.load();
  d["host_to_device_bytes"] = m.host_to_device_bytes.load();
  d["host_to_device_transfers"] = m.host_to_device_transfers.load();
  d["device_to_host_bytes"] = m.device_to_host_bytes.load();
  d["device_to_host_transfers"] = m.device_to_host_transfers.load();
  py::dict fallbacks;
  for (const auto& [op, n] : m.fallbacks()) fallbacks[py::str(op)] = n;
  d["fallbacks"] = fallbacks;
  d["deferred_ops"] = m.deferred_ops.load();
  d["program_collectives"] = m.program_collectives.load();
  d["staged_collectives"] = m.staged_collectives.load();
  py::dict materializations;
  for (const auto& [reason, n] : m.materializations()) materializations[py::str(reason)] = n;
  d["materializations"] = materializations;
  return d;
}

py::dict memory_stats(int device) {
  auto stats = aten::tpu_allocator()->getDeviceStats(device);
  constexpr size_t kAll = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  py::dict d;
  d["allocated_bytes.all.current"] = stats.allocated_bytes[kAll].current;
  d["allocated_bytes.all.peak"] = stats.allocated_bytes[kAll].peak;
  d["allocated_bytes.all.allocated"] = stats.allocated_bytes[kAll].allocated;
  d["allocated_bytes.all.freed"] = stats.allocated_bytes[kAll].freed;
  d["reserved_bytes.all.current"] = stats.reserved_bytes[kAll].current;
  d["reserved_bytes.all.peak"] = stats.reserved_bytes[kAll].peak;
  d["num_device_alloc"] = stats.num_device_alloc;
  d["num_device_free"] = stats.num_device_free;
  return d;
}

py::dict device_properties(int device) {
  aten::check_device_index(device);
  auto& b = backend();
  auto info = b.client().device_info(device);
  auto mem = b.client().memory_stats(device);
  py::dict d;
  d["kind"] = info.kind;
  d["description"] = info.description;
  d["id"] = info.id;
  d["bytes_limit"] = mem.bytes_limit;
  d["bytes_in_use"] = mem.bytes_in_use;
  py::dict attributes;
  for (const auto& [name, value] : info.attributes) attributes[py::str(name)] = value;
  d["attributes"] = attributes;
  return d;
}

// What torch.tpu.memory._snapshot() is made of: (device, address, size,
// frames) of each live storage and (alloc?, device, address, size, time_us,
// frames) of each event; frames are dicts (filename, line, name).
py::tuple memory_history() {
  std::vector<aten::MemoryBlock> live = aten::live_blocks();
  std::vector<aten::MemoryEvent> events = aten::memory_events();
  std::vector<torch::CapturedTraceback*> stacks;
  std::vector<int> stack_of;  // per live block, then per event: index into stacks
  auto note = [&](const aten::MemoryBlock& b) {
    stack_of.push_back(b.stack ? static_cast<int>(stacks.size()) : -1);
    if (b.stack) stacks.push_back(b.stack.get());
  };
  for (const auto& b : live) note(b);
  for (const auto& e : events) note(e.block);
  std::vector<py::object> frames = torch::py_symbolize(stacks);
  size_t next = 0;
  auto frames_of = [&] {
    int i = stack_of[next++];
    return i < 0 ? py::object(py::list()) : frames[i];
  };
  py::list live_out, events_out;
  for (const auto& b : live) {
    live_out.append(py::make_tuple(static_cast<int>(b.device), b.address, b.size, frames_of()));
  }
  for (const auto& e : events) {
    const aten::MemoryBlock& b = e.block;
    events_out.append(py::make_tuple(e.alloc, static_cast<int>(b.device), b.address, b.size,
                                     e.time_us, frames_of()));
  }
  return py::make_tuple(live_out, events_out);
}

py::dict plugin_info() {
  auto& plugin = backend().client().plugin();
  py::dict d;
  d["path"] = plugin.path();
  d["api_version"] = plugin.version_string();
  d["platform_name"] = backend().client().platform_name();
  d["platform_version"] = backend().client().platform_version();
  py::dict attrs;
  for (const auto& [k, v] : plugin.attributes()) attrs[py::str(k)] = v;
  d["attributes"] = attrs;
  return d;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "torch_tpu native extension";
  // A failed data check raised by any binding (a synchronize, a replayed graph
  // in debug mode) is the CPU's exception; ops raise it through the dispatcher.
  py::register_exception_translator([](std::exception_ptr error) {
    try {
      if (error) std::rethrow_exception(error);
    } catch (const engine::DataCheckFailure& failure) {
      PyErr_SetString(failure.index_error() ? PyExc_IndexError : PyExc_RuntimeError,
                      failure.what());
    }
  });
  m.def("_configure", [](const std::string& platform, const std::string& plugin, int cpu_devices,
                         const std::string& problem, const std::vector<std::string>& libraries) {
    engine::Backend::configure({platform, plugin, cpu_devices, problem, libraries});
  });
  m.def("_register_ops", &aten::register_lowered_ops);
  m.def("_add_stablehlo_module",
        [](const std::string& id, const std::string& entry, const std::string& functions) {
          lower::add_external_module(id, {entry, functions});
        });
  m.def("_lowered_ops", &aten::lowered_op_names);
  m.def("_rule_names", &lower::rule_names);
  m.def("_is_started", &engine::Backend::started);
  m.def("_is_in_bad_fork", [] { return runtime::forked_child() && engine::Backend::started(); });
  m.def("_start", [] { backend(); }, py::call_guard<py::gil_scoped_release>());
  m.def("_device_count", [] { return static_cast<int>(aten::device_count()); });
  m.def("_current_device", [] { return static_cast<int>(aten::current_device()); });
  m.def("_set_device", [](int device) { aten::select_device(device); });
  m.def("_platform", [] { return engine::Backend::config().platform; });
  m.def("_device_properties", &device_properties);
  m.def("_plugin_info", &plugin_info);
  m.def(
      "_synchronize", [](int device) { engine::synchronize(device); },
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "_set_eager_mode",
      [](int mode) { engine::set_eager_mode(static_cast<engine::EagerMode>(mode)); },
      py::call_guard<py::gil_scoped_release>());
  m.def("_get_eager_mode", [] { return static_cast<int>(engine::eager_mode()); });
  // The end of a training step (optimizer.step): the natural cut of the graphs
  // of the devices it updates, so every step yields the same graphs.
  m.def(
      "_mark_step",
      [](const std::vector<int>& devices) {
        for (int device : devices) engine::flush(device, engine::FlushReason::Step);
      },
      py::call_guard<py::gil_scoped_release>());
  m.def("_metrics", &metrics);
  m.def("_reset_metrics", [] { engine::metrics().reset(); });
  m.def("_memory_stats", &memory_stats);
  m.def("_record_memory_history", &aten::record_memory_history);
  m.def("_memory_history", &memory_history);
  m.def("_set_memory_fraction", [](int device, double fraction) {
    aten::set_memory_fraction(static_cast<c10::DeviceIndex>(device), fraction);
  });
  m.def("_reset_peak_memory_stats",
        [](int device) { aten::tpu_allocator()->resetPeakStats(device); });
  m.def("_set_precision", [](int p) { engine::set_precision(static_cast<hlo::Precision>(p)); });
  m.def("_get_precision", [] { return static_cast<int>(engine::precision()); });
  m.def("_set_fallback_mode", [](const std::string& mode) {
    aten::set_fallback_mode(mode == "error"    ? aten::FallbackMode::Error
                            : mode == "silent" ? aten::FallbackMode::Silent
                                               : aten::FallbackMode::Warn);
  });
  m.def("_get_fallback_mode", [] {
    auto mode = aten::fallback_mode();
    return std::string(mode == aten::FallbackMode::Error    ? "error"
                       : mode == aten::FallbackMode::Silent ? "silent"
                                                            : "warn");
  });
  // Test hook: makes the storage of `t` a buffer whose every use fails
  // asynchronously with `message`.
  m.def("_set_bounds", &aten::set_bounds);
  m.def("_has_bounds", &aten::has_bounds);
  m.def("_set_automatic_bounds", &aten::set_automatic_bounds);
  m.def("_automatic_bounds", &aten::automatic_bounds);
  m.def("_poison_storage", [](const at::Tensor& t, const std::string& message) {
    auto* slot = aten::slot_of(t);
    engine::materialize(*slot, engine::FlushReason::Storage);
    auto& client = backend().client();
    ElementType type = aten::element_type(t.scalar_type());
    slot->buffer = client.error_buffer(
        message, type, {static_cast<int64_t>(slot->nbytes) / element_size(type)}, slot->device);
  });
  m.def("_default_generator", [](int device) {
    return py::reinterpret_steal<py::object>(
        THPGenerator_initDefaultGenerator(aten::default_generator(device)));
  });

  // torch.compile (torch_tpu/_compile.py): capture one call of a graph, replay it.
  auto capture_error = py::register_exception<engine::CaptureError>(m, "CaptureError");
  py::register_exception<engine::CaptureAlone>(m, "CaptureAlone", capture_error.ptr());
  py::class_<engine::CapturedGraph, std::shared_ptr<engine::CapturedGraph>>(m, "CapturedGraph");
  // Without the interpreter lock: materialising pending work may launch a
  // program with collectives, which waits for the other ranks' threads.
  m.def(
      "_begin_capture",
      [](int device, bool alone, bool uploads_are_constants) {
        aten::begin_capture(device, alone, uploads_are_constants);
      },
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "_end_capture",
      [](int device, const std::vector<at::Tensor>& inputs,
         const std::vector<at::Tensor>& outputs) {
        return aten::end_capture(device, inputs, outputs);
      },
      py::call_guard<py::gil_scoped_release>());
  m.def("_replay", &aten::replay, py::call_guard<py::gil_scoped_release>());

  // torch_tpu/distributed: the tpu_dist c10d backend over a host (Gloo) backend.
  m.def("_tpu_dist_backend", &distributed::create_backend, py::arg("host"), py::arg("store"),
        py::arg("rank"), py::arg("size"), py::arg("timeout"),
        py::call_guard<py::gil_scoped_release>());
  m.def("_join_job", &distributed::join_job, py::arg("store"), py::arg("rank"),
        py::arg("world_size"), py::arg("local_rank"), py::call_guard<py::gil_scoped_release>());
  // The key-value callbacks a multi-process client calls, over a c10d store, as
  // the plugin calls them (tests): (code, value), code 0 or PJRT's error code.
  m.def(
      "_key_value_callbacks",
      [](const c10::intrusive_ptr<c10d::Store>& store, const std::string& prefix,
         const std::string& call, const std::string& key, const std::string& value,
         int timeout_ms) {
        return distributed::call_key_value_callback(store, prefix, call, key, value, timeout_ms);
      },
      py::call_guard<py::gil_scoped_release>());
  // A rank waiting for ranks that are threads of this process lets them run Python.
  engine::set_blocking_wait([](const std::function<void()>& wait) {
    if (Py_IsInitialized() && PyGILState_Check()) {
      py::gil_scoped_release no_gil;
      wait();
    } else {
      wait();
    }
  });
}

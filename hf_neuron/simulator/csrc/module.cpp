// Python bindings of the simulated Neuron device (module hf_neuron_simulator_C).
#include "neuron_sim.h"

#include <torch/extension.h>

namespace hf_neuron_sim {
int register_cpu_path(const std::vector<std::string>& names);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace hf_neuron_sim;
  m.def("configure", &configure, "Set the device count and memory per device");
  m.def("device_count", &device_count);
  m.def("total_memory", &total_memory);
  m.def("current_device", []() { return static_cast<int>(current_device()); });
  m.def("set_device", [](int index) { set_current_device(static_cast<c10::DeviceIndex>(index)); });
  m.def("memory_stats", [](int index) {
    auto& s = stats(static_cast<c10::DeviceIndex>(index));
    pybind11::dict d;
    d["allocated_bytes.all.current"] = s.allocated_bytes.load();
    d["allocated_bytes.all.peak"] = s.peak_allocated_bytes.load();
    d["allocation.all.allocated"] = s.num_allocs.load();
    d["allocation.all.freed"] = s.num_frees.load();
    d["allocation.all.current"] = s.active_blocks.load();
    return d;
  });
  m.def("reset_peak_memory_stats", [](int index) { reset_peak(static_cast<c10::DeviceIndex>(index)); });
  m.def("default_generator", [](int index) { return default_generator(static_cast<c10::DeviceIndex>(index)); });
  m.def("cpu_view", &cpu_view, "A CPU tensor over the same memory as a neuron tensor (zero copy)");
  m.def("set_strict_dtypes", &set_strict_dtypes);
  m.def("strict_dtypes", &strict_dtypes);
  m.def("reset_warnings", &reset_warnings);
  m.def("set_quiet", &set_quiet);
  m.def("register_cpu_path", &register_cpu_path);
  m.def("is_pinned_ptr", [](uintptr_t p) { return is_pinned_ptr(reinterpret_cast<const void*>(p)); });
}

// Simulated Neuron device: shared declarations.
// The device is PrivateUse1 renamed "neuron"; memory is host memory, kernels are CPU kernels
// reached through a boxed fallback that views neuron tensors as CPU tensors (zero copy).
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Allocator.h>
#include <c10/core/Device.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace hf_neuron_sim {

constexpr c10::DeviceType kNeuron = c10::DeviceType::PrivateUse1;

// ---- runtime (runtime.cpp) ----
struct DeviceStats {
  std::atomic<int64_t> allocated_bytes{0};
  std::atomic<int64_t> peak_allocated_bytes{0};
  std::atomic<int64_t> num_allocs{0};
  std::atomic<int64_t> num_frees{0};
  std::atomic<int64_t> active_blocks{0};
};

constexpr int kMaxDevices = 128;

void configure(int device_count, int64_t bytes_per_device);
int device_count();
int64_t total_memory();
c10::DeviceIndex current_device();
void set_current_device(c10::DeviceIndex index);
DeviceStats& stats(c10::DeviceIndex index);
void reset_peak(c10::DeviceIndex index);
c10::Allocator* neuron_allocator();
c10::Allocator* pinned_allocator();
bool is_pinned_ptr(const void* ptr);
void check_device_index(c10::DeviceIndex index);

// Account host memory adopted from a CPU kernel's fresh result (see adopt_storage).
c10::DataPtr adopt_data_ptr(c10::DataPtr cpu_ptr, size_t nbytes, c10::DeviceIndex index);

// ---- generators (runtime.cpp) ----
// Each neuron generator wraps a CPU generator: CPU kernels receive the wrapped one, so seeded
// random numbers on neuron equal those on CPU.
at::Generator cpu_generator_for(const at::Generator& neuron_gen);
const at::Generator& default_generator(c10::DeviceIndex index);

// ---- tensors (ops.cpp) ----
// A CPU tensor over the same memory as `t` (a neuron tensor), keeping t's storage alive.
at::Tensor cpu_view(const at::Tensor& t);
// A neuron tensor owning the memory of a fresh CPU tensor (no copy when it is the sole owner).
at::Tensor adopt(const at::Tensor& cpu, c10::DeviceIndex index);

// ---- dtype policy (ops.cpp) ----
void set_strict_dtypes(bool strict);
bool strict_dtypes();
void reset_warnings();
// Suppress the dtype warnings in this thread (used while printing tensors, which goes through float64).
void set_quiet(bool quiet);

}  // namespace hf_neuron_sim

// Runtime of the simulated Neuron device: allocators, device guard, hooks, generators.
#include "neuron_sim.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/GeneratorForPrivateuseone.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/Resize.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>

#include <array>
#include <map>
#include <memory>
#include <mutex>

namespace hf_neuron_sim {

namespace {

int g_device_count = 4;
int64_t g_total_memory = int64_t(24) << 30;
std::array<DeviceStats, kMaxDevices> g_stats;
thread_local c10::DeviceIndex tl_current_device = 0;

struct BlockContext {
  void* ptr;
  size_t nbytes;
  c10::DeviceIndex device;
};

void record_alloc(c10::DeviceIndex index, int64_t nbytes) {
  auto& s = g_stats[index];
  int64_t now = s.allocated_bytes.fetch_add(nbytes) + nbytes;
  int64_t peak = s.peak_allocated_bytes.load();
  while (now > peak && !s.peak_allocated_bytes.compare_exchange_weak(peak, now)) {
  }
  s.num_allocs++;
  s.active_blocks++;
}

void record_free(c10::DeviceIndex index, int64_t nbytes) {
  auto& s = g_stats[index];
  s.allocated_bytes.fetch_sub(nbytes);
  s.num_frees++;
  s.active_blocks--;
}

void delete_block(void* ctx) {
  auto* block = static_cast<BlockContext*>(ctx);
  record_free(block->device, static_cast<int64_t>(block->nbytes));
  c10::free_cpu(block->ptr);
  delete block;
}

struct AdoptedContext {
  c10::DataPtr inner;
  size_t nbytes;
  c10::DeviceIndex device;
};

void delete_adopted(void* ctx) {
  auto* block = static_cast<AdoptedContext*>(ctx);
  record_free(block->device, static_cast<int64_t>(block->nbytes));
  delete block;  // frees the memory through the CPU allocator's own deleter
}

void check_fits(c10::DeviceIndex index, size_t nbytes) {
  int64_t in_use = g_stats[index].allocated_bytes.load();
  if (in_use + static_cast<int64_t>(nbytes) > g_total_memory) {
    TORCH_CHECK_WITH(
        OutOfMemoryError,
        false,
        "Neuron out of memory (simulated): tried to allocate ",
        nbytes,
        " bytes on neuron:",
        static_cast<int>(index),
        " with ",
        in_use,
        " of ",
        g_total_memory,
        " bytes in use. Reduce the batch size or shard the model (tensor parallel / FSDP).");
  }
}

struct NeuronAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    c10::DeviceIndex index = tl_current_device;
    check_fits(index, nbytes);
    void* data = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    auto* ctx = new BlockContext{data, nbytes, index};
    record_alloc(index, static_cast<int64_t>(nbytes));
    return {data, ctx, &delete_block, c10::Device(kNeuron, index)};
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return nullptr;
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

NeuronAllocator g_allocator;

// Pinned host memory: DDP's reducer and `pin_memory()` ask the accelerator's hooks whether a
// host pointer is pinned, so we keep the ranges we handed out.
std::mutex g_pinned_mutex;
std::map<uintptr_t, size_t> g_pinned_blocks;

void delete_pinned(void* ptr) {
  {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    g_pinned_blocks.erase(reinterpret_cast<uintptr_t>(ptr));
  }
  c10::free_cpu(ptr);
}

struct PinnedAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* data = c10::alloc_cpu(nbytes ? nbytes : 1);
    {
      std::lock_guard<std::mutex> lock(g_pinned_mutex);
      g_pinned_blocks[reinterpret_cast<uintptr_t>(data)] = nbytes;
    }
    return {data, data, &delete_pinned, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return &delete_pinned;
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

PinnedAllocator g_pinned_allocator;

// ---- generators ----
class NeuronGeneratorImpl final : public c10::GeneratorImpl {
 public:
  NeuronGeneratorImpl(c10::DeviceIndex index, uint64_t seed)
      : c10::GeneratorImpl(
            c10::Device(kNeuron, index),
            c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        cpu_(at::detail::createCPUGenerator(seed)) {}

  void set_current_seed(uint64_t seed) override {
    cpu_.set_current_seed(seed);
  }
  void set_offset(uint64_t offset) override {
    cpu_.set_offset(offset);
  }
  uint64_t get_offset() const override {
    return cpu_.get_offset();
  }
  uint64_t current_seed() const override {
    return cpu_.current_seed();
  }
  uint64_t seed() override {
    return cpu_.seed();
  }
  void set_state(const c10::TensorImpl& new_state) override {
    cpu_.unsafeGetGeneratorImpl()->set_state(new_state);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    return cpu_.unsafeGetGeneratorImpl()->get_state();
  }
  static c10::DeviceType device_type() {
    return kNeuron;
  }
  const at::Generator& cpu() const {
    return cpu_;
  }

 private:
  NeuronGeneratorImpl* clone_impl() const override {
    auto* copy = new NeuronGeneratorImpl(device().index(), 0);
    copy->cpu_ = cpu_.clone();
    return copy;
  }
  at::Generator cpu_;
};

std::once_flag g_generator_once[kMaxDevices];
std::array<at::Generator, kMaxDevices> g_default_generators;

at::Generator make_generator(c10::DeviceIndex index) {
  return at::make_generator<NeuronGeneratorImpl>(index, c10::default_rng_seed_val);
}

// ---- device guard ----
struct NeuronGuardImpl final : c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType static_type = kNeuron;

  c10::DeviceType type() const override {
    return kNeuron;
  }
  c10::Device exchangeDevice(c10::Device d) const override {
    auto old = getDevice();
    if (d.index() != old.index()) {
      setDevice(d);
    }
    return old;
  }
  c10::Device getDevice() const override {
    return c10::Device(kNeuron, tl_current_device);
  }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kNeuron, "expected a neuron device, got ", d);
    if (d.index() >= 0) {
      set_current_device(d.index());
    }
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0 && d.index() < g_device_count) {
      tl_current_device = d.index();
    }
  }
  c10::Stream getStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream getNewStream(c10::Device d, int priority = 0) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool isHighPriority = false) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    return s;
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(g_device_count);
  }
  // Host memory is always coherent: events and streams complete immediately.
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    if (*event == nullptr) {
      *event = reinterpret_cast<void*>(1);
    }
  }
  void block(void* event, const c10::Stream& stream) const override {}
  bool queryEvent(void* event) const override {
    return true;
  }
  void destroyEvent(void* event, const c10::DeviceIndex device_index) const noexcept override {}
  bool queryStream(const c10::Stream& stream) const override {
    return true;
  }
  void synchronizeStream(const c10::Stream& stream) const override {}
  void synchronizeEvent(void* event) const override {}
  void synchronizeDevice(const c10::DeviceIndex device_index) const override {}
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
  double elapsedTime(void* event1, void* event2, const c10::DeviceIndex device_index) const override {
    return 0.0;
  }
};

// ---- hooks ----
struct NeuronHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override {
    return true;
  }
  bool isAvailable() const override {
    return g_device_count > 0;
  }
  bool hasPrimaryContext(c10::DeviceIndex) const override {
    return true;
  }
  c10::DeviceIndex deviceCount() const override {
    return static_cast<c10::DeviceIndex>(g_device_count);
  }
  void setCurrentDevice(c10::DeviceIndex device) const override {
    set_current_device(device);
  }
  c10::DeviceIndex getCurrentDevice() const override {
    return tl_current_device;
  }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    auto old = tl_current_device;
    set_current_device(device);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    return exchangeDevice(device);
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    return default_generator(index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    return make_generator(index < 0 ? tl_current_device : index);
  }
  at::Device getDeviceFromPtr(void*) const override {
    return c10::Device(kNeuron, tl_current_device);
  }
  bool isPinnedPtr(const void* data) const override {
    return is_pinned_ptr(data);
  }
  at::Allocator* getPinnedMemoryAllocator() const override {
    return &g_pinned_allocator;
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    at::native::resize_bytes_cpu(storage.unsafeGetStorageImpl(), newsize);
  }
};

NeuronHooks g_hooks;

}  // namespace


void configure(int count, int64_t bytes_per_device) {
  TORCH_CHECK(count >= 0 && count <= kMaxDevices - 1,
              "the simulated Neuron device count must be between 0 and 127 (TorchNeuron's limit), got ",
              count);
  g_device_count = count;
  g_total_memory = bytes_per_device;
  static bool registered = false;
  if (!registered) {
    at::RegisterPrivateUse1HooksInterface(&g_hooks);
    registered = true;
  }
}

int device_count() {
  return g_device_count;
}

int64_t total_memory() {
  return g_total_memory;
}

void check_device_index(c10::DeviceIndex index) {
  TORCH_CHECK(index >= 0 && index < g_device_count, "Invalid device index neuron:", static_cast<int>(index),
              ": this host has ", g_device_count, " neuron device(s) (neuron:0 to neuron:", g_device_count - 1,
              ")");
}

c10::DeviceIndex current_device() {
  return tl_current_device;
}

void set_current_device(c10::DeviceIndex index) {
  check_device_index(index);
  tl_current_device = index;
}

DeviceStats& stats(c10::DeviceIndex index) {
  check_device_index(index);
  return g_stats[index];
}

void reset_peak(c10::DeviceIndex index) {
  auto& s = stats(index);
  s.peak_allocated_bytes.store(s.allocated_bytes.load());
}

c10::Allocator* neuron_allocator() {
  return &g_allocator;
}

c10::Allocator* pinned_allocator() {
  return &g_pinned_allocator;
}

bool is_pinned_ptr(const void* ptr) {
  auto p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(g_pinned_mutex);
  auto it = g_pinned_blocks.upper_bound(p);
  if (it == g_pinned_blocks.begin()) {
    return false;
  }
  --it;
  return p >= it->first && p < it->first + std::max<size_t>(it->second, 1);
}

c10::DataPtr adopt_data_ptr(c10::DataPtr cpu_ptr, size_t nbytes, c10::DeviceIndex index) {
  void* data = cpu_ptr.get();
  auto* ctx = new AdoptedContext{std::move(cpu_ptr), nbytes, index};
  record_alloc(index, static_cast<int64_t>(nbytes));
  return {data, ctx, &delete_adopted, c10::Device(kNeuron, index)};
}

const at::Generator& default_generator(c10::DeviceIndex index) {
  if (index < 0) {
    index = tl_current_device;
  }
  check_device_index(index);
  std::call_once(g_generator_once[index], [index] { g_default_generators[index] = make_generator(index); });
  return g_default_generators[index];
}

at::Generator cpu_generator_for(const at::Generator& neuron_gen) {
  auto* impl = dynamic_cast<NeuronGeneratorImpl*>(neuron_gen.unsafeGetGeneratorImpl());
  TORCH_CHECK(impl != nullptr, "expected a neuron generator, got one for ", neuron_gen.device());
  return impl->cpu();
}

}  // namespace hf_neuron_sim

C10_REGISTER_GUARD_IMPL(PrivateUse1, hf_neuron_sim::NeuronGuardImpl);
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &hf_neuron_sim::g_allocator);

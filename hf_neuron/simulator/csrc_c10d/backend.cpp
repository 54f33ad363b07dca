// Process-group backend "neuron" of the simulated device (module hf_neuron_c10d_C).
//
// A c10d::Backend registered for the neuron device type. Every collective runs on a gloo backend
// over zero-copy CPU views of the neuron tensors (their storage is host memory), so results land
// in neuron memory directly. Works handed back report the neuron tensors as their results.
//
// TorchNeuron's backend has limits that code must respect to run on Trainium; they are checked
// here with errors that say what to do instead: one device per process, barrier only on a group
// spanning the whole world, all_to_all with even splits only, no communicator splitting.
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/extension.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace hf_neuron_c10d {

namespace {

constexpr c10::DeviceType kNeuron = c10::DeviceType::PrivateUse1;
constexpr const char* kName = "neuron";

// The neuron device index this process's collectives run on (-1 until the first collective).
std::atomic<int> g_process_device{-1};

void release_storage(void* ctx) {
  delete static_cast<c10::Storage*>(ctx);
}

void check_one_device_per_process(const at::Tensor& t, const char* op) {
  const int index = t.device().index();
  int expected = -1;
  if (g_process_device.compare_exchange_strong(expected, index) || expected == index) {
    return;
  }
  TORCH_CHECK(false, "neuron process group: ", op, " got a tensor on neuron:", index, " but this process's ",
              "collectives run on neuron:", expected,
              ". TorchNeuron drives one Neuron device per process: keep every tensor a process communicates "
              "on its own device (torch.device('neuron', LOCAL_RANK)) and launch one process per device "
              "with torchrun.");
}

// A CPU tensor over the memory of neuron tensor `t`, keeping t's storage alive.
at::Tensor host_view(const at::Tensor& t, const char* op) {
  TORCH_CHECK(t.defined(), "neuron process group: ", op, " got an undefined tensor.");
  TORCH_CHECK(t.device().type() == kNeuron, "neuron process group: ", op, " got a tensor on ", t.device(),
              ". The neuron backend only communicates neuron tensors (as on Trainium): move it with "
              ".to('neuron') first, or use a gloo process group for CPU tensors.");
  TORCH_CHECK(t.layout() == c10::kStrided, "neuron process group: ", op, " supports dense tensors only, got ",
              t.layout(), ".");
  check_one_device_per_process(t, op);
  const c10::Storage& storage = t.storage();
  auto* keep_alive = new c10::Storage(storage);
  c10::DataPtr data(storage.mutable_data(), keep_alive, &release_storage, c10::Device(c10::DeviceType::CPU));
  c10::Storage cpu_storage(c10::Storage::use_byte_size_t(), storage.nbytes(), std::move(data),
                           /*allocator=*/nullptr, /*resizable=*/false);
  auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(cpu_storage),
                                                   c10::DispatchKeySet(c10::DispatchKey::CPU), t.dtype());
  impl->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  return at::Tensor(std::move(impl));
}

std::vector<at::Tensor> host_views(const std::vector<at::Tensor>& ts, const char* op) {
  std::vector<at::Tensor> out;
  out.reserve(ts.size());
  for (const auto& t : ts) {
    out.push_back(host_view(t, op));
  }
  return out;
}

std::vector<std::vector<at::Tensor>> host_views(const std::vector<std::vector<at::Tensor>>& lists, const char* op) {
  std::vector<std::vector<at::Tensor>> out;
  out.reserve(lists.size());
  for (const auto& ts : lists) {
    out.push_back(host_views(ts, op));
  }
  return out;
}

std::vector<at::Tensor> flatten(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<at::Tensor> out;
  for (const auto& ts : lists) {
    out.insert(out.end(), ts.begin(), ts.end());
  }
  return out;
}

using PostOp = std::function<void()>;

// gloo reduces with SUM/PRODUCT/MIN/MAX/bitwise ops only. AVG becomes SUM then a division of the
// outputs; PREMUL_SUM a multiplication of the inputs then SUM (FSDP2 reduce-scatters with both).
struct Reduction {
  c10d::ReduceOp gloo_op;
  std::optional<double> divide_by;
  std::optional<at::Tensor> premul_factor;  // a CPU scalar tensor
};

Reduction plan_reduction(const c10d::ReduceOp& op, int group_size) {
  Reduction r{op, std::nullopt, std::nullopt};
  if (op.op_ == c10d::ReduceOp::AVG) {
    r.gloo_op = c10d::ReduceOp(c10d::ReduceOp::SUM);
    r.divide_by = static_cast<double>(group_size);
  } else if (op.op_ == c10d::ReduceOp::PREMUL_SUM) {
    auto* supplement = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
    TORCH_CHECK(supplement != nullptr, "neuron process group: PREMUL_SUM without its factor.");
    at::Tensor factor = supplement->tensor_factor.defined()
                            ? supplement->tensor_factor.to(c10::DeviceType::CPU)
                            : at::scalar_tensor(supplement->double_factor, at::TensorOptions().dtype(at::kDouble));
    r.premul_factor = factor;
    r.gloo_op = c10d::ReduceOp(c10d::ReduceOp::SUM);
  }
  return r;
}

// In place (allreduce, whose input is its output) or as a scaled copy (inputs that must not change).
at::Tensor premultiply(const at::Tensor& view, const Reduction& r, bool in_place) {
  at::Tensor factor = r.premul_factor->to(view.scalar_type());
  if (in_place) {
    return view.mul_(factor);
  }
  return view.mul(factor);
}

// Scales every input by the PREMUL_SUM factor, if the reduction has one.
void premultiply_all(std::vector<at::Tensor>& views, const Reduction& r, bool in_place) {
  if (!r.premul_factor) {
    return;
  }
  for (auto& v : views) {
    v = premultiply(v, r, in_place);
  }
}

// The caller's options with the reduction gloo actually runs (AVG and PREMUL_SUM become SUM).
template <typename Options>
Options with_gloo_op(const Options& opts, const Reduction& r) {
  auto gloo_opts = opts;
  gloo_opts.reduceOp = r.gloo_op;
  return gloo_opts;
}

PostOp divide_outputs(std::vector<at::Tensor> views, const Reduction& r) {
  if (!r.divide_by.has_value()) {
    return nullptr;
  }
  const double d = *r.divide_by;
  return [views = std::move(views), d]() {
    for (const auto& v : views) {
      if (at::isIntegralType(v.scalar_type(), /*includeBool=*/true)) {
        v.div_(d, "trunc");
      } else {
        v.div_(d);
      }
    }
  };
}

// Runs a post step (AVG's division) exactly once, whichever of gloo's completion callback, wait()
// or isCompleted() gets there first.
struct PostStep {
  explicit PostStep(PostOp op) : op(std::move(op)) {}
  void run() {
    std::call_once(once, op);
  }
  PostOp op;
  std::once_flag once;
};

c10::intrusive_ptr<c10::ivalue::Future> completed_future(const std::vector<at::Tensor>& outputs) {
  auto future = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors());
  future->markCompleted(c10::IValue(outputs));
  return future;
}

// A Work over gloo's Work whose results are the neuron tensors, optionally finishing with a post
// step. Where gloo's Work has a future, the post step runs as soon as gloo completes (on gloo's
// thread), so futures chained on ours see final values; otherwise at wait() / isCompleted().
class NeuronWork : public c10d::Work {
 public:
  NeuronWork(c10::intrusive_ptr<c10d::Work> inner, std::vector<at::Tensor> outputs, int rank, c10d::OpType op,
             PostOp post)
      : c10d::Work(rank, op), inner_(std::move(inner)), outputs_(std::move(outputs)) {
    if (post) {
      post_ = std::make_shared<PostStep>(std::move(post));
      if (auto inner_future = inner_future_or_null()) {
        auto step = post_;
        auto outs = outputs_;
        chain_ = inner_future->then(
            [step, outs](c10::ivalue::Future&) {
              step->run();
              return c10::IValue(outs);
            },
            c10::ListType::ofTensors());
      }
    }
  }

  bool isCompleted() override {
    if (!inner_->isCompleted()) {
      return false;
    }
    if (chain_) {
      return chain_->completed();
    }
    if (post_ && inner_->isSuccess()) {
      post_->run();
    }
    return true;
  }

  bool isSuccess() const override {
    return inner_->isSuccess() && (!chain_ || !chain_->completed() || !chain_->hasError());
  }

  std::exception_ptr exception() const override {
    auto e = inner_->exception();
    if (!e && chain_ && chain_->completed() && chain_->hasError()) {
      e = chain_->exception_ptr();
    }
    return e;
  }

  int sourceRank() const override {
    return inner_->sourceRank();
  }

  std::vector<at::Tensor> result() override {
    return outputs_;
  }

  void synchronize() override {
    inner_->synchronize();
  }

  bool wait(std::chrono::milliseconds timeout) override {
    const bool ok = inner_->wait(timeout);
    if (chain_) {
      chain_->waitAndThrow();
    } else if (post_) {
      post_->run();
    }
    return ok;
  }

  void abort() override {
    inner_->abort();
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    std::lock_guard<std::mutex> lock(future_mutex_);
    if (chain_) {
      return chain_;
    }
    if (!future_) {
      auto inner_future = post_ ? nullptr : inner_future_or_null();
      if (inner_future) {
        auto outs = outputs_;
        future_ = inner_future->then([outs](c10::ivalue::Future&) { return c10::IValue(outs); },
                                     c10::ListType::ofTensors());
      } else {
        // gloo gives no future for this op: complete it now.
        wait(::kNoTimeout);
        future_ = completed_future(outputs_);
      }
    }
    return future_;
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFutureResult() override {
    return inner_->getFutureResult();
  }

  float getDuration() const override {
    return inner_->getDuration();
  }

  uint64_t getSequencenumber() const override {
    return inner_->getSequencenumber();
  }

 private:
  c10::intrusive_ptr<c10::ivalue::Future> inner_future_or_null() {
    try {
      return inner_->getFuture();
    } catch (const c10::Error&) {
      return nullptr;
    }
  }

  c10::intrusive_ptr<c10d::Work> inner_;
  std::vector<at::Tensor> outputs_;
  std::shared_ptr<PostStep> post_;
  c10::intrusive_ptr<c10::ivalue::Future> chain_;
  std::mutex future_mutex_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

std::string join(const std::vector<int64_t>& v) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < v.size(); ++i) {
    s << (i ? ", " : "") << v[i];
  }
  s << "]";
  return s.str();
}

void check_even_splits(const std::vector<int64_t>& splits, const char* which) {
  for (int64_t s : splits) {
    TORCH_CHECK_NOT_IMPLEMENTED(
        s == splits.front(), "neuron process group: all_to_all supports even splits only (TorchNeuron limit), got ",
        which, "_split_sizes=", join(splits),
        ". Pad every chunk to the same size and pass no split sizes (or equal ones).");
  }
}

}  // namespace

class NeuronBackend : public c10d::Backend {
 public:
  NeuronBackend(c10::intrusive_ptr<c10d::Backend> gloo, int world_size)
      : c10d::Backend(gloo->getRank(), gloo->getSize()), gloo_(std::move(gloo)), world_size_(world_size) {}

  const std::string getBackendName() const override {
    return kName;
  }

  bool supportsSplitting() const override {
    return false;
  }

  c10::intrusive_ptr<Options> getBackendOptions() override {
    auto gloo_options = gloo_->getBackendOptions();
    auto options = c10::make_intrusive<Options>(kName, gloo_options->timeout);
    options->group_name = gloo_options->group_name;
    options->global_ranks_in_group = gloo_options->global_ranks_in_group;
    return options;
  }

  void setTimeout(std::chrono::milliseconds timeout) override {
    gloo_->setTimeout(timeout);
  }

  void setGroupUid(const std::string& pg_uid) override {
    c10d::Backend::setGroupUid(pg_uid);
    gloo_->setGroupUid(pg_uid);
  }

  void setSequenceNumberForGroup() override {
    gloo_->setSequenceNumberForGroup();
  }

  uint64_t getSequenceNumberForGroup() override {
    return gloo_->getSequenceNumberForGroup();
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    auto views = host_views(tensors, "broadcast");
    return wrap(gloo_->broadcast(views, opts), tensors, c10d::OpType::BROADCAST);
  }

  // all_reduce, all_reduce_coalesced and reduce: the inputs are the outputs, reduced on host views.
  // `holds_result` is false on the ranks whose tensors the collective does not write (reduce).
  template <typename Options, typename RunGloo>
  c10::intrusive_ptr<c10d::Work> reduce_in_place(std::vector<at::Tensor>& tensors, const Options& opts,
                                                 const char* op_name, c10d::OpType op_type, bool holds_result,
                                                 RunGloo run_gloo) {
    auto views = host_views(tensors, op_name);
    auto r = plan_reduction(opts.reduceOp, getSize());
    premultiply_all(views, r, /*in_place=*/true);
    auto work = run_gloo(views, with_gloo_op(opts, r));
    PostOp post = holds_result ? divide_outputs(views, r) : nullptr;
    return wrap(work, tensors, op_type, std::move(post));
  }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    return reduce_in_place(tensors, opts, "all_reduce", c10d::OpType::ALLREDUCE, true,
                           [this](auto& views, const auto& o) { return gloo_->allreduce(views, o); });
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override {
    return reduce_in_place(tensors, opts, "all_reduce_coalesced", c10d::OpType::ALLREDUCE_COALESCED, true,
                           [this](auto& views, const auto& o) { return gloo_->allreduce_coalesced(views, o); });
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override {
    return reduce_in_place(tensors, opts, "reduce", c10d::OpType::REDUCE, getRank() == opts.rootRank,
                           [this](auto& views, const auto& o) { return gloo_->reduce(views, o); });
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override {
    auto out_views = host_views(outputs, "all_gather");
    auto in_views = host_views(inputs, "all_gather");
    return wrap(gloo_->allgather(out_views, in_views, opts), flatten(outputs), c10d::OpType::ALLGATHER);
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override {
    auto out_view = host_view(output, "all_gather_into_tensor");
    auto in_view = host_view(input, "all_gather_into_tensor");
    return wrap(gloo_->_allgather_base(out_view, in_view, opts), {output}, c10d::OpType::_ALLGATHER_BASE);
  }

  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override {
    auto out_views = host_views(outputs, "all_gather_coalesced");
    auto in_views = host_views(inputs, "all_gather_coalesced");
    return wrap(gloo_->allgather_coalesced(out_views, in_views, opts), flatten(outputs),
                c10d::OpType::ALLGATHER_COALESCED);
  }

  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override {
    auto out_views = host_views(outputs, "all_gather_into_tensor_coalesced");
    auto in_views = host_views(inputs, "all_gather_into_tensor_coalesced");
    return wrap(gloo_->allgather_into_tensor_coalesced(out_views, in_views, opts), outputs,
                c10d::OpType::COALESCED);
  }

  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) override {
    auto out_views = host_views(outputs, "gather");
    auto in_views = host_views(inputs, "gather");
    return wrap(gloo_->gather(out_views, in_views, opts), flatten(outputs), c10d::OpType::GATHER);
  }

  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    auto out_views = host_views(outputs, "scatter");
    auto in_views = host_views(inputs, "scatter");
    return wrap(gloo_->scatter(out_views, in_views, opts), outputs, c10d::OpType::SCATTER);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    auto out_views = host_views(outputs, "reduce_scatter");
    auto in_views = host_views(inputs, "reduce_scatter");
    auto r = plan_reduction(opts.reduceOp, getSize());
    for (auto& list : in_views) {
      premultiply_all(list, r, /*in_place=*/false);
    }
    auto work = gloo_->reduce_scatter(out_views, in_views, with_gloo_op(opts, r));
    return wrap(work, outputs, c10d::OpType::REDUCE_SCATTER, divide_outputs(out_views, r));
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override {
    auto out_view = host_view(output, "reduce_scatter_tensor");
    auto in_view = host_view(input, "reduce_scatter_tensor");
    auto r = plan_reduction(opts.reduceOp, getSize());
    if (r.premul_factor) {
      in_view = premultiply(in_view, r, /*in_place=*/false);
    }
    auto work = gloo_->_reduce_scatter_base(out_view, in_view, with_gloo_op(opts, r));
    return wrap(work, {output}, c10d::OpType::_REDUCE_SCATTER_BASE, divide_outputs({out_view}, r));
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override {
    auto out_views = host_views(outputs, "reduce_scatter_tensor_coalesced");
    auto in_views = host_views(inputs, "reduce_scatter_tensor_coalesced");
    auto r = plan_reduction(opts.reduceOp, getSize());
    premultiply_all(in_views, r, /*in_place=*/false);
    auto work = gloo_->reduce_scatter_tensor_coalesced(out_views, in_views, with_gloo_op(opts, r));
    return wrap(work, outputs, c10d::OpType::COALESCED, divide_outputs(out_views, r));
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override {
    check_even_splits(output_split_sizes, "output");
    check_even_splits(input_split_sizes, "input");
    auto out_view = host_view(output, "all_to_all_single");
    auto in_view = host_view(input, "all_to_all_single");
    return wrap(gloo_->alltoall_base(out_view, in_view, output_split_sizes, input_split_sizes, opts), {output},
                c10d::OpType::ALLTOALL_BASE);
  }

  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override {
    auto same_shape = [](const std::vector<at::Tensor>& ts) {
      for (const auto& t : ts) {
        if (!t.sizes().equals(ts.front().sizes())) {
          return false;
        }
      }
      return true;
    };
    TORCH_CHECK_NOT_IMPLEMENTED(
        same_shape(inputs) && same_shape(outputs),
        "neuron process group: all_to_all supports even splits only (TorchNeuron limit): every input and every "
        "output tensor must have the same shape. Pad the chunks to one size.");
    auto out_views = host_views(outputs, "all_to_all");
    auto in_views = host_views(inputs, "all_to_all");
    return wrap(gloo_->alltoall(out_views, in_views, opts), outputs, c10d::OpType::ALLTOALL);
  }

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank, int tag) override {
    auto views = host_views(tensors, "send");
    return wrap(gloo_->send(views, dst_rank, tag), tensors, c10d::OpType::SEND);
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank, int tag) override {
    auto views = host_views(tensors, "recv");
    return wrap(gloo_->recv(views, src_rank, tag), tensors, c10d::OpType::RECV);
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    TORCH_CHECK_NOT_IMPLEMENTED(
        getSize() == world_size_, "neuron process group: barrier works only on the default process group "
        "(TorchNeuron limit); this group has ", getSize(), " of the ", world_size_,
        " ranks. Call dist.barrier() without a group, or all_reduce a small tensor on this group instead.");
    return wrap(gloo_->barrier(opts), {}, c10d::OpType::BARRIER);
  }

  void shutdown() override {
    gloo_->shutdown();
  }

  void abort() override {
    gloo_->abort();
  }

 private:
  c10::intrusive_ptr<c10d::Work> wrap(c10::intrusive_ptr<c10d::Work> work, std::vector<at::Tensor> outputs,
                                      c10d::OpType op, PostOp post = nullptr) {
    return c10::make_intrusive<NeuronWork>(std::move(work), std::move(outputs), getRank(), op, std::move(post));
  }

  c10::intrusive_ptr<c10d::Backend> gloo_;
  int world_size_;
};

}  // namespace hf_neuron_c10d

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  namespace py = pybind11;
  using hf_neuron_c10d::NeuronBackend;
  // The base class is bound by torch; importing it first makes it known to pybind here.
  py::module_::import("torch._C._distributed_c10d");
  py::class_<NeuronBackend, c10d::Backend, c10::intrusive_ptr<NeuronBackend>>(m, "NeuronBackend")
      .def(py::init<c10::intrusive_ptr<c10d::Backend>, int>(), py::arg("gloo"), py::arg("world_size"));
  m.def("process_device", []() { return hf_neuron_c10d::g_process_device.load(); },
        "The neuron device index this process's collectives run on (-1 before the first collective).");
}

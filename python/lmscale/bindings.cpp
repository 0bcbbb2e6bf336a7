// lmscale._C: the pybind11 half of the Python package. Hands a torch.distributed process group to
// the C++ DDP of src/distributed/ddp.h and exposes ZeRO's shard math (src/distributed/sharded_optimizer.h). The attention ops
// need no binding: liblmscale registers torch.ops.lmscale.* itself (see lmscale/__init__.py).
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/jit/python/pybind_utils.h>  // PythonFutureWrapper: torch.futures.Future's C++ side
#include <torch/extension.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "distributed/ddp.h"
#include "distributed/sharded_optimizer.h"
#include "distributed/then_work.h"

namespace py = pybind11;
namespace distributed = lmscale::distributed;

namespace {

// A Python ProcessGroup (torch.distributed's default group, or one from new_group) as the C++
// Group the dist/ code expects: the backend that serves `device` (Gloo for CPU, NCCL for CUDA, or
// the matching half of a "cpu:gloo,cuda:nccl" group), with the group's own rank and size.
distributed::Group group_from_python(c10d::ProcessGroup& pg, const c10::Device& device) {
  distributed::Group g;
  try {
    g.backend = pg.getBackend(device.type());
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, "lmscale: the process group has no backend for ", device.type(),
                " tensors (", e.what_without_backtrace(), "). Initialise torch.distributed with backend='gloo' "
                "for a CPU model, 'nccl' for a CUDA model, or 'cpu:gloo,cuda:nccl' for both.");
  }
  TORCH_CHECK(g.backend, "lmscale: the process group returned no backend for ", device.type(), " tensors.");
  g.kind = g.backend->getBackendName() == "nccl" ? distributed::BackendKind::Nccl : distributed::BackendKind::Gloo;
  g.rank = pg.getRank();
  g.world_size = pg.getSize();
  g.device = device;
  return g;
}

// The device the module lives on, which picks the group's backend. The C++ DDP checks that every
// tensor is on it (one device per process).
c10::Device module_device(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& buffers) {
  if (!params.empty()) return params.front().device();
  if (!buffers.empty()) return buffers.front().device();
  return c10::Device(c10::kCPU);
}

// The tensor a comm hook's future holds: a Tensor, or a list of one (what Work.get_future() gives).
// A future made in Python (fut.then, Future.set_result) holds a Python object, read under the GIL.
at::Tensor hook_result(const c10::IValue& value, size_t index) {
  if (value.isTensor()) return value.toTensor();
  if (value.isTensorList() && value.toTensorList().size() == 1) return value.toTensorList().get(0);
  if (value.isList() && value.toListRef().size() == 1 && value.toListRef()[0].isTensor())
    return value.toListRef()[0].toTensor();
  if (value.isPyObject()) {
    py::gil_scoped_acquire gil;
    py::object obj = torch::jit::toPyObject(value);
    if (THPVariable_Check(obj.ptr())) return THPVariable_Unpack(obj.ptr());
    if ((py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj)) && py::len(obj) == 1 &&
        THPVariable_Check(py::sequence(obj)[0].ptr()))
      return THPVariable_Unpack(py::sequence(obj)[0].ptr());
    TORCH_CHECK(false, "lmscale DDP: the comm hook's future for bucket ", index, " holds ",
                py::str(py::type::of(obj)).cast<std::string>(), "; it must hold the bucket's new gradients as one "
                "tensor (the contract of torch DDP's register_comm_hook: e.g. return fut.then(lambda f: f.value()[0])).");
  }
  TORCH_CHECK(false, "lmscale DDP: the comm hook's future for bucket ", index, " holds a ", value.tagKind(),
              "; it must hold the bucket's new gradients as one tensor.");
}

// Note [Python comm hook]
// register_comm_hook's C++ side. The reducer calls the hook per ready bucket on the autograd thread,
// which holds no GIL (backward() released it), so the call takes the GIL, runs `dispatch` (ddp.py's
// _run_comm_hook: a GradBucket over the flat buffer, the user's hook, the Future check) and lets go.
// The future is waited at finish, with the GIL released: its Python callbacks (fut.then) take the GIL
// on the thread that completes the collective. The continuation then writes the future's tensor into
// the bucket (cast to its dtype: a compress hook's result may be bf16), the gradients being views of it.
// The Python callable is dropped under the GIL, wherever the last copy of the C++ hook goes.
distributed::CommHook python_comm_hook(py::function dispatch) {
  std::shared_ptr<py::function> fn(new py::function(std::move(dispatch)), [](py::function* f) {
    py::gil_scoped_acquire gil;
    delete f;
  });
  return [fn](distributed::GradBucket& bucket) -> c10::intrusive_ptr<c10d::Work> {
    c10::intrusive_ptr<c10::ivalue::Future> fut;
    {
      py::gil_scoped_acquire gil;
      try {
        py::object result = (*fn)(bucket.index, bucket.count, bucket.buffer, bucket.params, bucket.offsets,
                                  bucket.lengths);
        fut = result.cast<std::shared_ptr<torch::jit::PythonFutureWrapper>>()->fut;
      } catch (py::error_already_set& e) {
        TORCH_CHECK(false, e.what());  // the hook's own exception, message and type name kept
      } catch (const py::cast_error&) {
        TORCH_CHECK(false, "lmscale DDP: the comm hook dispatch returned no torch.futures.Future for bucket ",
                    bucket.index);
      }
    }
    const at::Tensor buffer = bucket.buffer;
    const size_t index = bucket.index;
    auto write_back = [fut, buffer, index] {
      const at::Tensor result = hook_result(fut->value(), index);
      TORCH_CHECK(result.numel() == buffer.numel(), "lmscale DDP: the comm hook's result for bucket ", index, " has ",
                  result.numel(), " elements, the bucket ", buffer.numel(), "; the future must hold a tensor shaped "
                  "like bucket.buffer().");
      if (!(result.data_ptr() == buffer.data_ptr() && result.scalar_type() == buffer.scalar_type()))
        buffer.copy_(result.reshape({-1}));
    };
    return c10::make_intrusive<distributed::ThenWork>(c10d::Work::create_from_future(fut), write_back);
  };
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "lmscale's C++ distributed core (DDP reducer, ZeRO shard math); use lmscale.* instead";

  // The reducer behind lmscale.DistributedDataParallel. Collectives block (construction broadcasts,
  // finish waits), so the GIL is released while C++ runs: other Python threads, and autograd
  // threads calling back into Python, keep going.
  py::class_<distributed::DistributedDataParallel>(m, "Reducer")
      .def(py::init([](std::vector<at::Tensor> params, std::vector<at::Tensor> buffers,
                       c10d::ProcessGroup& process_group, std::optional<double> bucket_size_mb) {
             distributed::DdpOptions options;
             // None: one all-reduce per parameter, launched by its hook as its gradient lands
             // (docs/spec.md §4.2's default); a number: buckets of at most that many MB.
             options.strategy = bucket_size_mb ? distributed::DdpStrategy::Bucketed : distributed::DdpStrategy::Overlap;
             if (bucket_size_mb) options.bucket_mb = *bucket_size_mb;  // a negative one fails in the C++ DDP
             const c10::Device device = module_device(params, buffers);
             return std::make_unique<distributed::DistributedDataParallel>(
                 std::move(params), std::move(buffers), group_from_python(process_group, device), options);
           }),
           py::arg("params"), py::arg("buffers"), py::arg("process_group"), py::arg("bucket_size_mb") = py::none(),
           py::call_guard<py::gil_scoped_release>())
      .def("finish_gradient_synchronization", &distributed::DistributedDataParallel::finish_gradient_synchronization,
           py::call_guard<py::gil_scoped_release>())
      .def(
          "register_comm_hook",
          [](distributed::DistributedDataParallel& d, py::function dispatch) {
            d.register_comm_hook(python_comm_hook(std::move(dispatch)));
          },
          py::arg("dispatch"),
          "dispatch(index, count, buffer, params, offsets, lengths) -> torch.futures.Future, per ready bucket")
      .def("shadow_gradient_synchronization", &distributed::DistributedDataParallel::shadow_gradient_synchronization,
           py::call_guard<py::gil_scoped_release>())
      .def_property("divisor", &distributed::DistributedDataParallel::divisor,
                    &distributed::DistributedDataParallel::set_divisor)
      .def_property_readonly("steps", &distributed::DistributedDataParallel::steps)
      .def_property_readonly("bucket_assignment", &distributed::DistributedDataParallel::bucket_assignment,
                             "parameter indices (after removing repeats) per bucket, in launch order")
      .def_property_readonly(
          "last_launched_during_backward",
          [](const distributed::DistributedDataParallel& d) { return d.last_step().launched_during_backward; });

  // ZeRO-1's ownership rule, shared with the C++ ShardedOptimizer so both shard the same way.
  m.def(
      "owner_by_size",
      [](const std::vector<int64_t>& bytes, std::vector<int64_t> load) {
        auto owners = distributed::owner_by_size(bytes, load);
        return std::make_pair(owners, load);
      },
      py::arg("bytes"), py::arg("load"),
      "Owner rank per tensor (largest first, to the least-loaded rank); returns (owners, updated load).");
}

// lmscale._C: the pybind11 half of the Python package. Hands a torch.distributed process group to
// the C++ DDP of src/distributed/ddp.h and exposes ZeRO's shard math (src/distributed/sharded_optimizer.h). The attention ops
// need no binding: liblmscale registers torch.ops.lmscale.* itself (see lmscale/__init__.py).
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/extension.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "distributed/ddp.h"
#include "distributed/sharded_optimizer.h"

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

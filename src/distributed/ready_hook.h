// The "marking" piece shared by DDP and ZeRO-2: a post-hook on a parameter's AccumulateGrad node.
// It runs after the gradient was accumulated into .grad, once per backward even for a tensor used
// several times (the engine sums its inputs first), which is what makes tied weights reduce once,
// after all their contributions.
#pragma once
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <functional>
#include <memory>
#include <utility>
#include <vector>

namespace lmscale::distributed {

class MarkReadyHook : public torch::autograd::FunctionPostHook {
 public:
  explicit MarkReadyHook(std::function<void()> fn) : fn_(std::move(fn)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    fn_();
    return outputs;
  }

 private:
  std::function<void()> fn_;
};

// Registers `fn` to run when `param`'s gradient is final in each backward. The node is returned
// with the hook's key: the parameter holds its AccumulateGrad node only weakly, so the caller keeps
// the shared_ptr (keeping node and hook alive across iterations, as PyTorch's Reducer does) and
// removes the hook with node->del_post_hook(key) when done.
inline std::pair<std::shared_ptr<torch::autograd::Node>, uintptr_t> add_ready_hook(const at::Tensor& param,
                                                                                   std::function<void()> fn) {
  auto acc = torch::autograd::impl::grad_accumulator(param);
  TORCH_INTERNAL_ASSERT(acc, "a parameter requires grad but has no grad accumulator");
  uintptr_t key = acc->add_post_hook(std::make_unique<MarkReadyHook>(std::move(fn)));
  return {std::move(acc), key};
}

// The readiness hooks of one DDP or ZeRO-2 object: fn(i) runs when parameter i's gradient is final,
// for every parameter that requires grad. remove() takes them all off (the owner's destructor calls
// it before anything the hooks use goes away; this destructor does it too).
class ReadyHooks {
 public:
  ReadyHooks() = default;
  ReadyHooks(const ReadyHooks&) = delete;
  ReadyHooks& operator=(const ReadyHooks&) = delete;
  ~ReadyHooks() { remove(); }

  void add(const std::vector<at::Tensor>& params, const std::function<void(size_t)>& fn) {
    for (size_t i = 0; i < params.size(); ++i)
      if (params[i].requires_grad()) hooks_.push_back(add_ready_hook(params[i], [fn, i] { fn(i); }));
  }
  void remove() {
    for (auto& [node, key] : hooks_) node->del_post_hook(key);
    hooks_.clear();
  }

 private:
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, uintptr_t>> hooks_;
};

}  // namespace lmscale::distributed

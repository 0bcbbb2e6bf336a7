// A Work handle that runs a host-side continuation after the collective it wraps completes (the
// bf16 hook casts the reduced copy back into the fp32 bucket; ZeRO-2 frees the bucket it sent).
// The continuation runs once, on the thread that waits. For NCCL, wait() has made the current
// stream wait on the communication stream, so work queued by the continuation is ordered after it.
#pragma once
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <functional>
#include <utility>

namespace lmscale::distributed {

class ThenWork : public c10d::Work {
 public:
  ThenWork(c10::intrusive_ptr<c10d::Work> inner, std::function<void()> then)
      : c10d::Work(-1, c10d::OpType::UNKNOWN), inner_(std::move(inner)), then_(std::move(then)) {}
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override {
    const bool ok = inner_->wait(timeout);
    if (then_) {
      auto then = std::move(then_);
      then_ = nullptr;
      then();
    }
    return ok;
  }
  bool isCompleted() override { return inner_->isCompleted(); }
  bool isSuccess() const override { return inner_->isSuccess(); }
  std::exception_ptr exception() const override { return inner_->exception(); }

 private:
  c10::intrusive_ptr<c10d::Work> inner_;
  std::function<void()> then_;
};

}  // namespace lmscale::distributed

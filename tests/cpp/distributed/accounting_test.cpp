// The accounting calculator against hand-derived numbers for the XXL model of docs/spec.md §2.10.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "distributed/accounting.h"

TEST(DistAccounting, XxlModelNumbers) {
  lmscale::distributed::AccountingInputs in;
  auto r = lmscale::distributed::account(in);
  EXPECT_DOUBLE_EQ(r.params, 2.0 * 16384 * 53248 * 126);
  EXPECT_DOUBLE_EQ(r.training_state, 16 * r.params);
  EXPECT_DOUBLE_EQ(r.activations_per_token_bf16, 126.0 * (16384 + 53248) * 2);
  // b = [F/(Y·W·M_X)] / [F/C − Y/(W·M_Y)] with F=53248, Y=4, W=1.8e11, M_X=2, C=4.6e14, M_Y=1.
  const double b = (53248 / (4 * 1.8e11 * 2)) / (53248 / 4.6e14 - 4 / 1.8e11);
  EXPECT_NEAR(r.compute_bound_batch_per_device, b, 1e-9 * b);
  EXPECT_NEAR(r.compute_bound_batch_total, 64 * b, 1e-9 * b);
}

TEST(DistAccounting, FsdpDeviceCountIsTheSmallestThatFits) {
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 20; ++trial) {
    lmscale::distributed::AccountingInputs in;
    in.d_model = 1024 + rng() % 8192;
    in.d_ff = 4 * in.d_model;
    in.blocks = 1 + rng() % 100;
    in.tokens = rng() % 4096;
    auto r = lmscale::distributed::account(in);
    ASSERT_TRUE(std::isfinite(r.fsdp_devices_to_fit));
    auto at = [&](double n) {
      in.fsdp_devices = n;
      return lmscale::distributed::account(in).fsdp_per_device;
    };
    EXPECT_LE(at(r.fsdp_devices_to_fit), in.device_memory * (1 + 1e-12));
    if (r.fsdp_devices_to_fit > 1) { EXPECT_GT(at(r.fsdp_devices_to_fit - 1), in.device_memory); }
  }
}

// `lmscale account`: the parallelism accounting calculator (distributed/accounting.h), every input a
// flag. Options and one call: the table and files are distributed/accounting_report.
#include "cli/registry.h"
#include "cli/step_args.h"
#include "distributed/accounting_report.h"

namespace {

// Counts are whole numbers: typed INT in the help and rejected when fractional, stored as double.
void add_count(CLI::App& app, const std::string& name, double& field, const std::string& help) {
  app.add_option_function<int64_t>(name, [&field](const int64_t& v) { field = static_cast<double>(v); }, help)
      ->check(lmscale::cli::at_least(1))
      ->default_str(std::to_string(static_cast<int64_t>(field)));
}

}  // namespace

LMSCALE_SUBCOMMAND("", "account", "parallelism accounting: FP32 state vs BF16 activations, FSDP fit, FSDPxTP compute bound", [](CLI::App& app) {
  struct Args {
    lmscale::distributed::AccountingInputs in;
    std::string out = "results";
  };
  auto a = std::make_shared<Args>();
  auto& in = a->in;
  add_count(app, "--d-model", in.d_model, "model width D");
  add_count(app, "--d-ff", in.d_ff, "feed-forward width F");
  add_count(app, "--blocks", in.blocks, "blocks (each: two linears, D→F and F→D)");
  add_count(app, "--tokens", in.tokens, "tokens whose activations are saved for backward");
  add_count(app, "--fsdp-devices", in.fsdp_devices, "N for the per-device FSDP memory");
  app.add_option("--device-memory", in.device_memory, "bytes per device (95e9 for TPU v5p)")->capture_default_str();
  add_count(app, "--fsdp-x", in.fsdp_x, "FSDP axis X of the FSDP x TP mesh");
  add_count(app, "--tp-y", in.tp_y, "TP axis Y of the FSDP x TP mesh");
  app.add_option("--ici-bandwidth", in.ici_bandwidth, "W_ici, bytes/s")->capture_default_str();
  app.add_option("--flops", in.flops, "C, FLOP/s per device")->capture_default_str();
  add_count(app, "--mx", in.m_x, "M_X, links along the FSDP axis");
  add_count(app, "--my", in.m_y, "M_Y, links along the TP axis");
  app.add_option("--out", a->out, "results folder (account.jsonl, account.md)")->capture_default_str();
  app.footer("Example:\n  lmscale account --d-model 16384 --d-ff 53248 --blocks 126 --tokens 16384 --fsdp-devices 8");
  app.callback([a] { lmscale::distributed::write_accounting_report(a->in, a->out); });
});

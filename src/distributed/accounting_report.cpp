// The accounting report; see accounting_report.h.
#include "distributed/accounting_report.h"

#include <iostream>

#include "results/table.h"
#include "results/writer.h"

namespace lmscale::distributed {

std::string write_accounting_report(const AccountingInputs& in, const std::string& out) {
  lmscale::check_output_folder(out);
  using lmscale::fmt;
  using lmscale::fmt_bytes;
  const auto r = lmscale::distributed::account(in);
  lmscale::MarkdownTable t({"quantity", "value", "how"});
  t.add_row({"parameters", fmt(r.params / 1e9, 2) + " B", "2·D·F·blocks"});
  t.add_row({"FP32 weights", fmt_bytes(r.weights_fp32), "4 B/param"});
  t.add_row({"FP32 gradients", fmt_bytes(r.grads_fp32), "4 B/param"});
  t.add_row({"FP32 AdamW state", fmt_bytes(r.adam_fp32), "8 B/param (two moments)"});
  t.add_row({"training state total", fmt_bytes(r.training_state) + " (" + fmt(r.training_state / 1e9, 1) + " GB)",
             "16 B/param"});
  t.add_row({"BF16 activations / token", fmt_bytes(r.activations_per_token_bf16), "blocks·(D+F)·2 B"});
  t.add_row({"BF16 activations (" + fmt(in.tokens, 0) + " tokens)", fmt_bytes(r.activations_bf16), ""});
  t.add_row({"FSDP per device (N=" + fmt(in.fsdp_devices, 0) + ")", fmt(r.fsdp_per_device / 1e9, 1) + " GB",
             "(state + acts/2)/N + acts/2"});
  t.add_row({"FSDP devices to fit " + fmt(in.device_memory / 1e9, 0) + " GB", fmt(r.fsdp_devices_to_fit, 0),
             "ceil((state + acts/2)/(M − acts/2))"});
  t.add_row({"compute-bound batch / device (X=" + fmt(in.fsdp_x, 0) + ", Y=" + fmt(in.tp_y, 0) + ")",
             fmt(r.compute_bound_batch_per_device, 1) + " tokens", "F/(Y·W·M_X) / (F/C − Y/(W·M_Y))"});
  t.add_row({"compute-bound batch total", fmt(r.compute_bound_batch_total, 0) + " tokens", "× X·Y devices"});
  std::vector<lmscale::Json> recs;
  namespace field = lmscale::field;
  const lmscale::Json config{{field::d_model, in.d_model}, {field::d_ff, in.d_ff},   {field::blocks, in.blocks},
                             {"tokens", in.tokens},        {"fsdp_devices", in.fsdp_devices},
                             {"fsdp_x", in.fsdp_x},        {"tp_y", in.tp_y}};
  auto add = [&](const char* metric, double v, const char* unit) {
    recs.push_back(lmscale::Record("account", "lmscale-account").update(config).metric(metric, v, unit));
  };
  add("params", r.params, "");
  add("training_state_fp32", r.training_state, "bytes");
  add("activations_per_token_bf16", r.activations_per_token_bf16, "bytes");
  add("activations_bf16", r.activations_bf16, "bytes");
  add("fsdp_per_device", r.fsdp_per_device, "bytes");
  add("fsdp_devices_to_fit", r.fsdp_devices_to_fit, "");
  add("compute_bound_batch_per_device", r.compute_bound_batch_per_device, "tokens");
  add("compute_bound_batch_total", r.compute_bound_batch_total, "tokens");
  lmscale::append_jsonl(out + "/account.jsonl", recs);
  const std::string md = "# lmscale account\n\n`" + lmscale::run_info().command + "`\n\n" + t.render();
  lmscale::write_text(out + "/account.md", md);
  std::cout << t.render() << "\nwrote " << out << "/account.{jsonl,md}\n";
  return t.render();
}

}  // namespace lmscale::distributed

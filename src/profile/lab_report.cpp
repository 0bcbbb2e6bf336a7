// The mixed-precision lab's reports; see lab_report.h.
#include "profile/lab_report.h"

#include <torch/cuda.h>

#include <iostream>

#include "core/device.h"
#include "profile/lab_precision.h"
#include "results/table.h"
#include "results/writer.h"

namespace lmscale {
namespace {

// Prints the table and writes it (with a title) to <out>/<file>; appends the records to lab.jsonl.
void emit(const std::string& out, const std::string& file, const std::string& title, const MarkdownTable& table,
          const std::vector<Json>& records) {
  std::string md = "## " + title + "\n\n" + table.render() + "\n_command: `" + run_info().command +
                   "`, commit " + run_info().commit + ", " + run_info().date + ", " + run_info().gpu + "_\n";
  std::cout << table.render();
  append_jsonl(out + "/lab.jsonl", records);
  std::cout << "wrote " << write_text(out + "/" + file, md) << " and " << out << "/lab.jsonl\n";
}

}  // namespace

void run_accumulation_report(int64_t steps, double increment, const std::string& out) {
  check_output_folder(out);  // before the first measurement, not after it
  MarkdownTable table({"variant", "accumulator", "increment stored as", "added as", "sum", "expected (handout)"});
  std::vector<Json> records;
  for (const auto& r : run_accumulation(steps, increment)) {
    table.add_row({r.variant, r.accumulator, r.increment, r.added_as, fmt(r.value, 4),
                   r.expected ? fmt(r.expected, 4) : "-"});
    Record rec("lab", "aten");
    rec.update(Json{{field::experiment, "accumulation"}, {"variant", r.variant}, {"accumulator", r.accumulator},
                    {"increment_dtype", r.increment},    {"added_as", r.added_as}, {field::steps, steps},
                    {"increment", increment}});
    if (r.expected) rec.set("expected", r.expected);
    records.push_back(rec.metric("sum", r.value, ""));
  }
  emit(out, "lab_accumulation.md",
       "Sum of " + fmt(increment, 4) + " added " + std::to_string(steps) + " times", table, records);
}

void run_autocast_report(const std::string& device_spec, const std::string& out) {
  check_output_folder(out);  // before the first measurement, not after it
  std::vector<c10::Device> devices;
  if (device_spec == "all") {
    devices.emplace_back("cpu");
    if (torch::cuda::is_available()) devices.emplace_back("cuda:0");
  } else {
    devices.push_back(resolve_device(device_spec));
  }
  for (const auto& d : devices)
    if (d.is_cuda()) set_run_gpu(device_name(d));
  MarkdownTable table({"device", "autocast", "parameters", "fc1 out", "ReLU out", "LayerNorm out", "logits", "loss",
                       "gradients"});
  std::vector<Json> records;
  for (const auto& d : devices) {
    for (auto dt : {c10::kHalf, c10::kBFloat16}) {
      auto r = run_autocast_toy(d, dt);
      if (!r.error.empty()) {
        table.add_row({r.device, r.autocast, "error: " + r.error, "", "", "", "", "", ""});
        records.push_back(Record("lab", "aten-autocast")
                              .update(Json{{field::experiment, "autocast"}, {field::device, r.device},
                                           {field::precision, r.autocast}})
                              .set_status(Status::error, r.error)
                              .failure());
        continue;
      }
      table.add_row({r.device, r.autocast, r.params, r.fc1_out, r.relu_out, r.layernorm_out, r.logits, r.loss,
                     r.grads});
      const std::pair<const char*, const std::string*> fields[] = {
          {"parameters", &r.params}, {"fc1_out", &r.fc1_out}, {"relu_out", &r.relu_out},
          {"layernorm_out", &r.layernorm_out}, {"logits", &r.logits}, {"loss", &r.loss}, {"gradients", &r.grads}};
      for (const auto& [tensor, value] : fields) {
        records.push_back(Record("lab", "aten-autocast")
                              .update(Json{{field::experiment, "autocast"}, {field::device, r.device},
                                           {field::precision, r.autocast}, {field::tensor, tensor}})
                              .metric("tensor_dtype", *value, ""));
      }
    }
  }
  emit(out, "lab_autocast.md",
       "Toy model fc1 → ReLU → LayerNorm → fc2 under autocast (fp32 parameters)", table, records);
}


}  // namespace lmscale

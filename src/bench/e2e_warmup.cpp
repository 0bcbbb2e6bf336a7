// The warm-up study; see e2e_warmup.h.
#include "bench/e2e_warmup.h"

#include <iostream>
#include <sstream>

#include "core/device.h"
#include "core/sweep_progress.h"
#include "results/table.h"
#include "results/writer.h"

namespace lmscale {

std::string run_warmup_study(const E2EConfig& c0, const std::string& out_dir) {
  check_output_folder(out_dir);  // before the first measurement, not after it
  MarkdownTable table({"warm-up steps", "mean ms", "std ms", "first timed step ms", "max ms", "min ms"});
  std::vector<Json> records;
  const std::vector<int> warmups = {0, 1, 2, 5};
  SweepProgress progress(warmups.size());
  for (int w : warmups) {
    E2EConfig c = c0;
    c.warmup = w;
    progress.begin("warm-up " + std::to_string(w));
    E2EResult r = run_e2e(c);
    progress.end(r.status, r.status == Status::ok ? fmt(r.total.mean, 2) + " ms" : to_string(r.status));
    print_capture_note(r);
    for (auto& j : e2e_records(c, r, "lmscale")) {
      j["bench"] = "e2e_warmup";
      records.push_back(j);
    }
    if (r.status != Status::ok) {
      table.add_row({std::to_string(w), to_string(r.status), "-", "-", "-", "-"});
      continue;
    }
    table.add_row({std::to_string(w), fmt(r.total.mean), fmt(r.total.std), fmt(r.step_ms.at(w)), fmt(r.total.max),
                   fmt(r.total.min)});
  }
  append_jsonl(out_dir + "/e2e_warmup.jsonl", records);
  std::ostringstream md;
  md << "# Warm-up study\n\n- command: `" << run_info().command << "`\n- date: " << run_info().date
     << "\n- commit: " << run_info().commit << "\n- device: " << run_info().gpu << "\n- " << c0.setup.model.name
     << ", context " << c0.setup.context << ", " << dtype_name(c0.setup.precision) << ", " << mode_name(c0.mode)
     << ", " << c0.steps << " timed steps; runs in this order in one process, so warm-up 0 also pays the "
     << "process's one-time costs (CUDA context, cuBLAS handles, allocator growth)\n\n"
     << table.render();
  write_text(out_dir + "/e2e_warmup.md", md.str());
  return table.render();
}

}  // namespace lmscale

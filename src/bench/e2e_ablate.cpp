// Ablation of the fast-path pieces; see e2e_ablate.h.
#include "bench/e2e_ablate.h"

#include <iostream>
#include <sstream>

#include "core/device.h"
#include "core/sweep_progress.h"
#include "results/table.h"
#include "results/writer.h"

namespace lmscale {

std::vector<AblationRow> ablation_rows(const E2EConfig& base) {
  std::vector<AblationRow> rows;
  E2EConfig c = base;
  const bool fp8 = base.setup.precision == c10::kFloat8_e4m3fn;
  const Fp8Layers chosen = base.setup.fp8;
  if (fp8) c.setup.precision = c10::kBFloat16;  // the fast-path rows in bf16, then FP8 layer by layer
  c.setup.fp8.qkv = c.setup.fp8.out_proj = c.setup.fp8.ffn = c.setup.fp8.lm_head = false;
  c.setup.fp8.cached_weights = false;
  c.cuda_graph = false;
  c.setup.fused = false;
  c.setup.optimizer_in_backward = false;
  c.setup.optimizer_overlap = false;
  c.setup.overlap_sm_carveout = 0;
  c.setup.parts = {false, false, false, false, false, false, false};
  rows.push_back({"all off (eager, unfused)", c});
  c.cuda_graph = true;
  rows.push_back({"+ CUDA graph", c});
  c.setup.fused = true;
  c.setup.parts.adamw_kernel = true;
  rows.push_back({"+ AdamW kernel", c});
  c.setup.parts.bf16_weight_copies = true;
  rows.push_back({"+ bf16 weight copies", c});
  c.setup.parts.qkv_gemm = true;
  rows.push_back({"+ one QKV GEMM", c});
  c.setup.parts.rope_kernel = true;
  rows.push_back({"+ QKV split + RoPE kernel", c});
  c.setup.parts.norm_kernel = true;
  rows.push_back({"+ residual add + RMSNorm kernel", c});
  c.setup.parts.swiglu_kernel = true;
  rows.push_back({"+ SwiGLU gate kernel", c});
  c.setup.parts.cross_entropy_kernel = true;
  rows.push_back({"+ cross-entropy kernel (bf16 all on)", c});
  if (fp8) {
    // FP8 group by group, largest GEMMs first (the defaults: docs/training_step_notes.md, FP8).
    c.setup.precision = c10::kFloat8_e4m3fn;
    c.setup.fp8.ffn = chosen.ffn;
    rows.push_back({"+ fp8 FFN (W1, W3, W2)", c});
    c.setup.fp8.qkv = chosen.qkv;
    rows.push_back({"+ fp8 QKV projection", c});
    c.setup.fp8.out_proj = chosen.out_proj;
    rows.push_back({"+ fp8 output projection", c});
    c.setup.fp8.cached_weights = chosen.cached_weights;
    rows.push_back({"+ fp8 weights cast once, after the update", c});
  }
  const E2EConfig all_on = c;  // the options below each change this config in one way
  c.setup.optimizer_overlap = true;
  rows.push_back({"+ optimizer overlapped with backward", c});
  for (int sms : {8, 16, 32}) {
    c.setup.overlap_sm_carveout = sms;
    rows.push_back({"  with " + std::to_string(sms) + " SMs left out of the GEMMs", c});
  }
  if (fp8) {
    c = all_on;
    c.setup.fp8.lm_head = true;
    rows.push_back({"option: fp8 LM head too", c});
    if (base.setup.model.d_model < chosen.min_dim) {  // layers the default keeps in bf16 for their size
      c = all_on;
      c.setup.fp8.min_dim = 0;
      rows.push_back({"option: fp8 also below min dim " + std::to_string(chosen.min_dim), c});
    }
  }
  c = all_on;
  c.setup.optimizer_in_backward = true;
  rows.push_back({"option: optimizer in backward, same stream", c});
  return rows;
}

std::string run_ablation(const std::vector<E2EConfig>& bases, const std::string& out_dir) {
  check_output_folder(out_dir);  // before the first measurement, not after it
  MarkdownTable table({"size", "context", "precision", "change", "step ms", "vs row above", "MFU", "peak memory",
                       "note"});
  std::vector<Json> records;
  for (const auto& base : bases) {
    double previous = 0;
    for (const auto& row : ablation_rows(base)) {
      const auto& s = row.config.setup;
      OpenLine line(std::cerr, /*active=*/true,
                    s.model.name + " context " + std::to_string(s.context) + ": " + row.change);
      E2EResult r = run_e2e(row.config);
      line.close(r.status == Status::ok ? fmt(r.total.mean, 2) + " ms" : to_string(r.status));
      print_capture_note(r);
      for (auto& j : e2e_records(row.config, r, "lmscale")) {
        j["bench"] = "e2e_ablate";
        j["change"] = row.change;
        j["fused"] = s.fused;
        j["optimizer_in_backward"] = s.optimizer_in_backward;
        j["optimizer_overlap"] = s.overlaps_optimizer();
        j["overlap_sm_carveout"] = s.overlap_sm_carveout;
        j["fp8_layers"] = Json{{"qkv", s.fp8.qkv},
                               {"out_proj", s.fp8.out_proj},
                               {"ffn", s.fp8.ffn},
                               {"lm_head", s.fp8.lm_head},
                               {"min_dim", s.fp8.min_dim},
                               {"cached_weights", s.fp8.cached_weights},
                               {"scaling", fp8_scaling_name(s.fp8.scaling)}};
        j["fused_parts"] = Json{{"adamw_kernel", s.parts.adamw_kernel},
                                {"bf16_weight_copies", s.parts.bf16_weight_copies},
                                {"qkv_gemm", s.parts.qkv_gemm},
                                {"rope_kernel", s.parts.rope_kernel},
                                {"norm_kernel", s.parts.norm_kernel},
                                {"swiglu_kernel", s.parts.swiglu_kernel},
                                {"cross_entropy_kernel", s.parts.cross_entropy_kernel}};
        records.push_back(j);
      }
      const bool ok = r.status == Status::ok;
      table.add_row({s.model.name, std::to_string(s.context), dtype_name(s.precision), row.change,
                     ok ? fmt(r.total.mean) : to_string(r.status),
                     ok && previous > 0 ? fmt(previous / r.total.mean) + "×" : "-",
                     ok && r.mfu > 0 ? fmt(100 * r.mfu, 1) + " %" : "-", ok ? fmt_bytes(r.peak_bytes) : "-",
                     r.cuda_graph_note.empty() ? "" : r.cuda_graph_note});
      if (ok) previous = r.total.mean;
    }
  }
  append_jsonl(out_dir + "/e2e_ablate.jsonl", records);
  std::ostringstream md;
  md << "# Ablation of the fast training step\n\n- command: `" << run_info().command << "`\n- date: "
     << run_info().date << "\n- commit: " << run_info().commit << "\n- device: " << run_info().gpu
     << "\n- rows run in this order in one process; each adds one piece to the row above; "
     << "\"vs row above\" is the speed-up (>1 faster)\n\n"
     << table.render();
  write_text(out_dir + "/e2e_ablate.md", md.str());
  return table.render();
}

}  // namespace lmscale

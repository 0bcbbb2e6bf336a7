// Named tables of a results folder, defined in its tables.json: each is a selection of the records
// of one .jsonl file (one run's leaderboard, one CPU world size), rebuilt by `lmscale report` like
// every other table. The file only says which records; the numbers always come from the records.
//
//   {"tables": [{"file": "lb_attention.md", "title": "FlashAttention leaderboard", "records": "attention",
//                "where": {"command": "lmscale bench attention --leaderboard --out lb"}, "note": "…"}]}
//
// `where` maps a field (today's names, docs/results/SCHEMA.md) to a value or a list of values; a
// record is selected when every field matches one of them.
#pragma once
#include <string>
#include <vector>

#include "results/record.h"

namespace lmscale {

struct TableView {
  std::string file;     // the table's file name in the folder, ending .md
  std::string title;    // its heading
  std::string records;  // the stem of the .jsonl it selects from ("attention": attention.jsonl)
  Json where = Json::object();
  std::string note;     // optional: one paragraph under the heading (what the selection is for)
};

// The views of a tables.json; throws naming the file, the entry and the fix when one is malformed.
std::vector<TableView> read_table_views(const std::string& path);
// The tables.json text of these views (what read_table_views reads back).
std::string table_views_json(const std::vector<TableView>& views);
bool view_selects(const TableView& view, const Json& record);
// "command = `lmscale …`, world = 4", for the table and the index.
std::string describe_selection(const TableView& view);

}  // namespace lmscale

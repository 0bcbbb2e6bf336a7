// Named tables of a results folder; see views.h.
#include "results/views.h"

#include <c10/util/Exception.h>

#include <fstream>
#include <sstream>

namespace lmscale {
namespace {

std::string required_string(const Json& entry, const char* key, const std::string& where) {
  TORCH_CHECK(entry.contains(key) && entry[key].is_string() && !entry[key].get<std::string>().empty(), where,
              ": \"", key, "\" is missing or not a string; every entry needs \"file\", \"title\", \"records\" and \"where\"");
  return entry[key].get<std::string>();
}

}  // namespace

std::vector<TableView> read_table_views(const std::string& path) {
  std::ifstream f(path);
  TORCH_CHECK(f, "cannot read ", path);
  std::stringstream text;
  text << f.rdbuf();
  const Json doc = Json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  TORCH_CHECK(!doc.is_discarded(), path, " is not valid JSON; fix it or remove it (it only names tables)");
  TORCH_CHECK(doc.is_object() && doc.contains("tables") && doc["tables"].is_array(), path,
              ": expected {\"tables\": [ … ]}, one entry per named table");
  std::vector<TableView> views;
  for (size_t i = 0; i < doc["tables"].size(); ++i) {
    const Json& e = doc["tables"][i];
    const std::string where = path + ": tables[" + std::to_string(i) + "]";
    TORCH_CHECK(e.is_object(), where, " is not an object");
    TableView v;
    v.file = required_string(e, "file", where);
    v.title = required_string(e, "title", where);
    v.records = required_string(e, "records", where);
    v.note = e.value("note", "");
    TORCH_CHECK(v.file.size() > 3 && v.file.compare(v.file.size() - 3, 3, ".md") == 0 &&
                    v.file.find('/') == std::string::npos && v.file != "index.md",
                where, ": file \"", v.file, "\" must be a file name ending .md in the folder itself (not index.md)");
    TORCH_CHECK(v.records.find('/') == std::string::npos && v.records.find('.') == std::string::npos, where,
                ": records \"", v.records, "\" is the stem of a .jsonl in the folder (\"attention\" for attention.jsonl)");
    TORCH_CHECK(e.contains("where") && e["where"].is_object() && !e["where"].empty(), where,
                ": \"where\" must be an object of field → value (or list of values); without one, ", v.records,
                ".md already holds every record");
    for (auto it = e["where"].begin(); it != e["where"].end(); ++it) {
      const Json& want = it.value();
      const bool scalars = want.is_primitive() || (want.is_array() && !want.empty() && [&] {
                             for (const auto& w : want)
                               if (!w.is_primitive()) return false;
                             return true;
                           }());
      TORCH_CHECK(scalars, where, ": where.", it.key(), " must be a value or a non-empty list of values");
    }
    v.where = e["where"];
    for (const auto& seen : views) TORCH_CHECK(seen.file != v.file, where, ": file \"", v.file, "\" is named twice");
    views.push_back(std::move(v));
  }
  return views;
}

std::string table_views_json(const std::vector<TableView>& views) {
  Json tables = Json::array();
  for (const auto& v : views) {
    Json e{{"file", v.file}, {"title", v.title}, {"records", v.records}, {"where", v.where}};
    if (!v.note.empty()) e["note"] = v.note;
    tables.push_back(std::move(e));
  }
  return Json{{"tables", tables}}.dump(2) + "\n";
}

bool view_selects(const TableView& view, const Json& record) {
  if (!record.is_object()) return false;
  for (auto it = view.where.begin(); it != view.where.end(); ++it) {
    if (!record.contains(it.key())) return false;
    const Json& have = record[it.key()];
    const Json& want = it.value();
    bool any = false;
    if (want.is_array()) {
      for (const auto& w : want) any |= (w == have);
    } else {
      any = want == have;
    }
    if (!any) return false;
  }
  return true;
}

std::string describe_selection(const TableView& view) {
  std::string s;
  for (auto it = view.where.begin(); it != view.where.end(); ++it) {
    std::string values;
    const Json& want = it.value();
    for (const Json& w : want.is_array() ? want : Json::array({want}))
      values += (values.empty() ? "" : " or ") + std::string("`") + (w.is_string() ? w.get<std::string>() : w.dump()) + "`";
    s += (s.empty() ? "" : ", ") + it.key() + " = " + values;
  }
  return s;
}

}  // namespace lmscale

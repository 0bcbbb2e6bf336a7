// The accounting report behind `lmscale account`: the quantities of distributed/accounting.h as a
// markdown table with how each is computed, one record per quantity; writes <out>/account.{jsonl,md}.
#pragma once
#include <string>

#include "distributed/accounting.h"

namespace lmscale::distributed {

// Prints the table and writes the files; returns the table.
std::string write_accounting_report(const AccountingInputs& in, const std::string& out);

}  // namespace lmscale::distributed

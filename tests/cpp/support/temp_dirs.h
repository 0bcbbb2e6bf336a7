// Test support: temporary folders that clean up after themselves. A folder made by temp_dir() is
// removed when the test that made it passes, and kept, with its path printed, when it fails (so
// the files that explain the failure are still there). Folders made outside a test (suite set-up)
// are removed at the end of the run if every test passed.
#pragma once
#include <string>

namespace lmscale::testing {

// A fresh empty folder /tmp/lmscale-test-<tag>-XXXXXX, registered for clean-up.
std::string temp_dir(const std::string& tag);

// Removes a folder tree (nftw; std::filesystem::remove_all resolves to libtorch's copy in the test
// binary, which crashes). Returns false when something could not be removed.
bool remove_tree(const std::string& path);

// The whole content of a file ("" when it cannot be read).
std::string read_text(const std::string& path);

}  // namespace lmscale::testing

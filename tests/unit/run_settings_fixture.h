#pragma once
// The fixture of the settings-resolver tests (fluxrt/run.h: resolve_run; frontend/ presets and
// output files; runtime/model_resolution.h): a fresh temporary folder per test, named after the
// test and the process, removed afterwards; the settings of a small run of a model; and the
// one-line error resolve_run gives for a set of settings.
//
// Header-only on purpose: fluxrt_test_support links fluxrt_core alone, and only tests that link
// fluxrt_frontend include this.
//
//   class MyRuns : public fluxrt::test::RunSettingsTest {
//    protected:
//     MyRuns() : RunSettingsTest("fluxrt_myruns_") {}
//   };
//   TEST_F(MyRuns, Bad) { auto s = small_settings(model); s.fields.push_back({"steps", "0"});
//   EXPECT_NE(error_of(s), ""); }
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

#include "fluxrt/error.h"
#include "fluxrt/run.h"

namespace fluxrt::test {

class RunSettingsTest : public ::testing::Test {
 protected:
  // `prefix` keeps the folders of different test binaries apart.
  explicit RunSettingsTest(std::string prefix) : prefix_(std::move(prefix)) {}

  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    tmp_ =
        std::filesystem::temp_directory_path() / (prefix_ + info->name() + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(tmp_);
    std::filesystem::create_directories(tmp_);
  }
  void TearDown() override {
    std::error_code ec;
    // A test may have made the folder read-only to provoke an error.
    namespace fs = std::filesystem;
    fs::permissions(tmp_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(tmp_, ec);
  }

  // One prompt, 64x64, 2 steps, seed 7, written under tmp_/out.
  RunSettings small_settings(const std::filesystem::path& model) const {
    RunSettings s;
    s.model = model.string();
    s.fields = {{"size", "64x64"}, {"steps", "2"}, {"seed", "7"}};
    s.out_dir = (tmp_ / "out").string();
    s.prompt = "a red circle";
    return s;
  }

  // The message of the error resolve_run throws, "" when it accepts the settings.
  static std::string error_of(const RunSettings& s) {
    try {
      resolve_run(s);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  std::filesystem::path tmp_;

 private:
  std::string prefix_;
};

}  // namespace fluxrt::test

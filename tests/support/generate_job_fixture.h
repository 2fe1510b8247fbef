#pragma once
// The fixture of the `fluxrt generate` glue tests (runtime/generate_job.h): a fresh temporary
// folder per test, named after the test and the process, removed afterwards; the flags of a small
// run of a model; and the one-line error resolve_generate_job gives for a set of inputs.
//
// Header-only on purpose: fluxrt_test_support links fluxrt_core alone, and only tests that link
// fluxrt_runtime include this.
//
//   class MyJobs : public fluxrt::test::GenerateJobTest {
//    protected:
//     MyJobs() : GenerateJobTest("fluxrt_myjobs_") {}
//   };
//   TEST_F(MyJobs, Bad) { auto in = small_inputs(model); in.flags.steps = 0; EXPECT_NE(error_of(in), ""); }
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

#include "core/error.h"
#include "runtime/generate_job.h"

namespace fluxrt::test {

class GenerateJobTest : public ::testing::Test {
 protected:
  // `prefix` keeps the folders of different test binaries apart.
  explicit GenerateJobTest(std::string prefix) : prefix_(std::move(prefix)) {}

  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    tmp_ = std::filesystem::temp_directory_path() /
           (prefix_ + info->name() + "_" + std::to_string(::getpid()));
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
  runtime::GenerateInputs small_inputs(const std::filesystem::path& model) const {
    runtime::GenerateInputs in;
    in.flags.model = model.string();
    in.flags.width = 64;
    in.flags.height = 64;
    in.flags.steps = 2;
    in.flags.seed = 7;
    in.flags.out_dir = (tmp_ / "out").string();
    in.prompt = "a red circle";
    return in;
  }

  // The message of the error resolve_generate_job throws, "" when it accepts the inputs.
  static std::string error_of(const runtime::GenerateInputs& in) {
    try {
      runtime::resolve_generate_job(in);
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

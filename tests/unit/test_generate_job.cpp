// `fluxrt generate` glue (runtime/generate_job.h): output names that never overwrite, prompts
// files, output-folder checks, model-folder checks, and the up-front validation of a job (flags
// over a preset, one-line errors before anything is loaded or written), and the text chunks of
// the PNGs it writes.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "io/image.h"
#include "pipelines/flux2_klein_pipeline.h"
#include "runtime/generate_job.h"
#include "support/generate_job_fixture.h"

namespace fs = std::filesystem;
namespace rt = fluxrt::runtime;
using fluxrt::Error;
using fluxrt::ErrorCode;

namespace {

const fs::path kTinyModel = fs::path(FLUXRT_TEST_DATA_DIR) / "models" / "flux2-klein-tiny";

class GenerateJob : public fluxrt::test::GenerateJobTest {
 protected:
  GenerateJob() : GenerateJobTest("fluxrt_job_") {}
  rt::GenerateInputs tiny_inputs() const { return small_inputs(kTinyModel); }
};

}  // namespace

TEST_F(GenerateJob, OutputNames) {
  rt::OutputNameFields f;
  f.seed = 42;
  f.index = 3;
  f.prompt_index = 1;
  f.image_index = 1;
  f.width = 64;
  f.height = 32;
  f.steps = 4;
  EXPECT_EQ(rt::format_output_name("fluxrt-{seed}-{index}.png", f), "fluxrt-42-3.png");
  EXPECT_EQ(rt::format_output_name("p{prompt_index}_i{image_index}_{width}x{height}_{steps}", f), "p1_i1_64x32_4.png");
  for (const char* bad : {"{nope}", "a/{seed}", "{seed", "seed}", ".hidden", ""})
    EXPECT_THROW(rt::format_output_name(bad, f), Error) << bad;
}

TEST_F(GenerateJob, ReserveNeverOverwrites) {
  const fs::path a = rt::reserve_output_path(tmp_, "img.png");
  EXPECT_EQ(a, tmp_ / "img.png");
  const fs::path b = rt::reserve_output_path(tmp_, "img.png");
  EXPECT_EQ(b, tmp_ / "img-1.png");
  const fs::path c = rt::reserve_output_path(tmp_, "img.png");
  EXPECT_EQ(c, tmp_ / "img-2.png");
  EXPECT_TRUE(fs::exists(a) && fs::exists(b) && fs::exists(c));
}

TEST_F(GenerateJob, PromptsFile) {
  std::ofstream(tmp_ / "p.txt") << "first prompt\r\n\n   \nsecond\n";
  EXPECT_EQ(rt::read_prompts_file(tmp_ / "p.txt"), (std::vector<std::string>{"first prompt", "second"}));
  std::ofstream(tmp_ / "empty.txt") << "\n\n";
  EXPECT_THROW(rt::read_prompts_file(tmp_ / "empty.txt"), Error);
  std::ofstream(tmp_ / "bad.txt") << "ok\n\xff\xfe\n";
  try {
    rt::read_prompts_file(tmp_ / "bad.txt");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.txt:2 is not valid UTF-8"), std::string::npos) << e.what();
  }
  EXPECT_THROW(rt::read_prompts_file(tmp_ / "missing.txt"), Error);
}

TEST_F(GenerateJob, OutputFolderChecks) {
  EXPECT_NO_THROW(rt::check_output_dir_writable(tmp_));
  EXPECT_NO_THROW(rt::check_output_dir_writable(tmp_ / "new" / "deeper"));  // created later
  EXPECT_FALSE(fs::exists(tmp_ / "new"));
  std::ofstream(tmp_ / "file") << "x";
  EXPECT_THROW(rt::check_output_dir_writable(tmp_ / "file"), Error);
  EXPECT_THROW(rt::check_output_dir_writable(tmp_ / "file" / "sub"), Error);
  if (::geteuid() != 0) {  // root writes anywhere
    fs::create_directories(tmp_ / "ro");
    fs::permissions(tmp_ / "ro", fs::perms::owner_read | fs::perms::owner_exec);
    EXPECT_THROW(rt::check_output_dir_writable(tmp_ / "ro"), Error);
  }
}

TEST_F(GenerateJob, ModelFolderChecks) {
  EXPECT_NO_THROW(rt::check_pipeline_folder(fluxrt::io::resolve_model(kTinyModel.string())));
  // A lone transformer file is not enough to generate.
  const fs::path single = fs::path(FLUXRT_TEST_DATA_DIR) / "models" / "flux2-klein-tiny-bfl.safetensors";
  try {
    rt::check_pipeline_folder(fluxrt::io::resolve_model(single.string()));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
  }
  // A copy without its tokenizer.
  fs::copy(kTinyModel, tmp_ / "m", fs::copy_options::recursive);
  fs::remove_all(tmp_ / "m" / "tokenizer");
  try {
    rt::check_pipeline_folder(fluxrt::io::resolve_model((tmp_ / "m").string()));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer"), std::string::npos) << e.what();
  }
}

TEST_F(GenerateJob, ResolvesFlagsOverPreset) {
  std::ofstream(tmp_ / "p.yaml") << "steps: 9\nguidance: 2.5\nbatch: 2\nnegative_prompt: dull\nfilename: \"x-{index}\"\n";
  rt::GenerateInputs in = tiny_inputs();
  in.preset = (tmp_ / "p.yaml").string();
  const rt::GenerateJob job = rt::resolve_generate_job(in);
  EXPECT_EQ(job.steps, 2);           // flag
  EXPECT_EQ(job.guidance, 2.5f);     // preset
  EXPECT_EQ(job.images_per_prompt, 2);
  EXPECT_EQ(job.total_images(), 2);
  EXPECT_EQ(job.negative_prompt, "dull");
  EXPECT_EQ(job.filename_pattern, "x-{index}");
  EXPECT_EQ(job.seed, 7u);
  EXPECT_FALSE(job.seed_was_random);
  EXPECT_EQ(job.prompts, std::vector<std::string>{"a red circle"});
  EXPECT_EQ(job.width, 64);
  EXPECT_FALSE(fs::exists(tmp_ / "out"));  // nothing written while resolving

  const fluxrt::pipelines::GenerateRequest r = rt::make_generate_request(job);
  EXPECT_EQ(r.num_steps, 2);
  EXPECT_EQ(r.images_per_prompt, 2);
  EXPECT_EQ(r.seed, 7u);
  EXPECT_EQ(r.width, 64);
}

TEST_F(GenerateJob, EmptyPromptAndRandomSeed) {
  rt::GenerateInputs in = tiny_inputs();
  in.prompt = "";
  in.flags.seed.reset();
  const rt::GenerateJob job = rt::resolve_generate_job(in);
  EXPECT_EQ(job.prompts, std::vector<std::string>{""});
  EXPECT_TRUE(job.seed_was_random);
}

TEST_F(GenerateJob, OneLineErrorsBeforeLoading) {
  rt::GenerateInputs in = tiny_inputs();
  in.flags.width = 100;
  EXPECT_NE(error_of(in).find("16"), std::string::npos) << error_of(in);
  in = tiny_inputs();
  in.flags.model = (tmp_ / "no-such-model").string();
  EXPECT_NE(error_of(in).find("no-such-model"), std::string::npos);
  in = tiny_inputs();
  in.reference_paths = {(tmp_ / "missing.png").string()};
  EXPECT_NE(error_of(in).find("missing.png"), std::string::npos);
  in = tiny_inputs();
  in.prompt.reset();
  EXPECT_NE(error_of(in).find("no prompt"), std::string::npos);
  in = tiny_inputs();
  in.prompts_file = (tmp_ / "p.txt").string();
  EXPECT_NE(error_of(in).find("not both"), std::string::npos);
  in = tiny_inputs();
  in.flags.filename_pattern = "{bogus}";
  EXPECT_NE(error_of(in).find("unknown placeholder {bogus}"), std::string::npos);
  in = tiny_inputs();
  in.flags.max_sequence_length = 1000;
  EXPECT_NE(error_of(in).find("--max-sequence-length 1000"), std::string::npos);
  in = tiny_inputs();
  std::ofstream(tmp_ / "bad.yaml") << "steps: 2\ncolour: red\n";
  in.preset = (tmp_ / "bad.yaml").string();
  const std::string e = error_of(in);
  EXPECT_NE(e.find("bad.yaml:2: 'colour' is not a preset key"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos);
  EXPECT_FALSE(fs::exists(tmp_ / "out"));
}

// Components that do not fit together but fit one at a time: low-memory mode is chosen (with a
// note) unless low_memory was set to false explicitly, which keeps the one-line OutOfMemory error.
TEST_F(GenerateJob, ChoosesLowMemoryWhenTheComponentsDoNotFitTogether) {
  // The smallest RAM limit each mode accepts: weights resident at once + the activation estimate.
  auto threshold = [&](bool low_memory) {
    size_t lo = 1, hi = size_t{1} << 40;  // lo fails, hi passes
    while (hi - lo > 1) {
      const size_t mid = lo + (hi - lo) / 2;
      rt::GenerateInputs in = tiny_inputs();
      in.flags.low_memory = low_memory;
      in.ram_limit_bytes = mid;
      (error_of(in).empty() ? hi : lo) = mid;
    }
    return hi;
  };
  const size_t low = threshold(true), all = threshold(false);
  ASSERT_LT(low, all);

  rt::GenerateInputs in = tiny_inputs();
  in.ram_limit_bytes = low;
  const rt::GenerateJob job = rt::resolve_generate_job(in);
  EXPECT_TRUE(job.low_memory);
  EXPECT_NE(job.low_memory_note.find("low-memory mode"), std::string::npos) << job.low_memory_note;

  in.ram_limit_bytes = all;  // everything fits: stays all-resident, no note
  const rt::GenerateJob resident = rt::resolve_generate_job(in);
  EXPECT_FALSE(resident.low_memory);
  EXPECT_TRUE(resident.low_memory_note.empty());

  in.ram_limit_bytes = low;
  in.flags.low_memory = false;  // asked for all-resident: refused, one line
  const std::string error = error_of(in);
  EXPECT_NE(error.find("GiB"), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;

  in.ram_limit_bytes = low - 1;  // not even one component at a time
  in.flags.low_memory.reset();
  EXPECT_FALSE(error_of(in).empty());
}

